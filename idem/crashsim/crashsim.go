package crashsim

// The crash simulation that every generated package carries in its tests.
//
// A scenario runs a job through phases of source data on a fresh database,
// crashing, pausing or faulting it at chosen points: the engine's named
// crash points and every durable SQL statement boundary (sql.go).
// A crash parks the job goroutine for good (nothing unwinds, no deferred
// rollback runs) and kills its database sessions the way a dying process
// would; recovery starts a new incarnation from nothing. Invariants are
// checked at every point on committed state through a separate connection,
// and at the end against the oracle (oracle.go), which computes
// from the spec alone what the job must have done. The families are
// enumerated in families.go.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Points the harness adds around every SQL statement a crashing worker
// sends (sql.go); the detail says whether it is a COMMIT, a
// statement in a transaction ("tx ...") or one on its own ("auto ...").
const (
	pointSQLBefore idemrt.CrashPoint = "sql.before"
	pointSQLAfter  idemrt.CrashPoint = "sql.after"
)

// Store is what the harness needs from the generated Store.
type Store interface {
	Migrate(ctx context.Context) error
	Runtime() idem.Store
}

// Env is a database kind the simulation runs on.
type Env interface {
	name() string
	// fresh returns an empty, migrated database for one scenario.
	fresh(t testing.TB) simDB
	// attach opens the scenario database a parent process named (subprocess mode).
	attach(t testing.TB, locator string) simDB
}

// simDB is one scenario's database.
type simDB interface {
	// incarnation opens a new "process": new connections, nothing shared,
	// every statement reported to sqlHook. kill aborts its sessions as a
	// dying process would; close releases a finished incarnation.
	incarnation(t testing.TB, sqlHook idemrt.CrashHook) (st idem.Store, kill func(), close func())
	// diagnose describes the database's view of the scenario's sessions,
	// for a stalled scenario's report.
	diagnose(ctx context.Context) string
	// abandon gives up a stalled scenario's database: its sessions are
	// ended and it is never handed to another scenario.
	abandon()
	// observer reads committed state on its own connection.
	observer() idem.Store
	// close releases the scenario's database.
	close()
	// locator names the database for a child process.
	locator() string
}

// stopped reports whether a verb's error stopped the call, rather than
// listing units or effects that did not end applied (*idem.FailuresError).
func stopped(err error) bool {
	var fe *idem.FailuresError
	return err != nil && !errors.As(err, &fe)
}

// Verbs are one job value's verbs; nil where the job has none.
type Verbs[U any] struct {
	Run      func(ctx context.Context) (idem.Report, error)
	Process  func(ctx context.Context, units ...U) (idem.Report, error)
	Drain    func(ctx context.Context) (idem.Report, error)
	Backfill func(ctx context.Context, w idem.Window) (idem.Report, error)
	Purge    func(ctx context.Context) (int64, error)
	Stale    func(ctx context.Context, limit int) ([]string, error)
	// ConsumeFrom: a job with consume: runs as a consumer of a broker's
	// source (nil for the others).
	ConsumeFrom func(ctx context.Context, src idembroker.Source, opts ...idembroker.Option) error
}

// Effect is one effect as the spec declares it.
type Effect struct {
	Name        string
	When        idemrt.When
	Key         string // the key template, {version} and {job_version} unrendered
	Version     int32
	KeepResult  bool
	MaxAttempts int
	Retention   time.Duration
	Lease       time.Duration
	// Retry and Timeout are the spec's, when it sets them (zero: the
	// runtime's defaults).
	Retry   idemrt.Backoff
	Timeout time.Duration
	// Rate and Concurrency are the spec's bounds across workers (the
	// simulation runs without the rate: limits.go).
	Rate        idemrt.Rate
	Concurrency int32
	// Circuit is the spec's circuit. Each family runs with the circuit
	// limitsFor gives it: none, or the gate families' own (gate.go).
	Circuit idemrt.Circuit
}

// Job is what the generated test tells the harness about a job: the
// spec's declarations, the fixture, and how to build and read the job. It
// holds no generated key function: the oracle renders keys itself.
type Job[U any] struct {
	Name       string
	Source     string // watermark, cursor or none
	Version    int32
	Points     []idemrt.CrashPoint
	Key        string // the unit key template
	Fields     []Field
	InsertOnce bool
	HasDest    bool
	Stage      bool   // units and progress share one transaction per batch
	NewerWins  string // the newer_wins field, if any
	// UnitMaxAttempts parks a unit whose write failed this many times; 0 never.
	UnitMaxAttempts int
	Overlap         time.Duration
	Lease           time.Duration // the longest effect lease
	Effects         []Effect
	Unit            func(id, rev int) U
	MarkOf          func(U) time.Time
	SetMark         func(*U, time.Time)
	Rows            func(ctx context.Context, st idem.Store) ([]U, error)
	// Tables are the package's bookkeeping tables; a statement outside a
	// transaction on its limits table is not checked after (Job.changed).
	Tables idemrt.Tables
	NewJob func(st idem.Store, src any, fx *Provider, opts ...idem.Option) (Verbs[U], error)
	// Broker is the broker a handed-in job consumes from (consume:), ""
	// for none; the consumer families (consume.go) run when it is set.
	Broker string
	// Headers maps the unit fields a message carries in its headers to
	// the header names (consume: headers).
	Headers map[string]string
}

func (j *Job[U]) keyOf(u U) string { return oracleKey(j.Key, nil, u) }

// simChange is what committed state a statement may have changed, of what
// checkAt reads: the progress row, the ledger, the destination's rows.
type simChange uint8

const (
	changedProgress simChange = 1 << iota
	changedLedger
	changedRows
	changedAll = changedProgress | changedLedger | changedRows
)

// changed reports what a statement that has just run (its simStatements
// detail, and for a COMMIT the tables its transaction wrote) may have
// changed of what checkAt reads. A COMMIT changes what its transaction
// wrote; a statement outside a transaction, what it writes (all, when it
// is not plainly one table's write). A SELECT changes nothing, nor does a
// write to the limits table (call slots, pace, circuit gate), which no
// check reads: with rate and concurrency on, those came around every
// provider call, and each cost a check of three reads.
func (j *Job[U]) changed(detail string, wrote *simWrites) simChange {
	if detail == "COMMIT" {
		return j.writesChange(wrote)
	}
	stmt, auto := strings.CutPrefix(detail, "auto ")
	if !auto {
		return 0
	}
	w := &simWrites{any: true}
	if words := strings.Fields(stmt); len(words) > 0 {
		w = &simWrites{}
		w.note(words)
	}
	return j.writesChange(w)
}

// writesChange is what the writes w change of what checkAt reads (nil:
// unknown, all).
func (j *Job[U]) writesChange(w *simWrites) simChange {
	if w == nil || w.any {
		return changedAll
	}
	var c simChange
	for _, table := range w.tables {
		c |= j.tableChange(table)
	}
	return c
}

// tableChange is what a write to table changes of what checkAt reads.
func (j *Job[U]) tableChange(table string) simChange {
	switch {
	case j.Tables.Ledger == "":
		return changedAll // a package generated before Job had its tables
	case table == j.Tables.Ledger:
		return changedLedger
	case table == j.Tables.Progress:
		return changedProgress
	case table == j.Tables.Limits, table == j.Tables.Seen, table == j.Tables.Parked:
		return 0 // no check reads them
	}
	return changedRows
}

// Base is the fixture's time origin; whole seconds, so every database keeps it exactly.
var Base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// simIncKey marks a context with the incarnation that runs under it, so
// the provider can fail one worker's calls.
type simIncKey struct{}

func simIncOf(ctx context.Context) int {
	n, _ := ctx.Value(simIncKey{}).(int)
	return n
}

// ---- the outside world: source and provider ----

// WindowSource serves the current version of each unit by watermark
// window, three per page, and records what it served to whom.
type WindowSource[U any] struct {
	mu     sync.Mutex
	units  map[string]U
	keyOf  func(U) string
	markOf func(U) time.Time
	served map[int][]U
	echo   map[string]*simEcho[U] // writeahead: older versions served once (repeats.go)
	// echoAlways serves each older version to every incarnation, not once
	// (an insert_once destination: see echoed).
	echoAlways bool
}

func (s *WindowSource[U]) Fetch(ctx context.Context, w idem.Window, page string) ([]U, string, error) {
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
	out, next := simPage(s.echoed(in, simIncOf(ctx)), page)
	s.served[simIncOf(ctx)] = append(s.served[simIncOf(ctx)], out...)
	return out, next, nil
}

func simPage[U any](in []U, page string) ([]U, string) {
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
	return slices.Clone(in[start:end]), next
}

// CursorSource serves a change log; the cursor is a log position.
type CursorSource[U any] struct {
	mu     sync.Mutex
	log    []U
	served map[int][]U
}

func (s *CursorSource[U]) Fetch(ctx context.Context, cursor string) ([]U, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pos := 0
	if cursor != "" {
		fmt.Sscan(cursor, &pos)
	}
	pos = min(pos, len(s.log))
	end := min(pos+3, len(s.log))
	out := slices.Clone(s.log[pos:end])
	s.served[simIncOf(ctx)] = append(s.served[simIncOf(ctx)], out...)
	return out, fmt.Sprint(end), nil
}

type simFault int

const (
	faultNone     simFault = iota
	faultRespLost          // the provider applies, then the caller sees an error
	faultFailPre           // the provider fails before applying
	faultStall             // the call hangs past the effect's timeout (family stall)
	faultHang              // the call hangs, ignoring the cancel, while the world goes on (stall-takeover)
)

// appliedAny reports whether the provider applied any of keys.
func (p *Provider) appliedAny(keys map[string]bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range keys {
		if p.applied[k] > 0 {
			return true
		}
	}
	return false
}

// Provider is the fake outside provider. It honours the idempotency key
// it is given as Stripe does: the first call applies and its result is
// returned to every later call with that key. It counts calls per key.
type Provider struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
	first   map[string][]byte // the result of the call that applied
	effect  map[string]string // key -> effect name
	order   []string          // keys by call number
	n       int
	faults  map[int]simFault // by call number
	// failCall's key fails its first failTimes calls (failCall < 0: none).
	failCall, failTimes int
	failing             map[string]int
	failInc             map[int]string // incarnation -> the key whose calls fail there
	// permanentCall's key fails permanently, as a declined card (-1: none).
	permanentCall int
	permanent     map[string]bool
	// throttleCall's key is answered "not now" (idem.RetryAfter of
	// throttleWait) its first throttleTimes calls (-1: none); a call of a
	// key before the time its last answer named is recorded in early.
	throttleCall, throttleTimes int
	throttleWait                time.Duration
	throttling                  map[string]int
	notBefore                   map[string]time.Time
	early                       []string
	// gate: the pause and circuit families' provider (gate.go).
	gate *simGate
	// stalling holds the keys of calls hanging now (faultStall); a second
	// call of one of them while it hangs is recorded in twice.
	stalling map[string]bool
	twice    []string
	now      func() time.Time // the simulation's clock
	journal  *os.File         // subprocess mode: every call, synced before it returns
	progress *atomic.Int64    // the scenario's (simRun.progress): a call is progress
	flight   *simFlight       // the fleet family: calls in flight per effect
	// hang is the world while a faultHang call hangs (stall-takeover, hang.go):
	// true when the caller's process died meanwhile.
	hang func(ctx context.Context, key string) (dropped bool)
}

func newSimProvider() *Provider {
	return &Provider{calls: map[string]int{}, applied: map[string]int{}, first: map[string][]byte{},
		effect: map[string]string{}, faults: map[int]simFault{}, failCall: -1, failing: map[string]int{}, failInc: map[int]string{},
		permanentCall: -1, permanent: map[string]bool{},
		throttleCall: -1, throttling: map[string]int{}, notBefore: map[string]time.Time{}, stalling: map[string]bool{}, gate: newSimGate()}
}

func (p *Provider) Call(ctx context.Context, effect, key string) ([]byte, error) {
	if p.progress != nil {
		p.progress.Add(1)
	}
	if p.flight != nil {
		defer p.flight.enter(effect)()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.n
	p.n++
	p.calls[key]++
	p.effect[key] = effect
	p.order = append(p.order, key)
	if p.stalling[key] {
		p.twice = append(p.twice, key)
	}
	if n == p.failCall {
		p.failing[key] = p.failTimes
	}
	if n == p.permanentCall {
		p.permanent[key] = true
	}
	if t, ok := p.notBefore[key]; ok && p.now != nil && p.now().Before(t) {
		p.early = append(p.early, fmt.Sprintf("%s at %s, told not before %s", key, p.now().Format(time.RFC3339), t.Format(time.RFC3339)))
	}
	if p.now != nil && p.gate.probe(effect, key, p.now()) {
		p.mu.Unlock()
		p.gate.holdProbe(effect, key)
		p.mu.Lock()
		p.gate.probing[effect]--
	}
	if p.now != nil {
		if err, answered := p.gate.answer(n, effect, key, p.now()); answered {
			return nil, err
		}
	}
	if n == p.throttleCall {
		p.throttling[key] = p.throttleTimes
	}
	if p.throttling[key] > 0 {
		p.throttling[key]--
		if p.now != nil {
			p.notBefore[key] = p.now().Add(p.throttleWait)
		}
		return nil, idem.RetryAfter(p.throttleWait, fmt.Errorf("simulated 429 for %s", key))
	}
	if p.permanent[key] {
		return nil, idem.Permanent(fmt.Errorf("simulated permanent failure of %s: card declined", key))
	}
	if p.failing[key] > 0 {
		p.failing[key]--
		return nil, fmt.Errorf("simulated provider failure of %s, %d more to come", key, p.failing[key])
	}
	if p.faults[n] == faultFailPre {
		return nil, errors.New("simulated provider failure before applying")
	}
	if p.faults[n] == faultStall {
		// It hangs, without the lock, until its context ends (the
		// effect's timeout) or simStallFor passes; only a call that
		// outlasts the wait applies.
		p.stalling[key] = true
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(simStallFor):
		}
		p.mu.Lock()
		delete(p.stalling, key)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("simulated stalled call, abandoned: %w", err)
		}
	}
	if p.faults[n] == faultHang && p.hang != nil {
		p.stalling[key] = true
		p.mu.Unlock()
		dropped := p.hang(ctx, key)
		p.mu.Lock()
		delete(p.stalling, key)
		if dropped {
			return nil, errDropped
		}
	}
	if k, ok := p.failInc[simIncOf(ctx)]; ok && k == key {
		return nil, errors.New("simulated failure of this worker's call")
	}
	if p.applied[key] == 0 {
		p.applied[key] = 1
		p.first[key] = fmt.Appendf(nil, "result:%s:call%d", key, n)
	}
	if p.journal != nil {
		fmt.Fprintf(p.journal, "%s\t%s\t%s\n", key, effect, p.first[key])
		_ = p.journal.Sync()
	}
	if p.faults[n] == faultRespLost {
		return nil, errors.New("simulated timeout after the provider applied")
	}
	return p.first[key], nil
}

// ---- scenarios ----

// simScenario is one run of the fixture under a fault plan. at is the hit
// (the global number of a crash point or SQL boundary, in the order the
// discovery run met them) where the family acts; -1 for none.
type simScenario struct {
	family  string
	at      int
	crashAt []int            // hits to crash at, in order
	faults  map[int]simFault // provider faults by call number
	call    int              // a provider call whose key the family targets; -1 none
	// effect is the effect whose call call was in the discovery run: the
	// circuit family's outage is of that effect, from its first call at
	// or after call (a crash or concurrent calls may reorder the calls).
	effect  string
	times   int    // failk: how many times that key fails
	seed    uint64 // concurrent: two workers with seeded jitter at every point
	poison  int    // a unit id whose write fails every time; 0 none
	bump    int    // bump: effect index+1 bumped before phase 1; -1 the job's version
	variant string // takeover: "b-done"/"b-paused" and "late-ok"/"late-fails"
}

func newScenario(family string) simScenario { return simScenario{family: family, at: -1, call: -1} }

// String names the scenario; IDEMGEN_CRASHSIM_SCENARIO replays it.
func (s simScenario) String() string {
	parts := []string{s.family}
	if s.at >= 0 {
		parts = append(parts, fmt.Sprintf("at=%d", s.at))
	}
	if len(s.crashAt) > 0 {
		parts = append(parts, "crash@"+strings.Trim(fmt.Sprint(s.crashAt), "[]"))
	}
	for _, k := range slices.Sorted(maps.Keys(s.faults)) {
		parts = append(parts, fmt.Sprintf("fault%d@call%d", s.faults[k], k))
	}
	if s.call >= 0 {
		parts = append(parts, fmt.Sprintf("call=%d", s.call))
	}
	if s.times > 0 {
		parts = append(parts, fmt.Sprintf("times=%d", s.times))
	}
	if s.seed > 0 {
		parts = append(parts, fmt.Sprintf("seed=%d", s.seed))
	}
	if s.poison > 0 {
		parts = append(parts, fmt.Sprintf("unit=%d", s.poison))
	}
	if s.bump != 0 {
		parts = append(parts, fmt.Sprintf("bump=%d", s.bump))
	}
	if s.variant != "" {
		parts = append(parts, s.variant)
	}
	return strings.Join(parts, " ")
}

// overlapping reports whether two workers may run at once: then a version
// can be superseded before it is ever written, and which version is
// written first is up to the schedule.
func (s simScenario) overlapping() bool {
	switch s.family {
	case "preempt", "double", "concurrent", "fleet", famBurst, famRate, famHeld:
		return true
	}
	return false
}

// exactCalls reports whether the family is deterministic enough for the
// oracle to predict every provider call, not only every applied effect.
func (s simScenario) exactCalls() bool {
	switch s.family {
	case famPause:
		return s.at < 0 // crashed, a call may be made again
	case "clean", "writefail", "poison", "failk", "permanent", "recover", "throttle", "takeover", "livelease", famForget, "bump", "mismatch",
		"purge-young", "resplost", "failpre", "stall", "commitunknown", famStallTakeover, famLeased:
		return true
	case "fanout":
		return true // without a fault, concurrent calls are still one per key
	case "cancel", "skew", "purge-pending":
		return true // purge-pending of handed-in units: see expectInterrupts
	case famRepeatBatches, famWriteAhead:
		return s.at < 0 // without a fault, a repeat is deduped or a mismatch
	}
	return false
}

// simHit is one crash point or SQL boundary met by an incarnation.
type simHit struct {
	p      idemrt.CrashPoint
	detail string
	inc    int
}

// simInc is one incarnation: a "process" running one piece of work.
type simInc struct {
	id      int
	crashed chan struct{}
	paused  chan struct{}
	resume  chan struct{}
	// pauseAt says whether to pause at this hit; pausing happens once.
	pauseAt func(n int, h simHit) bool
	didStop bool
	// dead: the incarnation crashed. Its other goroutines (concurrent
	// effect calls, the recorder) park at their next hit, as they would
	// die with the process.
	dead atomic.Bool
	// writesAhead: its store keeps several batch transactions open at
	// once, so a job without effects writes ahead (PostgreSQL).
	writesAhead atomic.Bool
}

// simRun is the state of one scenario.
type simRun[U any] struct {
	t   *simT
	job *Job[U]
	db  simDB
	sc  simScenario
	env string

	mu          sync.Mutex
	checkMu     sync.Mutex
	progress    atomic.Int64 // hits and provider calls: the watchdog's pulse
	child       bool         // a subprocess-mode child: exit at the crash, check nothing
	hits        int
	phaseHits   int // hits before convergence: faults are planned only among these
	trace       []simHit
	violations  []string
	convergeErr error // the last convergence run's error: said beside end violations
	clock       time.Time
	lastMark    time.Time
	lastPos     int64
	doneKeys    map[string]bool
	rng         *rand.Rand
	incs        int
	versions    simVersions  // what the job is built with now
	pausedKey   string       // the effect key a paused worker holds
	poisonKey   string       // the unit key whose write always fails
	recorder    string       // takeover: the lease owner that must record pausedKey
	failedKey   string       // writefail: the unit whose write failed
	failedAt    int          // writefail: how many deliveries the world had made then
	stmt        simStmtFail  // stmtfail: the halving it follows
	pausedNow   atomic.Int32 // workers the scenario keeps paused now (limits.go)
	// changed says what committed state the checks read may have changed
	// since the last check: a COMMIT or a write outside a transaction ran
	// (Job.changed), or the world moved (all). What did not change is
	// judged as last read: seenProgress and seenLedger.
	changed simChange
	// Under checkMu: the last reads of the progress row and the ledger,
	// and whether each is good.
	seenProgress             idemrt.ProgressRow
	seenLedger               []idem.LedgerEntry
	progressSeen, ledgerSeen bool

	prov    *Provider
	window  *WindowSource[U]
	cursor  *CursorSource[U]
	phases  [][]U            // the versions each phase serves or hands in
	history []simDelivery[U] // every version delivered, in order
	late    map[string]bool  // late arrivals: behind the mark when they appear
	// redeliver holds handed-in units whose write failed: the caller's
	// queue hands them in again with the next call.
	redeliver     []U
	runs          []simRunRecord // sequential runs, for the report counts
	parkedEffects int            // effects parked, as reported
	parkedUnits   int            // units parked or skipped as parked, as reported
	intr          simInterrupts  // the cancel, skew and purge-pending families' state
	// repeat-batches and writeahead (repeats.go): the calls handed in while
	// the phases play, the re-runs after (converging), the keys whose first
	// write is held back (and what lets it go) and the older versions a
	// change log carries.
	repeats    [][]U
	converging bool
	lagKeys    map[string]*simLag
	cursorEcho map[string]U
	callHold   *simCallHold // repeat-batches' calls4: a first call held
	// watch, when set, sees every hit of every incarnation (held-record).
	watch      atomic.Pointer[func(inc int, p idemrt.CrashPoint, detail string)]
	incByID    map[int]*simInc        // every incarnation started, by id
	starts     map[string][]time.Time // the rate family: the starts its rates granted, by effect
	paceReader chan struct{}          // the rate family: a worker that read the pace, waiting for another
	paceMet    bool                   // the rate family: two readers met (paceMeet)
	paceHolds  int                    // the rate family: readers that waited for another
}

// simRunRecord is one sequential run's report and what it was served.
type simRunRecord struct {
	rep idem.Report
	inc int
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

// simRewrite is stmtfail's scenario at the second phase's first batch.
const simRewrite = "rewrite"

// simStmtFail is stmtfail's state: a batch's statement failed naming no
// unit, and fails again in every transaction of its halves that writes
// more than one unit, so each of the batch's units is written alone.
type simStmtFail struct {
	halving bool
	split   bool // the scenario's failure was in a transaction of several units
	units   int  // unit.start hits in the transaction under way
}

// stmtFail is stmtfail's failure at hit n, at point p, if any: at the
// scenario's hit (a batch.written), then, until the next batch begins, at
// each batch.written of a transaction of more than one unit, so the
// halving goes down to lone units and writes every unit of the batch on
// its own (on PostgreSQL with its single-unit statement, not the batch
// form: a new key, a key rewritten, a key left unchanged). The caller
// holds r.mu.
func (r *simRun[U]) stmtFail(n int, p idemrt.CrashPoint) error {
	s := &r.stmt
	switch p {
	case idemrt.PointBatchBegin, idemrt.PointBatchStart, idemrt.PointRunStart:
		s.halving, s.units = false, 0
	case idemrt.PointUnitStart:
		s.units++
	case idemrt.PointUnitAfterCommit:
		s.units = 0
	case idemrt.PointBatchWritten:
		switch {
		case n == r.sc.at:
			// A lone unit's failure is its own: nothing to halve. A
			// staged window publishes whole and is not halved either: a
			// failure of its every try would be a fault of the window.
			s.halving = s.units > 1 && !r.job.Stage
			s.split = s.halving
		case s.halving && s.units > 1:
		default:
			return nil
		}
		s.units = 0 // rolled back: the next transaction counts afresh
		return errors.New("simulated statement failure")
	}
	return nil
}

// failPoint is where a unit's write is made to fail: inside its transaction.
func (j *Job[U]) failPoint() idemrt.CrashPoint {
	if j.Stage {
		return idemrt.PointUnitStart
	}
	return idemrt.PointUnitBeforeCommit
}

// hook is every incarnation's crash hook: count, check, then crash, pause or fault.
func (r *simRun[U]) hook(inc *simInc) idemrt.CrashHook {
	return func(ctx context.Context, p idemrt.CrashPoint, detail string) error {
		if inc.dead.Load() {
			select {} // the process is gone
		}
		r.progress.Add(1)
		h := simHit{p: p, detail: detail, inc: inc.id}
		r.mu.Lock()
		n := r.hits
		r.hits++
		r.trace = append(r.trace, h)
		crash := len(r.sc.crashAt) > 0 && r.sc.crashAt[0] == n
		if crash {
			r.sc.crashAt = r.sc.crashAt[1:]
		}
		pause := !inc.didStop && inc.pauseAt != nil && inc.pauseAt(n, h)
		if pause {
			inc.didStop = true
		}
		var fail error
		switch {
		case r.sc.family == "commitunknown" && n == r.sc.at:
			fail = errors.New("simulated: the commit succeeded but the client saw an error")
		case r.sc.family == "writefail" && n == r.sc.at:
			fail = errors.New("simulated write failure")
			r.failedKey, r.failedAt = detail, len(r.history)
		case r.sc.family == "stmtfail":
			fail = r.stmtFail(n, p)
		}
		poison := r.poisonKey != "" && p == r.job.failPoint() && detail == r.poisonKey
		purge := strings.HasPrefix(r.sc.family, "purge-") && n == r.sc.at
		if p == pointSQLAfter {
			r.changed |= r.job.changed(detail, simWritesOf(ctx))
		}
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
		if p != pointSQLBefore && p != pointSQLAfter {
			r.checkAt(ctx, p, detail)
		}
		if r.sc.family == famWriteAhead {
			r.lag(inc, p, detail)
		}
		if r.callHold != nil {
			r.holdCall(inc, p, detail)
		}
		if watch := r.watch.Load(); watch != nil {
			(*watch)(inc.id, p, detail)
		}
		if r.sc.family == famRate && p == pointSQLAfter && strings.HasSuffix(detail, simPaceRead) {
			r.paceMeet()
		}
		if poison && !r.parked(ctx, detail) {
			// The poison unit's write fails every time it is attempted; a
			// parked one is not attempted (else the oracle sees its row).
			fail = errors.New("simulated poison unit: its write always fails")
		}
		if crash {
			inc.dead.Store(true)
			inc.crashed <- struct{}{}
			select {} // the process is gone: park for good, unwind nothing
		}
		if purge {
			r.purgeNow(ctx, fmt.Sprintf("at %s", p), r.sc.family != "purge-young")
		}
		r.interrupt(ctx, inc, n, h)
		if pause {
			if p == idemrt.PointEffectBeforeCall || p == idemrt.PointEffectAfterCall {
				r.mu.Lock()
				r.pausedKey = detail
				r.mu.Unlock()
			}
			r.pausedNow.Add(1)
			inc.paused <- struct{}{}
			<-inc.resume
			r.pausedNow.Add(-1)
		}
		if jitter > 0 {
			time.Sleep(jitter)
		}
		return fail
	}
}

// parked reports whether the unit is parked, on committed state.
func (r *simRun[U]) parked(ctx context.Context, key string) bool {
	state, _, found, err := r.db.observer().Auto().LookupUnitFailure(context.WithoutCancel(ctx), r.job.Name, key)
	return err == nil && found && state == idem.UnitStateParked
}

// checkAt checks the invariants that must hold at every point, on
// committed state, while the job is stopped at p.
func (r *simRun[U]) checkAt(ctx context.Context, p idemrt.CrashPoint, detail string) {
	// Observations are serialised: two workers' reads must not interleave,
	// or an older snapshot judged after a newer one looks like a regression.
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	obs := r.db.observer().Auto()
	ctx = context.WithoutCancel(ctx)
	// The flags are taken before anything is read: a commit after this
	// sets them again for the next check, and every read below sees those
	// before. What did not change since is not read again.
	r.mu.Lock()
	changed := r.changed
	r.changed = 0
	r.mu.Unlock()
	if p == idemrt.PointEffectBeforeCall {
		entries, err := r.ledgerNow(ctx, obs, changed)
		i := slices.IndexFunc(entries, func(e idem.LedgerEntry) bool { return e.Key == detail })
		if err != nil || i < 0 || entries[i].State != idem.StatePending || entries[i].LeaseOwner == "" {
			r.violate("at %s: provider about to be called for %s without a committed, leased reservation", p, detail)
		}
	}
	if changed == 0 {
		return // nothing was committed since the last check
	}
	// The rows behind the mark are judged again when the mark or the rows
	// may have moved.
	progressOrRows := changed&(changedProgress|changedRows) != 0
	if r.job.Source == SourceWatermarkName && progressOrRows {
		prog, err := r.progressNow(ctx, obs, changed)
		if err != nil {
			r.violate("at %s: read progress: %v", p, err)
			return
		}
		if prog.HasMark {
			r.mu.Lock()
			back := prog.Watermark.Before(r.lastMark)
			last := r.lastMark
			if !back {
				r.lastMark = prog.Watermark
			}
			r.mu.Unlock()
			if back {
				r.violate("at %s: watermark moved backwards from %s to %s", p, last.Format(time.RFC3339), prog.Watermark.Format(time.RFC3339))
			}
			r.checkBehindMark(ctx, p, prog.Watermark)
		}
	}
	if r.job.Source == SourceCursorName && progressOrRows {
		prog, err := r.progressNow(ctx, obs, changed)
		if err == nil && prog.Found {
			r.mu.Lock()
			back, last := prog.Position < r.lastPos, r.lastPos
			if !back {
				r.lastPos = prog.Position
			}
			r.mu.Unlock()
			if back {
				r.violate("at %s: cursor moved backwards from position %d to %d", p, last, prog.Position)
			}
		}
		if err == nil && prog.Cursor != "" {
			var pos int
			fmt.Sscan(prog.Cursor, &pos)
			r.checkBehindCursor(ctx, p, pos)
		}
	}
	if changed&changedLedger == 0 {
		return
	}
	entries, err := r.ledgerNow(ctx, obs, changed)
	if err != nil {
		r.violate("at %s: read ledger: %v", p, err)
		return
	}
	var back []string
	r.mu.Lock()
	for _, e := range entries {
		if e.State == idem.StateDone {
			r.doneKeys[e.Key] = true
		} else if r.doneKeys[e.Key] {
			back = append(back, fmt.Sprintf("at %s: ledger row %s went back from done to %s", p, e.Key, e.State))
		}
	}
	r.mu.Unlock()
	for _, v := range back {
		r.violate("%s", v)
	}
}

// ledgerNow is the committed ledger: read when it may have changed since
// the last read (or that read failed), else that read's. Under checkMu.
func (r *simRun[U]) ledgerNow(ctx context.Context, obs idemrt.Querier, changed simChange) ([]idem.LedgerEntry, error) {
	if changed&changedLedger == 0 && r.ledgerSeen {
		return r.seenLedger, nil
	}
	entries, err := obs.Ledger(ctx)
	r.seenLedger, r.ledgerSeen = entries, err == nil
	return entries, err
}

// progressNow is the job's committed progress row, as ledgerNow is the
// ledger. Under checkMu.
func (r *simRun[U]) progressNow(ctx context.Context, obs idemrt.Querier, changed simChange) (idemrt.ProgressRow, error) {
	if changed&changedProgress == 0 && r.progressSeen {
		return r.seenProgress, nil
	}
	prog, err := obs.Progress(ctx, r.job.Name)
	r.seenProgress, r.progressSeen = prog, err == nil
	return prog, err
}

// worldMoved says anything the checks read may have changed: the world
// served new units, or a helper outside the hooks wrote.
func (r *simRun[U]) worldMoved() {
	r.mu.Lock()
	r.changed = changedAll
	r.mu.Unlock()
}

// checkBehindMark: every source unit behind the stored watermark is applied,
// but for late arrivals (the overlap exists for them) and a poison unit.
// Applied is its current version under upsert; under insert_once the row
// keeps the key's first written version, which may be any one delivered.
func (r *simRun[U]) checkBehindMark(ctx context.Context, p idemrt.CrashPoint, mark time.Time) {
	r.window.mu.Lock()
	var behind []U
	for k, u := range r.window.units {
		if r.job.MarkOf(u).Before(mark) && !r.late[k] && !r.isPoison(u) {
			behind = append(behind, u)
		}
	}
	r.window.mu.Unlock()
	if !r.job.InsertOnce {
		r.checkApplied(ctx, p, behind, func(u U) []U { return []U{u} })
		return
	}
	r.mu.Lock()
	history := slices.Clone(r.history)
	r.mu.Unlock()
	r.checkApplied(ctx, p, behind, func(u U) []U {
		var versions []U
		for _, d := range history {
			if r.job.keyOf(d.unit) == r.job.keyOf(u) {
				versions = append(versions, d.unit)
			}
		}
		return versions
	})
}

func (r *simRun[U]) isPoison(u U) bool {
	return r.poisonKey != "" && r.job.keyOf(u) == r.poisonKey
}

// checkBehindCursor: every log entry before the stored cursor is applied
// (the row holds one of the key's versions the log carries).
func (r *simRun[U]) checkBehindCursor(ctx context.Context, p idemrt.CrashPoint, pos int) {
	r.cursor.mu.Lock()
	log := slices.Clone(r.cursor.log)
	r.cursor.mu.Unlock()
	pos = min(pos, len(log))
	behind := slices.DeleteFunc(slices.Clone(log[:pos]), r.isPoison)
	r.checkApplied(ctx, p, behind, func(u U) []U {
		return slices.DeleteFunc(slices.Clone(log), func(v U) bool { return r.job.keyOf(v) != r.job.keyOf(u) })
	})
}

func (r *simRun[U]) checkApplied(ctx context.Context, p idemrt.CrashPoint, behind []U, acceptable func(U) []U) {
	if len(behind) == 0 {
		return
	}
	if r.job.HasDest {
		rows, err := r.job.Rows(ctx, r.db.observer())
		if err != nil {
			r.violate("at %s: read rows: %v", p, err)
			return
		}
		byKey := map[string]string{}
		for _, row := range rows {
			byKey[r.job.keyOf(row)] = oracleJSON(row)
		}
		for _, u := range behind {
			got, ok := byKey[r.job.keyOf(u)]
			if !ok || !slices.ContainsFunc(acceptable(u), func(v U) bool { return oracleJSON(v) == got }) {
				r.violate("at %s: progress is ahead of work: %s is behind the stored position but not applied", p, r.job.keyOf(u))
				return
			}
		}
		return
	}
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		return
	}
	r.mu.Lock()
	history := slices.Clone(r.history)
	r.mu.Unlock()
	for _, u := range behind {
		for fi, fx := range r.job.Effects {
			if fx.When != idemrt.WhenAlways {
				continue
			}
			// Reserved under the versions in force when the unit was
			// delivered (a bump since renders its key anew), or done
			// already: a purge past retention may have removed its row.
			keys := map[string]bool{r.effectKey(fx, u): true}
			for _, d := range history {
				if r.job.keyOf(d.unit) == r.job.keyOf(u) {
					keys[oracleKey(fx.Key, d.versions.vars(fi), d.unit)] = true
				}
			}
			if !slices.ContainsFunc(entries, func(e idem.LedgerEntry) bool { return keys[e.Key] }) && !r.prov.appliedAny(keys) {
				r.violate("at %s: progress is ahead of work: effect %s of %s is behind the stored position but not reserved", p, fx.Name, r.job.keyOf(u))
				return
			}
		}
	}
}

// Source kind names, as in the spec.
const (
	SourceWatermarkName = "watermark"
	SourceCursorName    = "cursor"
	SourceNoneName      = "none"
)

// Mark is the watermark field of unit id at revision rev: each
// revision lands in the window of the phase that serves it.
func Mark(id, rev int) time.Time {
	phase := rev - 1
	if id > 6 {
		phase = 1
	}
	// Phases are two hours apart: recoveries within a phase move the clock
	// (and so the mark) by minutes, never past the next phase's data.
	return Base.Add(time.Duration(2*phase)*time.Hour + time.Duration(id)*time.Second)
}

var simLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// simInTx reports whether a job stopped at this hit holds a write
// transaction open: another worker would wait on its locks.
func simInTx[U any](job *Job[U], h simHit) bool {
	switch h.p {
	case pointSQLBefore, pointSQLAfter:
		return strings.HasPrefix(h.detail, "tx ") || (h.p == pointSQLBefore && h.detail == "COMMIT")
	case idemrt.PointUnitStart, idemrt.PointBatchWritten, idemrt.PointUnitBeforeCommit:
		return true // a batch's units start and end inside its transaction
	}
	if job.Stage && job.Source == SourceWatermarkName && (h.p == idemrt.PointBatchStart || h.p == idemrt.PointBatchBegin) {
		return true // a staged window is fetched and written inside its transaction
	}
	return job.Stage && (h.p == idemrt.PointProgressBefore || h.p == idemrt.PointProgressAfter)
}

// simPhases is the fixture: six units in two pages, then one changed, one
// new, and (watermark) two late arrivals placed when served; for a cursor
// also a duplicate delivery and an older version after a newer one; for
// handed-in units, two batches of three, then a redelivery with one new unit.
func simPhases[U any](job *Job[U]) [][]U {
	var p1, p2 []U
	for id := 1; id <= 6; id++ {
		p1 = append(p1, job.Unit(id, 1))
	}
	switch job.Source {
	case SourceNoneName:
		p2 = append(p2, job.Unit(4, 1), job.Unit(5, 1), job.Unit(6, 1), job.Unit(7, 1))
	case SourceCursorName:
		p2 = append(p2, job.Unit(1, 2), job.Unit(7, 1), job.Unit(2, 1), job.Unit(3, 2), job.Unit(3, 1))
	default:
		p2 = append(p2, job.Unit(1, 2), job.Unit(7, 1), job.Unit(8, 1), job.Unit(9, 1))
	}
	return [][]U{p1, p2}
}

// phaseClock is the time a phase runs at: after its units' marks.
func phaseClock(phase int) time.Time { return Base.Add(time.Duration(2*phase+1) * time.Hour) }

// serve makes a phase's units visible to the source, and records them in
// the delivery history. Units 8 and 9 of a watermark job arrive late: their
// mark lies behind the stored watermark, inside the overlap (8) and exactly
// on its boundary (9), so only a run that honours the overlap applies them.
func (r *simRun[U]) serve(phase int) {
	var mark time.Time
	if r.job.Source == SourceWatermarkName && phase > 0 {
		if p, err := r.db.observer().Auto().Progress(context.Background(), r.job.Name); err == nil && p.HasMark {
			mark = p.Watermark
		}
	}
	for i, u := range r.phases[phase] {
		switch r.job.Source {
		case SourceWatermarkName:
			if phase > 0 && i >= 2 && !mark.IsZero() {
				back := r.job.Overlap / 2
				if i == 3 {
					back = r.job.Overlap
				}
				r.job.SetMark(&u, mark.Add(-back))
				r.phases[phase][i] = u
				r.late[r.job.keyOf(u)] = true
			}
			r.window.mu.Lock()
			r.window.units[r.job.keyOf(u)] = u
			r.window.mu.Unlock()
		case SourceCursorName:
			entries := r.logEntries(u)
			r.cursor.mu.Lock()
			r.cursor.log = append(r.cursor.log, entries...)
			r.cursor.mu.Unlock()
		}
		r.mu.Lock()
		r.history = append(r.history, simDelivery[U]{unit: u, versions: r.versions})
		r.mu.Unlock()
	}
	r.worldMoved()
}

// simOutcome is how one piece of work ended.
type simOutcome struct {
	rep     idem.Report
	err     error
	errs    []error // every error of the work (of every caller, in the burst family)
	crashed bool
}

// simWork is what one incarnation does.
type simWork int

const (
	workPhase    simWork = iota // the phase's scheduled run, or its Process calls then a drain
	workDrain                   // a drain of owed effects
	workBackfill                // a backfill from the fixture's start
	workBurst                   // workPhase, simBurstCallers times at once (the burst family)
	workHeld                    // workPhase under the held family's short wait bound
)

// simTask is one incarnation at work in its own goroutine.
type simTask struct {
	inc      *simInc
	done     chan simOutcome
	kill     func()
	closeInc func()
}

// start runs work for phase on a new incarnation built with the versions
// in force; pauseAt, if set, stops it once at a hit.
func (r *simRun[U]) start(phase int, work simWork, pauseAt func(n int, h simHit) bool) *simTask {
	r.mu.Lock()
	r.incs++
	inc := &simInc{id: r.incs, crashed: make(chan struct{}, 1), paused: make(chan struct{}), resume: make(chan struct{}), pauseAt: pauseAt}
	r.incByID[inc.id] = inc
	r.mu.Unlock()
	hook := r.hook(inc)
	st, kill, closeInc := r.db.incarnation(r.t, hook)
	if cw, ok := st.(interface{ ConcurrentWrites() int }); ok {
		inc.writesAhead.Store(cw.ConcurrentWrites() >= 2)
	}
	opts := append(r.skewed(), idemrt.WithCrashHook(hook), idem.WithOwner(simOwner(inc.id)))
	switch work {
	case workBurst:
		opts = append(opts, idem.WithWaitBound(simBurstWaitBound))
	case workHeld:
		opts = append(opts, idem.WithWaitBound(simHeldWaitBound))
		work = workPhase
	}
	verbs := r.newVerbs(st, opts...)
	task := &simTask{inc: inc, done: make(chan simOutcome, 1), kill: kill, closeInc: closeInc}
	go func() {
		ctx := r.cancelable(context.WithValue(context.Background(), simIncKey{}, inc.id), inc)
		if work == workBurst {
			task.done <- burstWork(ctx, func(ctx context.Context) simOutcome { return r.work(ctx, verbs, phase, workPhase) })
			return
		}
		task.done <- r.work(ctx, verbs, phase, work)
	}()
	return task
}

// work does one piece of work for phase with verbs.
func (r *simRun[U]) work(ctx context.Context, verbs Verbs[U], phase int, work simWork) simOutcome {
	var out simOutcome
	add := func(rep idem.Report, err error) {
		out.rep.Add(rep)
		out.rep.Job = rep.Job
		out.err = err
		if err != nil {
			out.errs = append(out.errs, err)
		}
	}
	switch {
	case work == workDrain:
		add(verbs.Drain(ctx))
	case work == workBackfill:
		add(verbs.Backfill(ctx, idem.Window{Since: Base.Add(-24 * time.Hour), Until: r.now()}))
	case r.job.Source == SourceNoneName:
		// The caller's queue hands the phase's units in, and again
		// those whose write failed last time.
		r.mu.Lock()
		units := append(slices.Clone(r.delivered(phase)), r.redeliver...)
		r.redeliver = nil
		calls := [][]U{units[:len(units)/2], units[len(units)/2:]}
		if r.repeats != nil && !r.converging {
			calls = [][]U{units} // repeat-batches: one call, many batches
		}
		r.mu.Unlock()
		for _, batch := range calls {
			if stopped(out.err) {
				break
			}
			rep, err := verbs.Process(ctx, batch...)
			add(rep, err)
			r.mu.Lock()
			for i, ur := range rep.Units {
				if ur.Outcome == idem.OutcomeFailed && i < len(batch) {
					r.redeliver = append(r.redeliver, batch[i])
				}
			}
			r.mu.Unlock()
		}
		if !stopped(out.err) {
			add(verbs.Drain(ctx))
		}
	default:
		add(verbs.Run(ctx))
	}
	return out
}

// newVerbs builds the job on st with the versions in force; opts come last,
// so they override the scenario's clock.
func (r *simRun[U]) newVerbs(st idem.Store, opts ...idem.Option) Verbs[U] {
	// Batches are on as in production (a page is one batch). Effects run
	// one at a time and batches are written one after another, so that the
	// matrix replays each scenario to the same hit, which concurrent calls
	// and write-ahead would reorder; the fanout families run both.
	// The simulated clock is the database's too: leases expire on it.
	base := []idem.Option{idem.WithClock(r.now), idemrt.WithLeaseClock(r.now), idem.WithLogger(simLogger),
		idem.WithEffectConcurrency(1), idem.WithWriteAhead(false)}
	if r.job.Source == SourceWatermarkName {
		base = append(base, idem.WithStart(Base.Add(-24*time.Hour)))
	}
	if !simCold() {
		base = append(base, idemrt.WithSlotWait(r.slotWait)) // limits.go
	}
	if strings.HasPrefix(r.sc.family, "fanout") {
		// Effects four at a time, batches of two: a batch's calls overlap
		// the next batch's write and claim, and results are recorded in
		// the background; a job without effects on PostgreSQL commits a
		// batch while the next is written. A crash parks every goroutine
		// of the process.
		base = append(base, idem.WithEffectConcurrency(4), idem.WithBatchSize(2), idem.WithWriteAhead(true))
	}
	switch {
	case r.sc.family == famRepeatBatches:
		base = append(base, idem.WithBatchSize(2))
		if r.sc.variant == simCallsAtOnce {
			base = append(base, idem.WithEffectConcurrency(simCallsAtOnceN))
		}
	case r.sc.family == famRate:
		base = append(base, r.rateOptions()...)
	case r.sc.family == famCircuit && r.isConverging():
		base = append(base, idem.WithEffectConcurrency(simCircuitAtOnce))
	case r.sc.family == famWriteAhead:
		base = append(base, idem.WithBatchSize(1), idem.WithWriteAhead(true))
	}
	opts = append(base, opts...)
	edit := limitsFor(editFor(r.versions, r.job), r.sc.family)
	if r.sc.family == "stall" || r.sc.family == famStallTakeover {
		edit = withTimeout(edit, simStallTimeout)
	}
	if edit != nil {
		opts = append(opts, idemrt.WithJobEdit(edit))
	}
	src := any(r.window)
	if r.job.Source == SourceCursorName {
		src = r.cursor
	}
	verbs, err := r.job.NewJob(st, src, r.prov, opts...)
	if err != nil {
		r.t.Fatalf("new job: %v", err)
	}
	return verbs
}

// wait returns when the task finishes, crashes or pauses.
func (t *simTask) wait() (out simOutcome, paused bool) {
	select {
	case out := <-t.done:
		t.closeInc()
		return out, false
	case <-t.inc.crashed:
		t.kill()
		return simOutcome{crashed: true}, false
	case <-t.inc.paused:
		return simOutcome{}, true
	}
}

// finish resumes a paused task and waits for it to end.
func (t *simTask) finish() simOutcome {
	t.inc.resume <- struct{}{}
	out, _ := t.wait()
	return out
}

// aux opens a helper incarnation outside the scenario's faults (purges,
// end checks): no hook, its own clock.
func (r *simRun[U]) aux(now func() time.Time) (Verbs[U], func()) {
	st, closeInc := r.helper()
	return r.newVerbs(st, idem.WithClock(now), idemrt.WithLeaseClock(now)), closeInc
}

// helper opens an incarnation outside the scenario's faults. It has no
// hook, so nothing it writes is noted: its close says the world moved.
func (r *simRun[U]) helper() (idem.Store, func()) {
	st, _, closeInc := r.db.incarnation(r.t, nil)
	return st, func() {
		closeInc()
		r.worldMoved()
	}
}

// play runs the whole scenario and returns the invariant violations.
func (r *simRun[U]) play() []string {
	for phase := range r.phases {
		r.setClock(phaseClock(phase))
		if phase == 1 && r.sc.family == "bump" {
			r.versions = r.versions.bumped(r.sc.bump)
		}
		r.serveRepeats(phase)
		r.serve(phase)
		switch {
		case phase == 0 && r.sc.family == "subprocess":
			if r.runChild() {
				simChildDeaths.Add(1)
				r.recover(phase)
			}
		case r.sc.seed > 0 || r.sc.family == "double" || r.sc.family == "fleet":
			r.concurrently(phase)
		case r.sc.family == famBurst:
			r.burst(phase)
		case r.sc.family == famRate:
			r.concurrently(phase)
		default:
			r.runPhase(phase)
		}
	}
	r.mu.Lock()
	r.phaseHits = r.hits
	r.mu.Unlock()
	if r.sc.family == "recover" {
		r.personRetries()
	}
	// Convergence: clean runs after the last fault, as many as the fault
	// plan needs (a failing effect is tried once per run).
	r.mu.Lock()
	r.converging = true
	r.mu.Unlock()
	if r.sc.family == famCircuit {
		r.prov.mu.Lock()
		r.prov.gate.holdProbes = true
		r.prov.mu.Unlock()
	}
	last := len(r.phases) - 1
	step := r.job.Lease + time.Minute
	if r.sc.family == "failk" {
		// Each run must find the failing effect past its backoff, which
		// grows with every attempt up to the effect's retry max.
		for _, fx := range r.job.Effects {
			step = max(step, r.job.Lease+time.Minute+fx.Retry.Longest())
		}
	}
	backoffs := map[int]bool{} // failk: the attempt counts whose wait was checked
	for i := 0; i < r.convergenceRuns(); i++ {
		if r.sc.family == "throttle" {
			// A run a second later, before the time the provider named:
			// it must not call.
			r.setClock(r.now().Add(time.Second))
			r.cleanRun(last)
		}
		r.setClock(r.now().Add(step))
		out := r.cleanRun(last)
		if r.sc.family == "failk" {
			r.checkBackoff(context.Background(), backoffs)
		}
		if r.sc.family == famCircuit {
			r.checkCoolDown(context.Background())
		}
		if r.sc.family == "failk" || r.sc.family == "poison" {
			continue // the plan counts attempts: run them all
		}
		r.convergeErr = out.err
		if out.err == nil && out.rep.Failed == 0 && out.rep.EffectsFailed == 0 && out.rep.EffectsBusy == 0 && out.rep.EffectsWaiting == 0 {
			break
		}
	}
	if r.sc.family == "bump" && r.job.Source == SourceWatermarkName {
		// A bump reaches old units when they are processed again.
		r.setClock(r.now().Add(time.Minute))
		r.window.mu.Lock()
		all := slices.Collect(maps.Values(r.window.units))
		r.window.mu.Unlock()
		slices.SortFunc(all, func(a, b U) int {
			if c := r.job.MarkOf(a).Compare(r.job.MarkOf(b)); c != 0 {
				return c
			}
			return strings.Compare(r.job.keyOf(a), r.job.keyOf(b))
		})
		for _, u := range all {
			r.history = append(r.history, simDelivery[U]{unit: u, versions: r.versions})
		}
		r.record(r.runTask(last, workBackfill))
	}
	return r.checkEnd()
}

// runPhase runs one phase sequentially, with the family's pause and
// recovery choreography.
func (r *simRun[U]) runPhase(phase int) {
	var pauseA func(n int, h simHit) bool
	switch r.sc.family {
	case "preempt", "takeover", "livelease", "skew", famForget, famHeld, famHeldRecord:
		pauseA = func(n int, h simHit) bool { return n == r.sc.at }
	}
	work := workPhase
	if r.sc.family == famHeldRecord {
		work = workHeld // A is the worker that waits
	}
	task := r.start(phase, work, pauseA)
	out, paused := task.wait()
	switch {
	case paused:
		r.interlude(phase, task)
	case out.crashed && r.sc.family == famLeased:
		r.leasedInterlude(phase, task.inc.id)
	case out.crashed || r.cancelled(task.inc):
		r.recover(phase) // a new process, after the crashed (or shut down) one's leases
	default:
		r.record(out, task.inc.id)
	}
}

// interlude is what the world does while worker A is paused.
func (r *simRun[U]) interlude(phase int, a *simTask) {
	switch r.sc.family {
	case "preempt":
		// Worker B runs the next phase to the end, then A resumes with its old view.
		if phase+1 < len(r.phases) {
			r.setClock(phaseClock(phase + 1).Add(r.job.Lease + time.Minute))
			r.serve(phase + 1)
			r.cleanRun(phase + 1)
		}
		a.finish()
	case "takeover":
		// A holds the effect's lease and stalls past it; B takes the
		// effect over. A's late call then succeeds or fails, before or
		// after B records its outcome; the ledger keeps B's.
		r.setClock(r.now().Add(r.job.Lease + time.Minute))
		r.mu.Lock()
		key := r.pausedKey
		r.mu.Unlock()
		var pauseB func(n int, h simHit) bool
		switch {
		case strings.Contains(r.sc.variant, "b-paused"):
			pauseB = func(n int, h simHit) bool { return h.p == idemrt.PointEffectAfterCall && h.detail == key }
		case strings.Contains(r.sc.variant, "b-before"):
			pauseB = func(n int, h simHit) bool { return h.p == idemrt.PointEffectBeforeCall && h.detail == key }
		}
		b := r.start(phase, workDrain, pauseB)
		bOut, bPaused := b.wait()
		if bPaused && strings.Contains(r.sc.variant, "b-paused") {
			r.mu.Lock()
			r.recorder = simOwner(b.inc.id) // B is the owner whose outcome must be kept
			r.mu.Unlock()
		}
		r.prov.mu.Lock()
		if strings.Contains(r.sc.variant, "late-fails") {
			r.prov.failInc[a.inc.id] = key
		}
		if strings.Contains(r.sc.variant, "b-fails") {
			r.prov.failInc[b.inc.id] = key
		}
		r.prov.mu.Unlock()
		// Both reports count: B's is the one that parks the effect when
		// its failure is the last attempt, and no later run reports it
		// again when the unit's redelivery is deduped before its effects.
		r.record(a.finish(), a.inc.id)
		if bPaused {
			bOut = b.finish()
		}
		r.record(bOut, b.inc.id)
	case "skew":
		r.skewInterlude(phase, a)
	case famForget:
		r.forgetInterlude(a)
	case famHeld:
		r.heldInterlude(phase, a)
	case famHeldRecord:
		r.heldRecordInterlude(phase, a)
	case "livelease":
		// A holds a live lease; B, running the same phase, must leave the
		// effect alone (its claim is refused; the provider is not called).
		b := r.start(phase, workPhase, nil) // a whole run: it meets the leased effect and must leave it
		b.wait()
		a.finish()
	default:
		a.finish()
	}
}

// famLeased is the family of a worker that dies just after a batch's
// transaction committed the reservations it leased to that worker.
const famLeased = "leased"

// leasedInterlude follows worker a's death just after a batch committed:
// the reservations it added are leased to it (idem's reserve), its lease
// live on the simulated clock. Worker B runs the same phase at once and
// must leave them alone: no provider call, each row still a's, pending,
// with the one attempt its reservation counted. Then the lease runs out
// (recover), and each is performed and recorded done, the claim that did
// it counting the second attempt.
func (r *simRun[U]) leasedInterlude(phase, a int) {
	ctx := context.Background()
	owner := simOwner(a)
	held := r.heldBy(ctx, owner)
	for k, n := range held {
		if n != 1 {
			r.violate("leased: %s, reserved leased to worker %s, counts %d attempts; a leased reservation counts one, as a claim does", k, owner, n)
		}
	}
	calls := func() map[string]int {
		r.prov.mu.Lock()
		defer r.prov.mu.Unlock()
		m := make(map[string]int, len(held))
		for k := range held {
			m[k] = r.prov.calls[k]
		}
		return m
	}
	before := calls()
	b := r.start(phase, workPhase, nil) // a whole run: it meets the leased effects and must leave them
	b.wait()
	after := calls()
	still := r.heldBy(ctx, owner)
	for _, k := range slices.Sorted(maps.Keys(held)) {
		if after[k] != before[k] {
			r.violate("leased: worker B called the provider for %s while the reservation's lease, held by dead worker %s, was live", k, owner)
		}
		if n, ok := still[k]; !ok || n != held[k] {
			r.violate("leased: %s, leased to dead worker %s by its reservation, was taken or changed while the lease was live", k, owner)
		}
	}
	r.recover(phase)
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("leased: read the ledger: %v", err)
		return
	}
	for _, e := range entries {
		if n, ok := held[e.Key]; ok && (e.State != idem.StateDone || e.Attempts != n+1) {
			r.violate("leased: once the lease of dead worker %s ran out, %s ended %s with %d attempts; want done with %d (the leased reservation's and the claim's)",
				owner, e.Key, e.State, e.Attempts, n+1)
		}
	}
}

// heldBy is the pending ledger rows leased to owner, with their attempts,
// on committed state.
func (r *simRun[U]) heldBy(ctx context.Context, owner string) map[string]int {
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("leased: read the ledger: %v", err)
		return nil
	}
	held := map[string]int{}
	for _, e := range entries {
		if e.State == idem.StatePending && e.LeaseOwner == owner {
			held[e.Key] = e.Attempts
		}
	}
	return held
}

// recover restarts after a crash: leases expire, and the phase runs again
// (it may crash again where the scenario says so).
func (r *simRun[U]) recover(phase int) {
	r.prov.mu.Lock()
	r.prov.gate.crashed()
	r.prov.mu.Unlock()
	for attempt := 0; attempt < 3; attempt++ {
		r.setClock(r.now().Add(r.job.Lease + time.Minute))
		if out := r.cleanRun(phase); !out.crashed {
			return
		}
	}
}

// runTask runs work to its end (resuming it if it pauses).
func (r *simRun[U]) runTask(phase int, work simWork) (simOutcome, int) {
	task := r.start(phase, work, nil)
	out, paused := task.wait()
	if paused {
		out = task.finish()
	}
	return out, task.inc.id
}

func (r *simRun[U]) cleanRun(phase int) simOutcome {
	out, inc := r.runTask(phase, workPhase)
	r.record(out, inc)
	return out
}

// record keeps a finished run's report for the count checks.
func (r *simRun[U]) record(out simOutcome, inc int) {
	if out.crashed {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.parkedEffects += out.rep.EffectsParked
	r.parkedUnits += out.rep.Parked
	r.runs = append(r.runs, simRunRecord{rep: out.rep, inc: inc})
}

// concurrently runs two workers on the same phase at once.
func (r *simRun[U]) concurrently(phase int) {
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, _ := r.runTask(phase, workPhase); out.crashed {
				r.recover(phase)
			}
		}()
	}
	wg.Wait()
}

// personRetries plays the person on call in the recover family: the
// provider takes the declined key now, and the person puts its parked
// effect back, by its key or with every parked effect of the job, through
// the runtime's recovery (what the generated Store and `idemgen ledger
// retry` call). Exactly that one effect must come back.
func (r *simRun[U]) personRetries() {
	r.prov.mu.Lock()
	key := ""
	if r.sc.call < len(r.prov.order) {
		key = r.prov.order[r.sc.call]
		delete(r.prov.permanent, key)
	}
	r.prov.mu.Unlock()
	if key == "" {
		return
	}
	ctx := context.Background()
	st, closeInc := r.helper()
	defer closeInc()
	var changes []idem.Change
	var err error
	if r.sc.variant == "retry-parked" {
		changes, err = idem.RetryParked(ctx, st, r.now(), r.job.Name)
	} else {
		changes, err = idem.Retry(ctx, st, "", key, r.now())
	}
	if err != nil || len(changes) != 1 || changes[0].Key != key || changes[0].State != idem.StateParked {
		r.violate("recover: a person's %s of %s: %+v, %v; want the one parked effect put back", r.sc.variant, key, changes, err)
	}
}

// convergenceRuns is how many clean runs may follow the last fault.
func (r *simRun[U]) convergenceRuns() int {
	n := 3
	switch r.sc.family {
	case "failk":
		for _, fx := range r.job.Effects {
			n = max(n, fx.MaxAttempts+2)
		}
	case "poison":
		n = max(n, r.job.UnitMaxAttempts+2)
	case "throttle":
		n = max(n, r.sc.times+3)
	case famCircuit:
		n = max(n, simCircuitOutage(r.prov.gate.maxAttempts)+3)
	case famRate:
		r.prov.mu.Lock()
		calls := len(r.prov.order)
		r.prov.mu.Unlock()
		n = max(n, r.rateConvergenceRuns(calls))
	}
	return n
}

// purgeNow purges on a helper incarnation while the job is stopped: young
// (the clock now: nothing is past retention) or old (past every retention:
// every done row of an effect with retention goes). Either way only done
// rows may go, and only those past retention.
func (r *simRun[U]) purgeNow(ctx context.Context, where string, old bool) {
	ctx = context.WithoutCancel(ctx)
	now := r.now()
	if old {
		for _, fx := range r.job.Effects {
			now = maxTime(now, r.now().Add(fx.Retention+time.Hour))
		}
	}
	obs := r.db.observer().Auto()
	before, err := obs.Ledger(ctx)
	if err != nil {
		r.violate("purge %s: read ledger: %v", where, err)
		return
	}
	verbs, closeInc := r.aux(func() time.Time { return now })
	defer closeInc()
	if _, err := verbs.Purge(ctx); err != nil {
		r.violate("purge %s: %v", where, err)
		return
	}
	after, err := obs.Ledger(ctx)
	if err != nil {
		r.violate("purge %s: read ledger: %v", where, err)
		return
	}
	retained := map[string]bool{}
	for _, fx := range r.job.Effects {
		retained[fx.Name] = fx.Retention > 0
	}
	for _, e := range before {
		gone := !slices.ContainsFunc(after, func(a idem.LedgerEntry) bool { return a.Key == e.Key })
		if gone {
			// Past retention a key is new again: its row may come back pending.
			r.mu.Lock()
			delete(r.doneKeys, e.Key)
			r.mu.Unlock()
		}
		mayGo := old && e.State == idem.StateDone && retained[e.Effect]
		switch {
		case gone && !mayGo:
			r.violate("purge %s: removed ledger row %s (%s, effect %s) that retention keeps", where, e.Key, e.State, e.Effect)
		case !gone && mayGo:
			r.violate("purge %s: kept done ledger row %s past its retention", where, e.Key)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// simOwner names an incarnation's lease owner.
func simOwner(inc int) string { return fmt.Sprintf("worker-%d", inc) }

// The stall family's effect timeout, and how long its stalled call hangs
// when nothing cancels it (a runtime that ignores the timeout).
const (
	simStallTimeout = 50 * time.Millisecond
	simStallFor     = 2 * time.Second
)

// withTimeout adds a timeout to every effect of the job edit builds.
func withTimeout[U any](edit func(*idemrt.Job[U]), d time.Duration) func(*idemrt.Job[U]) {
	return func(j *idemrt.Job[U]) {
		if edit != nil {
			edit(j)
		}
		for i := range j.Effects {
			j.Effects[i].Timeout = d
		}
	}
}
