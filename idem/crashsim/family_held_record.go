package crashsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The held-record family: worker A, under the held family's short wait
// bound, has called the provider for an effect key and is about to
// record it, when a person's forget of that key (idem.Forget, as
// `idemgen ledger forget` runs it) stops inside its transaction, holding
// the key's ledger row (PostgreSQL's row lock, SQLite's write lock). A's
// record must wait at most its bound and answer busy (idem.ErrBusy),
// counting no attempt and parking nothing, never hang; the forget, once it
// goes on, is refused (A's lease is live). The call is made again once
// the lease has run out, with the same key, as after a crash between a
// call and its record.

type heldRecordFamily[U any] struct {
	baseFamily[U]
	// held is set once a forget has held a record of A's: the phases
	// after it run as usual (a second hold tests the same waits again,
	// and costs its ten bounds again).
	held atomic.Bool
	// watch, when set, sees every hit of every incarnation.
	// took is how long the hit's statement ran, at a pointSQLAfter.
	watch atomic.Pointer[func(inc int, p idemtest.CrashPoint, detail string, took time.Duration)]
}

func (*heldRecordFamily[U]) about() familyAbout {
	return familyAbout{name: "held-record", long: 1500 * time.Millisecond, guarantees: []int{5, 8},
		what: "worker A, under a wait bound of 150 ms, has called the provider for its first effect and " +
			"is about to record the call when a person's forget of that key stops inside its " +
			"transaction, holding the key's ledger row (PostgreSQL's row lock, SQLite's write lock) for " +
			"ten times A's bound: A's record ends as busy (`idem.ErrBusy`) within its bound (its other " +
			"effects, under a `concurrency`, may wait for the slot A keeps), never another error, " +
			"never a hang, and counts no failed attempt and parks nothing; no statement A begins " +
			"while the row is held (a call slot's, say) runs past five of its bounds; the forget is " +
			"then refused (A's lease is live); A, its run over, holds no call slot (a release that met " +
			"the hold is made again); the call is made again with the same key once the lease " +
			"has run out, and the run converges. The hold is played once, in the first phase in which A calls"}
}

// playPhase: A, under the short wait bound, pauses right after its call:
// at the first call's end from the planned hit on, not at the hit's
// number. Under a bound of 150 ms a loaded machine can end one of A's
// waits before its call as busy, which renumbers the hits after it; the
// planned number then named another point, and the forget held no key
// (CI, 2026-12-05: "forgetting  while worker-1 held its live lease").
// The hold is played once, in the first phase whose A makes a call from
// that hit on.
func (f *heldRecordFamily[U]) playPhase(r *simRun[U], phase int) {
	if f.held.Load() {
		r.runPhase(phase, phasePlay{})
		return
	}
	afterCall := func(n int, h simHit) bool { return n >= r.sc.at && h.p == idemtest.PointEffectAfterCall }
	r.runPhase(phase, phasePlay{pauseAt: afterCall, work: workHeld, interlude: func(phase int, a *simTask) { f.interlude(r, phase, a) }})
}

// beforeCrash shows the hit to the interlude's watch.
func (f *heldRecordFamily[U]) beforeCrash(ctx context.Context, _ *simRun[U], inc *simInc, h simHit) error {
	if watch := f.watch.Load(); watch != nil {
		(*watch)(inc.id, h.p, h.detail, simStatementTook(ctx))
	}
	return nil
}

// simHeldRecordHold is how long the forget holds the row once A has begun
// its record: ten times A's bound, so that A's wait has ended (busy) long
// before, on a loaded machine too; a wait without a bound lasts until the
// hold ends, and the record then succeeds, answering no busy.
const simHeldRecordHold = 10 * simHeldWaitBound

// simHeldRecordLate is how long a statement of A may run: five times its
// wait bound, half the hold, for a loaded machine. A wait past the bound
// lasts until the hold ends.
const simHeldRecordLate = 5 * simHeldWaitBound

// simHeldRecordBound bounds each of the interlude's own waits.
const simHeldRecordBound = 30 * time.Second

// plan pauses A right after its first provider call.
func (*heldRecordFamily[U]) plan(d *discovery[U]) []simScenario {
	for k, h := range d.trace[:d.firstPhase] {
		if h.p == idemtest.PointEffectAfterCall {
			sc := newScenario("held-record")
			sc.at = k
			return []simScenario{sc}
		}
	}
	return nil
}

// checkOnlyWaited: a run (who, in the violations' words) that waited on
// locks it did not get (held, while they were held) parked nothing, and
// each of its errors, its own and its units', is busy, or, for an effect
// with a concurrency, a wait for its call slot: while the held worker
// keeps its slot, the engine answers that the effect waits for a slot
// (idem.ErrWaiting, no attempt counted), an answer as good as busy. A
// call's failures are judged one by one, and so is every failed effect
// the observer saw (simEffectEnds): a run that stopped at a busy wait
// names the failures before it only in words. It returns how many were
// busy.
func (r *simRun[U]) checkOnlyWaited(out simOutcome, who, held, locks string) (busy int) {
	if out.rep.Parked > 0 || out.rep.EffectsParked > 0 {
		r.violate("%s parked %d units and %d effects while %s: a wait past its bound is no attempt", who, out.rep.Parked, out.rep.EffectsParked, held)
	}
	errs := slices.Clone(out.errs)
	for _, u := range out.rep.Units {
		if u.Err != nil {
			errs = append(errs, u.Err)
		}
	}
	slotted := func(effect string) bool {
		return slices.ContainsFunc(r.job.Effects, func(fx Effect) bool {
			return fx.Concurrency > 0 && (effect == "" || fx.Name == effect)
		})
	}
	judge := func(effect string, err error) {
		switch {
		case errors.Is(err, idem.ErrBusy):
			busy++
		case errors.Is(err, idem.ErrWaiting) && slotted(effect):
		default:
			r.violate("%s, waiting on %s, ended with %v; want busy (idem.ErrBusy), or a wait for a call slot under concurrency", who, locks, err)
		}
	}
	for _, er := range out.effects {
		judge(er.Effect, er.Err)
	}
	for _, err := range errs {
		var fe *idem.FailuresError
		if !errors.As(err, &fe) {
			judge("", err)
			continue
		}
		for _, f := range fe.Failures {
			judge(f.Effect, f.Err)
		}
	}
	return busy
}

// checkNoFailureRecords: no unit of phase has a failure record after its
// runs only waited (why says on what).
func (r *simRun[U]) checkNoFailureRecords(phase int, family, why string) {
	var keys []string
	for _, u := range r.delivered(phase) {
		keys = append(keys, r.job.keyOf(u))
	}
	failures, err := r.db.observer().Auto().LookupUnitFailures(context.Background(), r.job.Name, keys)
	switch {
	case err != nil:
		r.violate("%s: read the unit failures: %v", family, err)
	case len(failures) > 0:
		for k, f := range failures {
			r.violate("%s: unit %s has a failure record (%+v) after %s: a wait past its bound counted as an attempt", family, k, f, why)
			break
		}
	}
}

// simHoldInTx is a crash hook that stops its incarnation's transaction
// right after its first statement, holding what that statement locked
// (PostgreSQL's row locks, SQLite's write lock), until letGo is called,
// or for twice simHeldRecordBound at most: never a hang, whatever the
// waiters do. locked is closed once the hold begins; letGo may be called
// more than once.
func simHoldInTx() (hold idemtest.CrashHook, locked <-chan struct{}, letGo func()) {
	holding, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	hold = func(_ context.Context, p idemtest.CrashPoint, detail string) error {
		if p == pointSQLAfter && strings.HasPrefix(detail, "tx ") {
			once.Do(func() {
				close(holding)
				select {
				case <-release:
				case <-time.After(2 * simHeldRecordBound):
				}
			})
		}
		return nil
	}
	return hold, holding, func() { released.Do(func() { close(release) }) }
}

// interlude holds the ledger row of the key A is about to
// record in a forget's transaction while A records it.
func (f *heldRecordFamily[U]) interlude(r *simRun[U], phase int, a *simTask) {
	f.held.Store(true)
	ctx := context.Background()
	r.mu.Lock()
	key := r.pausedKey
	r.mu.Unlock()
	hold, locked, letGo := simHoldInTx()
	st, _, closeInc := r.db.incarnation(r.t, hold)
	forgot := make(chan error, 1)
	var forgetEnded, aEnded atomic.Pointer[time.Time]
	go func() {
		_, err := idem.Forget(ctx, st, "", key, r.now(), false)
		forgetEnded.Store(new(time.Now()))
		forgot <- err
	}()
	select {
	case <-locked:
	case err := <-forgot:
		r.violate("held-record: the forget of %s ended (%v) before its transaction held the row: the family tests nothing", key, err)
		letGo()
		closeInc()
		r.worldMoved()
		r.record(a.finish(), a.inc.id)
		return
	}
	// A's first statement after its call is its record's (or, with calls
	// in flight beside it, one just before): the hold runs from there.
	began := make(chan struct{})
	var first sync.Once
	type simLate struct {
		detail string
		from   time.Time
		took   time.Duration
	}
	var (
		lateMu   sync.Mutex
		late     []simLate // A's statements that ran past simHeldRecordLate
		holdFrom time.Time
	)
	watch := func(inc int, p idemtest.CrashPoint, detail string, took time.Duration) {
		if inc != a.inc.id {
			return
		}
		if p == pointSQLBefore && (detail == "BEGIN" || strings.HasPrefix(detail, "auto ")) {
			first.Do(func() {
				lateMu.Lock()
				holdFrom = time.Now()
				lateMu.Unlock()
				close(began)
			})
		}
		if p == pointSQLAfter && took > simHeldRecordLate {
			lateMu.Lock()
			late = append(late, simLate{detail, time.Now().Add(-took), took})
			lateMu.Unlock()
		}
	}
	f.watch.Store(&watch)
	done := make(chan simOutcome, 1)
	go func() {
		out := a.finish()
		aEnded.Store(new(time.Now()))
		done <- out
	}()
	var out simOutcome
	ended := false
	select {
	case <-began:
		time.Sleep(simHeldRecordHold)
	case out = <-done:
		ended = true
	case <-time.After(simHeldRecordBound):
		r.violate("held-record: worker A ran no statement in %s after its call of %s", simHeldRecordBound, key)
	}
	holdTo := time.Now()
	letGo()
	if !ended {
		out = <-done
	}
	// A statement of A that began while the forget held the row ends
	// within A's bound (busy), or, having waited past it, once the hold
	// ends (ten bounds): five bounds are allowed, for a loaded machine.
	f.watch.Store(nil)
	lateMu.Lock()
	var waited []string
	for _, l := range late {
		if !holdFrom.IsZero() && !l.from.Before(holdFrom) && l.from.Before(holdTo) {
			waited = append(waited, fmt.Sprintf("%q ran %s", l.detail, l.took.Round(time.Millisecond)))
		}
	}
	lateMu.Unlock()
	if len(waited) > 0 {
		r.violate("held-record: worker A's statements begun while the forget held the row waited past their wait bound of %s (%s allowed): %s",
			simHeldWaitBound, simHeldRecordLate, strings.Join(waited, "; "))
	}
	err := <-forgot
	closeInc()
	r.worldMoved()
	r.record(out, a.inc.id)
	var refused *idem.RefusedError
	if !errors.As(err, &refused) {
		r.violate("held-record: forgetting %s while worker %s held its live lease returned %v; want it refused", key, simOwner(a.inc.id), err)
	}
	if r.checkOnlyWaited(out, "held-record: worker A", "a forget's transaction held a row it records", "a forget's lock") == 0 {
		r.violate("held-record: worker A answered no busy, though a forget's transaction held the row of %s for %s from A's record on: the record waited past its bound of %s, or its wait's error was lost", key, simHeldRecordHold, simHeldWaitBound)
	}
	r.checkNoFailureRecords(phase, "held-record", "worker A only waited on a forget's lock")
	// A's run releases again, as it ends, a slot whose release met the
	// hold; judged only when A ran well past the forget's end, so that its
	// last release surely came after the lock was gone. A that ends with
	// the hold (busy) may keep its slot: its process is over, and the
	// lease bounds the slot as it bounds a crashed worker's.
	if fe, ae := forgetEnded.Load(), aEnded.Load(); fe != nil && ae != nil && ae.Sub(*fe) > simHeldRecordLate {
		r.checkNoSlotsHeld(a.inc.id, "held-record: worker A, its run over well after the forget ended,")
	}
}

// checkNoSlotsHeld: a worker whose run has ended (who, in the violations'
// words) holds no call slot: its calls are over, and a slot whose release
// met a busy wait (the held-record family's forget holds the write lock
// SQLite's release needs) is released again before the run ends. A slot
// left held keeps every worker from the effect until the call's lease
// ends.
func (r *simRun[U]) checkNoSlotsHeld(inc int, who string) {
	held, err := r.db.heldSlots(context.Background(), r.job.Tables.Limits, r.job.Name, simOwner(inc))
	switch {
	case err != nil:
		r.violate("%s: read its call slots: %v", who, err)
	case len(held) > 0:
		r.violate("%s still holds %s: a slot whose release failed is never released again, and every worker waits for it until its call's lease ends", who, strings.Join(held, ", "))
	}
}
