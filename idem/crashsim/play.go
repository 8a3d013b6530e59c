package crashsim

// How a scenario plays: the fixture, its phases, the incarnations that
// run them, and convergence.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

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
	case idemtest.PointUnitStart, idemtest.PointBatchWritten, idemtest.PointUnitBeforeCommit:
		return true // a batch's units start and end inside its transaction
	}
	if job.Stage && job.Source == SourceWatermarkName && (h.p == idemtest.PointBatchStart || h.p == idemtest.PointBatchBegin) {
		return true // a staged window is fetched and written inside its transaction
	}
	return job.Stage && (h.p == idemtest.PointProgressBefore || h.p == idemtest.PointProgressAfter)
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

// simPhaseMargin is how long before a phase's units a phase may have run
// to and still leave the next phase where phaseClock puts it: a phase's
// recoveries and takeovers move the clock by leases (three recoveries of
// the default 5m lease take 18m), and the next phase's units lie an hour
// after the phase's clock.
const simPhaseMargin = 30 * time.Minute

// phaseStart is the time phase runs at: phaseClock, or later when the
// clock or the stored watermark has run past that phase's units already
// (an effect's lease of an hour or more: a recovery moves the clock by a
// lease, a skewed worker saves a watermark a lease ahead). The phase then
// moves as a whole, its clock and (watermark) its units' marks by the
// same shift, so its units still lie after the stored watermark and
// before its clock: the fixture's data never appears in the past, which
// the overlap could not bring back. Decided once per phase, when it
// starts (a later call returns the same).
func (r *simRun[U]) phaseStart(phase int) time.Time {
	if shift, ok := r.shifted[phase]; ok {
		return phaseClock(phase).Add(shift)
	}
	var shift time.Duration
	units := Base.Add(time.Duration(2*phase) * time.Hour) // the phase's units' marks (Mark)
	// The clock, or a stored watermark ahead of it (a worker whose clock
	// ran ahead, the skew family's, saved its own time).
	now := r.now()
	if phase > 0 && r.job.Source == SourceWatermarkName {
		if p, err := r.db.observer().Auto().Progress(context.Background(), r.job.Name); err == nil && p.HasMark && p.Watermark.After(now) {
			now = p.Watermark
		}
	}
	if phase > 0 && now.After(units.Add(-simPhaseMargin)) {
		shift = now.Sub(units).Truncate(time.Minute) + time.Hour
	}
	if r.shifted == nil {
		r.shifted = map[int]time.Duration{}
	}
	r.shifted[phase] = shift
	if shift > 0 && r.job.Source == SourceWatermarkName {
		for i, u := range r.phases[phase] {
			r.job.SetMark(&u, r.job.MarkOf(u).Add(shift))
			r.phases[phase][i] = u
		}
	}
	return phaseClock(phase).Add(shift)
}

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
			r.cursor.append(r.job.keyOf(u), u)
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
	// effects: each effect result with an error the work's runs counted
	// (simEffectEnds), which a run that stopped at another error names only
	// in words ("before that, ...").
	effects []idem.EffectResult
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
	opts := []idem.Option{idemtest.WithCrashHook(hook), idem.WithOwner(simOwner(inc.id))}
	switch work {
	case workBurst:
		opts = append(opts, idem.WithWaitBound(simBurstWaitBound))
	case workHeld:
		opts = append(opts, idem.WithWaitBound(simHeldWaitBound))
		work = workPhase
	default:
		if r.engineWaitBound() < simWaitFloor {
			opts = append(opts, idem.WithWaitBound(simWaitFloor))
		}
	}
	verbs := r.newVerbs(st, opts...)
	task := &simTask{inc: inc, done: make(chan simOutcome, 1), kill: kill, closeInc: closeInc}
	go func() {
		ctx := r.fam.runContext(r, context.WithValue(context.Background(), simIncKey{}, inc.id), inc)
		if work == workBurst {
			task.done <- r.withEffects(inc.id, burstWork(ctx, func(ctx context.Context) simOutcome { return r.work(ctx, verbs, phase, workPhase) }))
			return
		}
		task.done <- r.withEffects(inc.id, r.work(ctx, verbs, phase, work))
	}()
	return task
}

// simWaitFloor is the least wait bound an incarnation plays under where
// its work sets none. The engine's own bound is half the job's shortest
// lease, 500 ms under a lease of 1s, and on a loaded machine a new
// session's open or another worker's transaction can outlast that: the
// scenario then meets a busy answer it did not plan, and judges a
// scenario that did not take place (the spec variant spec_values/lease-min,
// 2026-12-06: takeover's worker B ended busy before its claim, so the call
// the scenario is about was never made, "provider called 1 times ...
// want 3"). The bound itself is played by the families that set their own
// (held, held-record, pool-held, burst), and a wait past it by busy-claim.
const simWaitFloor = 5 * time.Second

// engineWaitBound is the wait bound the engine gives the job when none is
// set.
func (r *simRun[U]) engineWaitBound() time.Duration {
	leases := make([]time.Duration, len(r.job.Effects))
	for i, fx := range r.job.Effects {
		leases[i] = fx.Lease
	}
	return idemrt.LeaseWaitBound(leases...)
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
		if r.fam.handsIn(phase) != nil && !r.converging {
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
	base := []idem.Option{idem.WithClock(r.now), idemtest.WithLeaseClock(r.now), idem.WithLogger(simLogger),
		idem.WithEffectConcurrency(1), idem.WithWriteAhead(false), idem.WithObserver(simEffectEnds[U]{r: r})}
	if r.job.Source == SourceWatermarkName {
		base = append(base, idem.WithStart(Base.Add(-24*time.Hour)))
	}
	if !simCold() {
		base = append(base, idemtest.WithSlotWait(r.slotWait)) // limits.go
	}
	opts = append(append(base, r.fam.options(r)...), opts...)
	edit := r.limits(editFor(r.versions, r.job))
	if edit != nil {
		opts = append(opts, r.job.withEdit(edit))
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
	return r.newVerbs(st, idem.WithClock(now), idemtest.WithLeaseClock(now)), closeInc
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
		r.setClock(r.phaseStart(phase))
		r.fam.beforePhase(r, phase)
		r.serve(phase)
		r.fam.playPhase(r, phase)
	}
	r.mu.Lock()
	r.phaseHits = r.hits
	r.mu.Unlock()
	// Convergence: clean runs after the last fault, as many as the fault
	// plan needs (a failing effect is tried once per run).
	r.mu.Lock()
	r.converging = true
	r.mu.Unlock()
	r.fam.afterPhases(r)
	last := len(r.phases) - 1
	for i := 0; i < max(3, r.fam.convergenceRuns(r)); i++ {
		r.fam.beforeCleanRun(r)
		r.setClock(r.now().Add(r.fam.convergenceStep(r, r.job.Lease+time.Minute)))
		out := r.cleanRun(last)
		r.fam.afterCleanRun(context.Background(), r)
		if r.fam.runsAll() {
			continue // the plan counts attempts: run them all
		}
		r.convergeErr = out.err
		if out.err == nil && out.rep.Failed == 0 && out.rep.EffectsFailed == 0 && out.rep.EffectsBusy == 0 && out.rep.EffectsWaiting == 0 {
			break
		}
	}
	r.fam.afterConvergence(r)
	return r.checkEnd()
}

// phasePlay is how runPhase plays a phase: where worker A pauses (nil:
// nowhere) and the work it does; what the world does while A is paused
// (nil: A resumes); what follows A's crash (nil: a new process
// recovers); and whether A's run was stopped from outside (then a new
// process recovers too).
type phasePlay struct {
	pauseAt   func(n int, h simHit) bool
	work      simWork
	interlude func(phase int, a *simTask)
	crashed   func(phase, inc int)
	stopped   func(inc *simInc) bool
}

// runPhase runs one phase sequentially, with the family's pause and
// recovery choreography.
func (r *simRun[U]) runPhase(phase int, pp phasePlay) {
	task := r.start(phase, pp.work, pp.pauseAt)
	out, paused := task.wait()
	switch {
	case paused && pp.interlude != nil:
		pp.interlude(phase, task)
	case paused:
		task.finish()
	case out.crashed && pp.crashed != nil:
		pp.crashed(phase, task.inc.id)
	case out.crashed || pp.stopped != nil && pp.stopped(task.inc):
		r.recover(phase) // a new process, after the crashed (or shut down) one's leases
	default:
		r.record(out, task.inc.id)
	}
}

// atScenarioHit pauses worker A at the scenario's hit.
func (r *simRun[U]) atScenarioHit(n int, _ simHit) bool { return n == r.sc.at }

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

// pastEveryRetention is the scenario's clock an hour past its effects'
// longest retention: a purge then finds every done row of an effect with
// a retention past it.
func (r *simRun[U]) pastEveryRetention() time.Time {
	later := r.now()
	for _, fx := range r.job.Effects {
		later = maxTime(later, r.now().Add(fx.Retention+time.Hour))
	}
	return later
}

// purgeNow purges on a helper incarnation while the job is stopped: young
// (the clock now) or old (past every retention: every done row of an
// effect with retention goes). Either way only done rows may go, and only
// those past retention: a row the checks first saw (seenAt) less than its
// effect's retention ago is young, whatever the clock; with a retention
// shorter than the scenario's clock span, a young purge may find rows
// past it. It returns how many rows went.
func (r *simRun[U]) purgeNow(ctx context.Context, where string, old bool) (purged int) {
	ctx = context.WithoutCancel(ctx)
	now := r.now()
	if old {
		now = r.pastEveryRetention()
	}
	obs := r.db.observer().Auto()
	before, err := obs.Ledger(ctx)
	if err != nil {
		r.violate("purge %s: read ledger: %v", where, err)
		return 0
	}
	verbs, closeInc := r.aux(func() time.Time { return now })
	defer closeInc()
	if _, err := verbs.Purge(ctx); err != nil {
		r.violate("purge %s: %v", where, err)
		return 0
	}
	after, err := obs.Ledger(ctx)
	if err != nil {
		r.violate("purge %s: read ledger: %v", where, err)
		return 0
	}
	r.mu.Lock()
	r.purgeRan = true
	r.mu.Unlock()
	r.checkKeyRecords(ctx, "purge "+where, after, old)
	retention := map[string]time.Duration{}
	for _, fx := range r.job.Effects {
		retention[fx.Name] = fx.Retention
	}
	for _, e := range before {
		gone := !slices.ContainsFunc(after, func(a idem.LedgerEntry) bool { return a.Key == e.Key })
		r.mu.Lock()
		seen, known := r.seenAt[e.Key]
		if gone {
			// Past retention a key is new again: its row may come back pending.
			delete(r.doneKeys, e.Key)
			delete(r.seenAt, e.Key)
			purged++
		}
		r.mu.Unlock()
		done := e.State == idem.StateDone && retention[e.Effect] > 0
		mustGo := old && done
		mayGo := mustGo || done && known && seen.Before(now.Add(-retention[e.Effect]))
		switch {
		case gone && !mayGo:
			r.violate("purge %s: removed ledger row %s (%s, effect %s) that retention keeps", where, e.Key, e.State, e.Effect)
		case !gone && mustGo:
			r.violate("purge %s: kept done ledger row %s past its retention", where, e.Key)
		}
	}
	return purged
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

// callKey is the key of the provider's call c ("" when there was none).
func (r *simRun[U]) callKey(c int) string {
	r.prov.mu.Lock()
	defer r.prov.mu.Unlock()
	if c < 0 || c >= len(r.prov.order) {
		return ""
	}
	return r.prov.order[c]
}

// simEffectEnds keeps, by incarnation, every effect result with an error
// the runs counted.
type simEffectEnds[U any] struct {
	simObserver
	r *simRun[U]
}

func (o simEffectEnds[U]) Effect(ctx context.Context, _ string, er idem.EffectResult) {
	if er.Err == nil {
		return
	}
	o.r.effectErrsMu.Lock()
	defer o.r.effectErrsMu.Unlock()
	inc := simIncOf(ctx)
	o.r.effectErrs[inc] = append(o.r.effectErrs[inc], er)
}

// CallEnd keeps when a call ended that waited out its bound for a pool
// connection (the pool-held family counts them). A call the engine did
// not make (a batch's later call, once one has waited so) has no CallEnd.
func (o simEffectEnds[U]) CallEnd(ctx context.Context, _ string, er idem.EffectResult, _ time.Duration) {
	if !waitedForConnection(er.Err) {
		return
	}
	o.r.effectErrsMu.Lock()
	defer o.r.effectErrsMu.Unlock()
	inc := simIncOf(ctx)
	o.r.connWaits[inc] = append(o.r.connWaits[inc], time.Now())
}

// connWaitsSince counts incarnation inc's calls that waited out their
// bound for a pool connection and ended after since.
func (r *simRun[U]) connWaitsSince(inc int, since time.Time) int {
	r.effectErrsMu.Lock()
	defer r.effectErrsMu.Unlock()
	n := 0
	for _, at := range r.connWaits[inc] {
		if at.After(since) {
			n++
		}
	}
	return n
}

// withEffects is out with the failed effect results of incarnation inc.
func (r *simRun[U]) withEffects(inc int, out simOutcome) simOutcome {
	r.effectErrsMu.Lock()
	defer r.effectErrsMu.Unlock()
	out.effects = slices.Clone(r.effectErrs[inc])
	return out
}

// simObserver is an idem.Observer that is told nothing; the simulation's
// observers embed it and take the events they read.
type simObserver struct{}

func (simObserver) Watch(string, func(context.Context) (idem.Backlog, error))         {}
func (simObserver) RunStart(ctx context.Context, _, _ string) context.Context         { return ctx }
func (simObserver) RunEnd(context.Context, idem.Report, error)                        {}
func (simObserver) BatchStart(ctx context.Context, _ string, _ int) context.Context   { return ctx }
func (simObserver) BatchEnd(context.Context, string, error)                           {}
func (simObserver) Unit(context.Context, string, idem.UnitResult)                     {}
func (simObserver) Effect(context.Context, string, idem.EffectResult)                 {}
func (simObserver) CallStart(ctx context.Context, _, _, _, _ string) context.Context  { return ctx }
func (simObserver) CallEnd(context.Context, string, idem.EffectResult, time.Duration) {}
