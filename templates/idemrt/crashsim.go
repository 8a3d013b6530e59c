package idemrt

// The crash simulation that every generated package carries in its tests.
//
// A scenario runs a job through phases of source data on a fresh database,
// crashing, pausing or faulting it at chosen crash points. A crash parks the
// job goroutine for good (nothing unwinds, no deferred rollback runs) and
// kills its database sessions the way a dying process would; recovery starts
// a new incarnation from nothing. Invariants are checked at every point on
// committed state through a separate connection, and at the end.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// simStore is what the harness needs from the generated Store.
type simStore interface {
	Migrate(ctx context.Context) error
	engineStore() store
}

// simEnv is a database kind the simulation runs on.
type simEnv interface {
	name() string
	// fresh returns an empty, migrated database for one scenario.
	fresh(t testing.TB) simDB
	// attach opens the scenario database a parent process named (subprocess mode).
	attach(t testing.TB, locator string) simDB
}

// simDB is one scenario's database.
type simDB interface {
	// incarnation opens a new "process": new connections, nothing shared.
	// kill aborts its sessions as a dying process would; close releases a
	// finished incarnation.
	incarnation(t testing.TB) (st store, kill func(), close func())
	// observer reads committed state on its own connection.
	observer() store
	// close releases the scenario's database.
	close()
	// locator names the database for a child process.
	locator() string
}

// simVerbs are one job value's verbs.
type simVerbs[U any] struct {
	run      func(ctx context.Context) (Report, error)
	process  func(ctx context.Context, units ...U) (Report, error)
	drain    func(ctx context.Context) (Report, error)
	backfill func(ctx context.Context, w Window) (Report, error)
}

// simEffect describes one effect for the model.
type simEffect[U any] struct {
	name  string
	when  effectWhen
	keyOf func(U) string
}

// simJob is what the generated test tells the harness about a job.
type simJob[U any] struct {
	name       string
	source     string // watermark, cursor or none
	points     []crashPoint
	insertOnce bool
	hasDest    bool
	stage      bool // units and progress share one transaction per batch
	lease      time.Duration
	unit       func(id, rev int) U
	keyOf      func(U) string
	markOf     func(U) time.Time
	effects    []simEffect[U]
	rows       func(ctx context.Context, st store) ([]U, error)
	canonical  func(U) U
	newJob     func(st store, src any, fx *simProvider, opts ...Option) (simVerbs[U], error)
}

// simBase is the fixture's time origin; whole seconds, so every database keeps it exactly.
var simBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ---- the outside world: source and provider ----

// simWindowSource serves the current version of each unit by watermark window, three per page.
type simWindowSource[U any] struct {
	mu     sync.Mutex
	units  map[string]U
	keyOf  func(U) string
	markOf func(U) time.Time
}

func (s *simWindowSource[U]) Fetch(ctx context.Context, w Window, page string) ([]U, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []U
	for _, u := range s.units {
		if m := s.markOf(u); !m.Before(w.Since) && m.Before(w.Until) {
			in = append(in, u)
		}
	}
	sort.Slice(in, func(i, j int) bool {
		if c := s.markOf(in[i]).Compare(s.markOf(in[j])); c != 0 {
			return c < 0
		}
		return s.keyOf(in[i]) < s.keyOf(in[j])
	})
	return simPage(in, page)
}

func simPage[U any](in []U, page string) ([]U, string, error) {
	start := 0
	if page != "" {
		fmt.Sscan(page, &start)
	}
	start = min(start, len(in))
	end := min(start+3, len(in))
	next := ""
	if end < len(in) {
		next = fmt.Sprint(end)
	}
	return in[start:end], next, nil
}

// simCursorSource serves a change log; the cursor is a log position.
type simCursorSource[U any] struct {
	mu  sync.Mutex
	log []U
}

func (s *simCursorSource[U]) Fetch(ctx context.Context, cursor string) ([]U, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos := 0
	if cursor != "" {
		fmt.Sscan(cursor, &pos)
	}
	pos = min(pos, len(s.log))
	end := min(pos+3, len(s.log))
	return slices.Clone(s.log[pos:end]), fmt.Sprint(end), nil
}

type simFault int

const (
	faultNone     simFault = iota
	faultRespLost          // the provider applies, then the caller sees an error
	faultFailPre           // the provider fails before applying
)

// simProvider is the fake outside provider: it counts calls and applied
// effects per key, and honours the idempotency key it is given.
type simProvider struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
	effect  map[string]string // key -> effect name
	n       int
	faults  map[int]simFault // by call number
	journal *os.File         // subprocess mode: every call, synced before it returns
}

func newSimProvider() *simProvider {
	return &simProvider{calls: map[string]int{}, applied: map[string]int{}, effect: map[string]string{}, faults: map[int]simFault{}}
}

func (p *simProvider) call(ctx context.Context, effect, key string) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.n
	p.n++
	p.calls[key]++
	p.effect[key] = effect
	if p.faults[n] == faultFailPre {
		return nil, errors.New("simulated provider failure before applying")
	}
	if p.applied[key] == 0 {
		p.applied[key] = 1
	}
	if p.journal != nil {
		fmt.Fprintf(p.journal, "%s\tapplied\n", key)
		_ = p.journal.Sync()
	}
	if p.faults[n] == faultRespLost {
		return nil, errors.New("simulated timeout after the provider applied")
	}
	return []byte("result:" + key), nil
}

// ---- scenarios ----

// simScenario is one run of the fixture under a fault plan.
type simScenario struct {
	family     string
	crashAt    []int        // global hit numbers to crash at, in order
	errorAt    map[int]bool // hit numbers where the hook returns an error (commit unknown)
	faults     map[int]simFault
	preempt    int    // hit number where worker A pauses while B runs the next phase; -1 none
	double     bool   // start each phase twice at once
	seed       uint64 // >0: two workers at once with seeded jitter at every point
	subprocess int    // >=0: the first run of phase 0 is a child process that exits at this hit
	mismatch   bool   // after convergence, redeliver a known key with a changed payload
}

func (s simScenario) String() string {
	var parts []string
	parts = append(parts, s.family)
	if len(s.crashAt) > 0 {
		parts = append(parts, fmt.Sprint("crash@", strings.Trim(fmt.Sprint(s.crashAt), "[]")))
	}
	for k, f := range s.faults {
		parts = append(parts, fmt.Sprintf("fault%d@call%d", f, k))
	}
	for k := range s.errorAt {
		parts = append(parts, fmt.Sprintf("error@%d", k))
	}
	if s.preempt >= 0 {
		parts = append(parts, fmt.Sprintf("preempt@%d", s.preempt))
	}
	if s.seed > 0 {
		parts = append(parts, fmt.Sprintf("seed=%d", s.seed))
	}
	if s.subprocess >= 0 && s.family == "subprocess" {
		parts = append(parts, fmt.Sprintf("exit@%d", s.subprocess))
	}
	return strings.Join(parts, " ")
}

// simRun is the state of one scenario.
type simRun[U any] struct {
	t   testing.TB
	job *simJob[U]
	db  simDB
	sc  simScenario
	env string

	mu            sync.Mutex
	checkMu       sync.Mutex
	child         bool // this process is a subprocess-mode child: exit at the crash, check nothing
	hits          int
	phaseHits     int // hits before convergence: faults are planned only among these
	callsInPhases int
	trace         []crashPoint
	violations    []string
	clock         time.Time
	lastMark      time.Time
	lastPos       int64
	doneKeys      map[string]bool
	paused        chan struct{}
	resume        chan struct{}
	crashed       chan struct{}
	rng           *rand.Rand

	prov   *simProvider
	window *simWindowSource[U]
	cursor *simCursorSource[U]
	phases [][]U // the versions each phase serves or hands in
}

func (r *simRun[U]) now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock
}

func (r *simRun[U]) setClock(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock = t
}

func (r *simRun[U]) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) < 20 {
		r.violations = append(r.violations, fmt.Sprintf(format, args...))
	}
}

// hook is every incarnation's crash hook: count, check, then crash, pause or fault.
func (r *simRun[U]) hook(crashed chan<- struct{}) crashHook {
	return func(ctx context.Context, p crashPoint, detail string) error {
		r.mu.Lock()
		n := r.hits
		r.hits++
		r.trace = append(r.trace, p)
		crash := len(r.sc.crashAt) > 0 && r.sc.crashAt[0] == n
		if crash {
			r.sc.crashAt = r.sc.crashAt[1:]
		}
		pause := r.sc.preempt == n
		errNow := r.sc.errorAt[n]
		var jitter time.Duration
		if r.rng != nil {
			jitter = time.Duration(r.rng.IntN(300)) * time.Microsecond
		}
		r.mu.Unlock()

		if r.child {
			if crash {
				os.Exit(simChildCrashed) // a real process death: the OS drops connections and locks
			}
			return nil
		}
		r.checkAt(ctx, p, detail)
		if crash {
			crashed <- struct{}{}
			select {} // the process is gone: park for good, unwind nothing
		}
		if pause {
			r.paused <- struct{}{}
			<-r.resume
		}
		if jitter > 0 {
			time.Sleep(jitter)
		}
		if errNow {
			return errors.New("simulated: the commit succeeded but the client saw an error")
		}
		return nil
	}
}

// checkAt checks the invariants that must hold at every point, on
// committed state, while the job is stopped at p.
func (r *simRun[U]) checkAt(ctx context.Context, p crashPoint, detail string) {
	// Observations are serialised: two workers' reads must not interleave,
	// or an older snapshot judged after a newer one looks like a regression.
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	obs := r.db.observer().auto()
	ctx = context.WithoutCancel(ctx)
	if r.job.source == SourceWatermarkName {
		prog, err := obs.progress(ctx, r.job.name)
		if err != nil {
			r.violate("at %s: read progress: %v", p, err)
			return
		}
		if prog.hasMark {
			r.mu.Lock()
			back := prog.watermark.Before(r.lastMark)
			last := r.lastMark
			if !back {
				r.lastMark = prog.watermark
			}
			r.mu.Unlock()
			if back {
				r.violate("at %s: watermark moved backwards from %s to %s", p, last.Format(time.RFC3339), prog.watermark.Format(time.RFC3339))
			}
			r.checkBehindMark(ctx, p, prog.watermark)
		}
	}
	if r.job.source == SourceCursorName {
		prog, err := obs.progress(ctx, r.job.name)
		if err == nil && prog.found {
			r.mu.Lock()
			back, last := prog.position < r.lastPos, r.lastPos
			if !back {
				r.lastPos = prog.position
			}
			r.mu.Unlock()
			if back {
				r.violate("at %s: cursor moved backwards from position %d to %d", p, last, prog.position)
			}
		}
		if err == nil && prog.cursor != "" {
			var pos int
			fmt.Sscan(prog.cursor, &pos)
			r.checkBehindCursor(ctx, p, pos)
		}
	}
	entries, err := obs.ledger(ctx)
	if err != nil {
		r.violate("at %s: read ledger: %v", p, err)
		return
	}
	r.mu.Lock()
	for _, e := range entries {
		if e.State == stateDone {
			r.doneKeys[e.Key] = true
		} else if r.doneKeys[e.Key] {
			r.mu.Unlock()
			r.violate("at %s: ledger row %s went back from done to %s", p, e.Key, e.State)
			r.mu.Lock()
		}
	}
	r.mu.Unlock()
	if p == pointEffectBeforeCall {
		i := slices.IndexFunc(entries, func(e LedgerEntry) bool { return e.Key == detail })
		if i < 0 || entries[i].State != statePending || entries[i].LeaseOwner == "" {
			r.violate("at %s: provider about to be called for %s without a committed, leased reservation", p, detail)
		}
	}
}

// checkBehindMark: every source unit behind the stored watermark is applied.
func (r *simRun[U]) checkBehindMark(ctx context.Context, p crashPoint, mark time.Time) {
	r.window.mu.Lock()
	var behind []U
	for _, u := range r.window.units {
		if r.job.markOf(u).Before(mark) {
			behind = append(behind, u)
		}
	}
	r.window.mu.Unlock()
	r.checkApplied(ctx, p, behind, func(u U) []U { return []U{u} })
}

// checkBehindCursor: every log entry before the stored cursor is applied
// (the row holds that version or a later one of the same key).
func (r *simRun[U]) checkBehindCursor(ctx context.Context, p crashPoint, pos int) {
	r.cursor.mu.Lock()
	log := slices.Clone(r.cursor.log)
	r.cursor.mu.Unlock()
	pos = min(pos, len(log))
	r.checkApplied(ctx, p, log[:pos], func(u U) []U {
		var later []U
		for _, v := range log {
			if r.job.keyOf(v) == r.job.keyOf(u) {
				later = append(later, v)
			}
		}
		return later
	})
}

func (r *simRun[U]) checkApplied(ctx context.Context, p crashPoint, behind []U, acceptable func(U) []U) {
	if len(behind) == 0 {
		return
	}
	if r.job.hasDest {
		rows, err := r.job.rows(ctx, r.db.observer())
		if err != nil {
			r.violate("at %s: read rows: %v", p, err)
			return
		}
		byKey := map[string][]byte{}
		for _, row := range rows {
			byKey[r.job.keyOf(row)] = simJSON(r.job.canonical(row))
		}
		for _, u := range behind {
			got, ok := byKey[r.job.keyOf(u)]
			if !ok || !slices.ContainsFunc(acceptable(u), func(v U) bool { return bytes.Equal(simJSON(r.job.canonical(v)), got) }) {
				r.violate("at %s: progress is ahead of work: %s is behind the stored position but not applied", p, r.job.keyOf(u))
				return
			}
		}
		return
	}
	entries, err := r.db.observer().auto().ledger(ctx)
	if err != nil {
		return
	}
	for _, u := range behind {
		for _, fx := range r.job.effects {
			k := fx.keyOf(u)
			if !slices.ContainsFunc(entries, func(e LedgerEntry) bool { return e.Key == k }) {
				r.violate("at %s: progress is ahead of work: effect %s of %s is behind the stored position but not reserved", p, fx.name, r.job.keyOf(u))
				return
			}
		}
	}
}

func simJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Source kind names, as in the spec.
const (
	SourceWatermarkName = "watermark"
	SourceCursorName    = "cursor"
	SourceNoneName      = "none"
)

// simMark is the watermark field of unit id at revision rev: each
// revision lands in the window of the phase that serves it.
func simMark(id, rev int) time.Time {
	phase := rev - 1
	if id > 6 {
		phase = 1
	}
	// Phases are two hours apart: recoveries within a phase move the clock
	// (and so the mark) by minutes, never past the next phase's data.
	return simBase.Add(time.Duration(2*phase)*time.Hour + time.Duration(id)*time.Second)
}

func newSimLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// simInTx reports whether a job stopped at p holds its write transaction open.
func simInTx[U any](job *simJob[U], p crashPoint) bool {
	if p == pointUnitBeforeCommit {
		return true
	}
	return job.stage && (p == pointUnitStart || p == pointProgressBefore || p == pointProgressAfter)
}

// simPhases is the fixture: six units in two pages, then one changed and
// one new (watermark, cursor); for handed-in units, two batches of three,
// then a redelivery with one new unit.
func simPhases[U any](job *simJob[U]) [][]U {
	var p1, p2 []U
	for id := 1; id <= 6; id++ {
		p1 = append(p1, job.unit(id, 1))
	}
	if job.source == SourceNoneName {
		p2 = append(p2, job.unit(4, 1), job.unit(5, 1), job.unit(6, 1), job.unit(7, 1))
	} else {
		p2 = append(p2, job.unit(1, 2), job.unit(7, 1))
	}
	return [][]U{p1, p2}
}

// phaseClock is the time a phase runs at: after its units' marks.
func phaseClock(phase int) time.Time { return simBase.Add(time.Duration(2*phase+1) * time.Hour) }

func (r *simRun[U]) serve(phase int) {
	for _, u := range r.phases[phase] {
		switch r.job.source {
		case SourceWatermarkName:
			r.window.mu.Lock()
			r.window.units[r.job.keyOf(u)] = u
			r.window.mu.Unlock()
		case SourceCursorName:
			r.cursor.mu.Lock()
			r.cursor.log = append(r.cursor.log, u)
			r.cursor.mu.Unlock()
		}
	}
}

// outcome of one job invocation in its goroutine.
type simOutcome struct {
	rep     Report
	err     error
	crashed bool
}

// invoke runs one phase's work on a new incarnation in its own goroutine
// and returns when it finishes or crashes; pausedCh reports a preempt pause.
func (r *simRun[U]) invoke(phase int) (simOutcome, func()) {
	st, kill, closeInc := r.db.incarnation(r.t)
	crashed := make(chan struct{}, 1)
	src := any(r.window)
	if r.job.source == SourceCursorName {
		src = r.cursor
	}
	verbs, err := r.job.newJob(st, src, r.prov, WithClock(r.now), WithStart(simBase.Add(-24*time.Hour)),
		WithLogger(simLogger), withCrashHook(r.hook(crashed)))
	if err != nil {
		r.t.Fatalf("new job: %v", err)
	}
	done := make(chan simOutcome, 1)
	go func() {
		ctx := context.Background()
		var out simOutcome
		switch r.job.source {
		case SourceNoneName:
			units := r.phases[phase]
			out.rep, out.err = verbs.process(ctx, units[:len(units)/2]...)
			if out.err == nil {
				var rep Report
				rep, out.err = verbs.process(ctx, units[len(units)/2:]...)
				out.rep.add(rep)
			}
			if out.err == nil {
				var rep Report
				rep, out.err = verbs.drain(ctx)
				out.rep.add(rep)
			}
		default:
			out.rep, out.err = verbs.run(ctx)
		}
		done <- out
	}()
	select {
	case out := <-done:
		closeInc()
		return out, nil
	case <-crashed:
		kill()
		return simOutcome{crashed: true}, nil
	case <-r.paused:
		// Paused for a preemption: the caller resumes it and then waits.
		return simOutcome{}, func() {
			r.resume <- struct{}{}
			select {
			case <-done:
				closeInc()
			case <-crashed:
				kill()
			}
		}
	}
}

// play runs the whole scenario and returns the invariant violations.
func (r *simRun[U]) play() []string {
	for phase := range r.phases {
		r.setClock(phaseClock(phase))
		r.serve(phase)
		if phase == 0 && r.sc.family == "subprocess" {
			if r.runChild() {
				simChildDeaths.Add(1)
				r.recover(phase)
			}
			continue
		}
		if r.sc.seed > 0 || r.sc.double {
			r.concurrently(phase)
		} else {
			out, resumeA := r.invoke(phase)
			if resumeA != nil {
				// Worker A is paused: the world moves on, worker B runs the
				// next phase to the end, then A resumes with its old view.
				if phase+1 < len(r.phases) {
					r.setClock(phaseClock(phase + 1).Add(r.job.lease + time.Minute))
					r.serve(phase + 1)
					r.cleanRun(phase + 1)
				}
				resumeA()
			} else if out.crashed {
				// Recover: a new process, after the crashed one's leases.
				r.recover(phase)
			}
		}
	}
	r.mu.Lock()
	r.phaseHits = r.hits
	r.mu.Unlock()
	r.prov.mu.Lock()
	r.callsInPhases = r.prov.n
	r.prov.mu.Unlock()
	// Convergence: at most three clean runs after the last fault.
	last := len(r.phases) - 1
	for i := 0; i < 3; i++ {
		r.setClock(r.now().Add(r.job.lease + time.Minute))
		if out := r.cleanRun(last); out.err == nil && out.rep.Failed == 0 && out.rep.EffectsFailed == 0 && out.rep.EffectsBusy == 0 {
			break
		}
	}
	return r.checkEnd()
}

// recover restarts after a crash: leases expire, and the phase runs again
// (it may crash again where the scenario says so).
func (r *simRun[U]) recover(phase int) {
	for attempt := 0; attempt < 3; attempt++ {
		r.setClock(r.now().Add(r.job.lease + time.Minute))
		out, resume := r.invoke(phase)
		if resume != nil {
			resume()
		}
		if !out.crashed {
			return
		}
	}
}

func (r *simRun[U]) cleanRun(phase int) simOutcome {
	out, resume := r.invoke(phase)
	if resume != nil {
		resume()
	}
	return out
}

// concurrently runs two workers on the same phase at once.
func (r *simRun[U]) concurrently(phase int) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, resume := r.invoke(phase)
			if resume != nil {
				resume()
			}
			if out.crashed {
				r.recover(phase)
			}
		}()
	}
	wg.Wait()
}

// checkEnd checks the end state against the model built from the fixture.
func (r *simRun[U]) checkEnd() []string {
	ctx := context.Background()
	obs := r.db.observer()
	newest := map[string]U{}
	var order []string
	for _, ph := range r.phases {
		for _, u := range ph {
			k := r.job.keyOf(u)
			if _, ok := newest[k]; !ok {
				order = append(order, k)
			}
			newest[k] = u
		}
	}
	if r.job.hasDest {
		rows, err := r.job.rows(ctx, obs)
		if err != nil {
			r.violate("end: read rows: %v", err)
		}
		got := map[string][]byte{}
		for _, row := range rows {
			k := r.job.keyOf(row)
			if _, dup := got[k]; dup {
				r.violate("end: two rows for key %s", k)
			}
			got[k] = simJSON(r.job.canonical(row))
		}
		if len(rows) != len(newest) {
			r.violate("end: %d rows, want one per key (%d)", len(rows), len(newest))
		}
		for _, k := range order {
			want := simJSON(r.job.canonical(newest[k]))
			if r.job.insertOnce {
				want = simJSON(r.job.canonical(r.firstVersion(k)))
				if r.overlapping() && r.isVersionOf(k, got[k]) {
					continue // the schedule decided which version was inserted first
				}
			}
			if !bytes.Equal(got[k], want) {
				r.violate("end: row %s = %s, want %s", k, got[k], want)
			}
		}
	}
	// Effects: exactly the owed keys, each applied once.
	must, may := r.owedEffects()
	r.prov.mu.Lock()
	for k := range must {
		if r.prov.applied[k] != 1 {
			r.violate("end: effect %s applied %d times, want once", k, r.prov.applied[k])
		}
	}
	for k := range r.prov.applied {
		if !must[k] && !may[k] {
			r.violate("end: provider applied unexpected effect key %s", k)
		}
	}
	applied := maps.Clone(r.prov.applied)
	r.prov.mu.Unlock()
	entries, err := obs.auto().ledger(ctx)
	if err != nil {
		r.violate("end: read ledger: %v", err)
	}
	for _, e := range entries {
		if e.State != stateDone {
			r.violate("end: ledger row %s is %s, want done", e.Key, e.State)
		}
		if applied[e.Key] != 1 {
			r.violate("end: ledger row %s matches no applied effect", e.Key)
		}
	}
	if len(entries) != len(applied) {
		r.violate("end: %d ledger rows for %d applied effects, want one each", len(entries), len(applied))
	}
	if r.sc.mismatch {
		r.checkMismatch(ctx)
	}
	// Re-runs change nothing; a backfill from the start performs nothing.
	r.setClock(r.now().Add(time.Minute))
	out := r.cleanRun(len(r.phases) - 1)
	if out.err != nil || out.rep.Inserted+out.rep.Updated+out.rep.Failed+out.rep.EffectsDone != 0 {
		r.violate("end: a re-run changed something: %s (err %v)", out.rep, out.err)
	}
	if r.job.source == SourceWatermarkName {
		st, _, closeInc := r.db.incarnation(r.t)
		verbs, _ := r.job.newJob(st, r.window, r.prov, WithClock(r.now), WithLogger(simLogger))
		rep, err := verbs.backfill(ctx, Window{Since: simBase.Add(-24 * time.Hour), Until: r.now()})
		closeInc()
		if err != nil || rep.Inserted+rep.Updated+rep.Failed+rep.EffectsDone != 0 {
			r.violate("end: a backfill from the start changed something: %s (err %v)", rep, err)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.violations
}

// checkMismatch redelivers unit 1 with a changed payload: it must be
// reported as a mismatch, write nothing and perform nothing.
func (r *simRun[U]) checkMismatch(ctx context.Context) {
	st, _, closeInc := r.db.incarnation(r.t)
	defer closeInc()
	verbs, err := r.job.newJob(st, nil, r.prov, WithClock(r.now), WithLogger(simLogger))
	if err != nil {
		r.violate("mismatch: new job: %v", err)
		return
	}
	changed := r.job.unit(1, 2)
	if simJSONEqual(r.job.canonical(changed), r.job.canonical(r.job.unit(1, 1))) {
		return // the fixture cannot change this unit's payload
	}
	r.prov.mu.Lock()
	before := r.prov.n
	r.prov.mu.Unlock()
	rep, _ := verbs.process(ctx, changed)
	r.prov.mu.Lock()
	calls := r.prov.n - before
	r.prov.mu.Unlock()
	if rep.Mismatched != 1 || rep.Inserted+rep.Updated != 0 || calls != 0 {
		r.violate("mismatch: a repeated key with a different payload was not reported as a mismatch: %s, %d provider calls", rep, calls)
	}
}

func simJSONEqual(a, b any) bool { return bytes.Equal(simJSON(a), simJSON(b)) }

func (r *simRun[U]) isVersionOf(key string, row []byte) bool {
	for _, ph := range r.phases {
		for _, u := range ph {
			if r.job.keyOf(u) == key && bytes.Equal(simJSON(r.job.canonical(u)), row) {
				return true
			}
		}
	}
	return false
}

func (r *simRun[U]) firstVersion(key string) U {
	for _, ph := range r.phases {
		for _, u := range ph {
			if r.job.keyOf(u) == key {
				return u
			}
		}
	}
	var zero U
	return zero
}

// overlapping reports whether two workers ran at once: then a version can
// be superseded before it is ever written, and which version is written
// first is up to the schedule.
func (r *simRun[U]) overlapping() bool {
	return r.sc.preempt >= 0 || r.sc.double || r.sc.seed > 0
}

// owedEffects is the model of which effect keys must be performed (must)
// and which may be (may: owed only if the schedule wrote that version as a
// change). Without overlap, every served version is written in order.
func (r *simRun[U]) owedEffects() (must, may map[string]bool) {
	must, may = map[string]bool{}, map[string]bool{}
	versions := map[string][]U{}
	var order []string
	for _, ph := range r.phases {
		for _, u := range ph {
			k := r.job.keyOf(u)
			if _, ok := versions[k]; !ok {
				order = append(order, k)
			}
			versions[k] = append(versions[k], u)
		}
	}
	relaxed := r.overlapping()
	for _, k := range order {
		vs := versions[k]
		for _, fx := range r.job.effects {
			for i, u := range vs {
				first, last := i == 0, i == len(vs)-1
				owed := false
				switch {
				case fx.when == whenAlways:
					owed = true
				case fx.when == whenInserted || r.job.insertOnce:
					owed = first
					if relaxed {
						// Whichever version was written first was the insert.
						may[fx.keyOf(u)] = true
						owed = owed && len(vs) == 1
					}
				default: // changed
					owed = !relaxed || last
					may[fx.keyOf(u)] = true
				}
				if owed {
					must[fx.keyOf(u)] = true
				}
			}
		}
	}
	return must, may
}

var simLogger = newSimLogger()

// simParallel is how many scenarios play at once; they wait mostly on the database.
const simParallel = 4

// Subprocess mode: the test binary re-executes itself as a child that runs
// the first run of phase 0 and exits for real at the planned point. The
// fake provider's calls are journaled to a file, synced before each call
// returns, so the outside world outlives the process.
const (
	simChildEnv     = "IDEMGEN_CRASHSIM_CHILD"
	simChildCrashed = 73
)

// simChildDeaths counts children that died at their planned point.
var simChildDeaths atomic.Int64

type simChildSpec struct {
	Locator string
	CrashAt int
	Journal string
}

// runChild runs phase 0's first run in a child process and merges what it
// did at the provider; it reports whether the child died at its point.
func (r *simRun[U]) runChild() bool {
	journal := filepath.Join(r.t.TempDir(), "provider.journal")
	spec, _ := json.Marshal(simChildSpec{Locator: r.db.locator(), CrashAt: r.sc.subprocess, Journal: journal})
	test, sub, _ := strings.Cut(r.t.Name(), "/")
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$/^"+sub+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), simChildEnv+"="+string(spec))
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	crashed := errors.As(err, &exit) && exit.ExitCode() == simChildCrashed
	if err != nil && !crashed {
		r.violate("subprocess child failed: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(journal)
	r.prov.mu.Lock()
	defer r.prov.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		key, applied, ok := strings.Cut(line, "\t")
		if !ok {
			continue
		}
		r.prov.calls[key]++
		r.prov.n++
		if applied == "applied" && r.prov.applied[key] == 0 {
			r.prov.applied[key] = 1
		}
	}
	return crashed
}

// simChild is the child side: attach to the parent's database, replay the
// fixture's first phase and run until the planned exit.
func simChild[U any](t *testing.T, env simEnv, job *simJob[U], raw string) {
	var spec simChildSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatalf("child spec: %v", err)
	}
	f, err := os.OpenFile(spec.Journal, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	r := &simRun[U]{
		t: t, job: job, db: env.attach(t, spec.Locator), child: true,
		sc:       simScenario{family: "child", crashAt: []int{spec.CrashAt}, preempt: -1, subprocess: -1},
		doneKeys: map[string]bool{}, paused: make(chan struct{}), resume: make(chan struct{}),
		prov:   newSimProvider(),
		window: &simWindowSource[U]{units: map[string]U{}, keyOf: job.keyOf, markOf: job.markOf},
		cursor: &simCursorSource[U]{},
	}
	r.prov.journal = f
	r.phases = simPhases(job)
	r.setClock(phaseClock(0))
	r.serve(0)
	r.invoke(0)
	os.Exit(0) // finished before the planned point
}

// simulate runs every scenario family for one job on one database kind.
func simulate[U any](t *testing.T, env simEnv, job *simJob[U]) {
	if raw := os.Getenv(simChildEnv); raw != "" {
		simChild(t, env, job, raw)
		return
	}
	start := time.Now()
	deathsBefore := simChildDeaths.Load()
	newRun := func(sc simScenario) *simRun[U] {
		r := &simRun[U]{
			t: t, job: job, db: env.fresh(t), sc: sc, env: env.name(),
			doneKeys: map[string]bool{}, paused: make(chan struct{}), resume: make(chan struct{}),
			prov:   newSimProvider(),
			window: &simWindowSource[U]{units: map[string]U{}, keyOf: job.keyOf, markOf: job.markOf},
			cursor: &simCursorSource[U]{},
		}
		if sc.faults != nil {
			r.prov.faults = sc.faults
		}
		if sc.seed > 0 {
			r.rng = rand.New(rand.NewPCG(sc.seed, 0))
		}
		r.phases = simPhases(job)
		return r
	}
	only := os.Getenv("IDEMGEN_CRASHSIM_SCENARIO")
	var (
		mu        sync.Mutex
		failed    int
		scenarios int
		wg        sync.WaitGroup
		slots     = make(chan struct{}, simParallel)
		families  = map[string]bool{}
	)
	play := func(sc simScenario) *simRun[U] {
		r := newRun(sc)
		v := r.play()
		r.db.close()
		mu.Lock()
		defer mu.Unlock()
		if len(v) > 0 {
			failed++
			families[sc.family] = true
			if failed <= 5 {
				t.Errorf("crashsim %s %s: scenario %q broke invariants:\n  %s\nreplay: IDEMGEN_CRASHSIM_SCENARIO=%q go test -run '%s' .",
					job.name, env.name(), sc, strings.Join(v, "\n  "), sc.String(), t.Name())
			}
		}
		return r
	}
	// runOne plays a scenario on the worker pool (scenarios share nothing:
	// each has its own database, provider and clock).
	failFast := os.Getenv("IDEMGEN_CRASHSIM_FAILFAST") != ""
	runOne := func(sc simScenario) {
		if only != "" && sc.String() != only {
			return
		}
		mu.Lock()
		stop := failFast && failed > 0
		mu.Unlock()
		if stop {
			return
		}
		mu.Lock()
		scenarios++
		mu.Unlock()
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			play(sc)
		}()
	}

	// Discovery: a clean run records the trace of points hit.
	var clean *simRun[U]
	if only == "" || only == "clean" {
		scenarios++
		clean = play(simScenario{family: "clean", preempt: -1})
	} else {
		// Replaying one scenario: rediscover the trace quietly.
		clean = newRun(simScenario{family: "clean", preempt: -1})
		clean.play()
		clean.db.close()
	}
	var trace []crashPoint
	if clean != nil {
		trace = slices.Clone(clean.trace[:clean.phaseHits])
		for _, p := range job.points {
			if !slices.Contains(trace, p) {
				t.Errorf("crashsim %s %s: declared point %s never hit in discovery", job.name, env.name(), p)
			}
		}
		clean.prov.mu.Lock()
		for k, n := range clean.prov.calls {
			if n != 1 {
				t.Errorf("crashsim %s %s: clean run called the provider %d times for %s", job.name, env.name(), n, k)
			}
		}
		calls := clean.callsInPhases
		clean.prov.mu.Unlock()
		if trace == nil && only == "" {
			t.Fatalf("crashsim %s %s: discovery hit no points", job.name, env.name())
		}
		// crash@k over the whole trace.
		for k := range trace {
			runOne(simScenario{family: "crash", crashAt: []int{k}, preempt: -1})
		}
		// crash@k,j sampled: a second crash during recovery.
		rng := rand.New(rand.NewPCG(uint64(len(trace)), 7))
		for range 8 {
			k := rng.IntN(len(trace))
			runOne(simScenario{family: "crash2", crashAt: []int{k, k + 1 + rng.IntN(len(trace)/2+1)}, preempt: -1})
		}
		// Provider faults on every call of the clean run.
		for c := 0; c < calls; c++ {
			runOne(simScenario{family: "resplost", faults: map[int]simFault{c: faultRespLost}, preempt: -1})
			runOne(simScenario{family: "failpre", faults: map[int]simFault{c: faultFailPre}, preempt: -1})
		}
		// Commit unknown: the commit happens, the client sees an error.
		for k, p := range trace {
			if p == pointUnitAfterCommit || p == pointProgressAfter {
				runOne(simScenario{family: "commitunknown", errorAt: map[int]bool{k: true}, preempt: -1})
			}
		}
		// preempt@p over every point of the first phase outside a transaction.
		firstPhase := slices.Index(trace[1:], pointRunStart) + 1
		if firstPhase <= 0 || job.source == SourceNoneName {
			firstPhase = len(trace)
		}
		for k := 0; k < firstPhase; k++ {
			if simInTx(job, trace[k]) {
				continue // inside the write transaction: B would wait on A's locks
			}
			runOne(simScenario{family: "preempt", preempt: k})
		}
		// Same key, different payload: handed-in units must report it.
		if job.source == SourceNoneName {
			runOne(simScenario{family: "mismatch", mismatch: true, preempt: -1})
		}
		// Subprocess: real process deaths at points spread over phase 0,
		// including inside the write transaction.
		phase0 := slices.Index(trace[1:], pointRunStart) + 1
		if phase0 <= 0 || job.source == SourceNoneName {
			phase0 = len(trace) / 2
		}
		var exits []int
		for i := 0; i < 5; i++ {
			exits = append(exits, i*phase0/5)
		}
		if k := slices.Index(trace[:phase0], pointUnitBeforeCommit); k >= 0 {
			exits = append(exits, k)
		}
		for _, k := range slices.Compact(slices.Sorted(slices.Values(exits))) {
			runOne(simScenario{family: "subprocess", subprocess: k, preempt: -1})
		}
		// Double trigger at once, and seeded concurrent schedules.
		runOne(simScenario{family: "double", double: true, preempt: -1})
		for seed := uint64(1); seed <= 4; seed++ {
			runOne(simScenario{family: "concurrent", seed: seed, preempt: -1})
		}
	}
	wg.Wait()
	if only != "" && scenarios == 0 {
		t.Fatalf("no scenario named %q", only)
	}
	deaths := simChildDeaths.Load() - deathsBefore
	if only == "" && deaths == 0 {
		t.Errorf("crashsim %s %s: no subprocess child died at its point: subprocess mode is not exercised", job.name, env.name())
	}
	if failed == 0 {
		t.Logf("crashsim %s %s: %d points, %d scenarios (%d real process deaths), all invariants held (%s)",
			job.name, env.name(), len(trace), scenarios, deaths, time.Since(start).Round(time.Millisecond))
	} else {
		t.Errorf("crashsim %s %s: %d of %d scenarios broke invariants (families: %s)", job.name, env.name(), failed, scenarios,
			strings.Join(slices.Sorted(maps.Keys(families)), ", "))
	}
}
