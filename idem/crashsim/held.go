package crashsim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// The held family: worker A stops inside its write transaction (at its
// first unit-before-commit hit), holding its batch's locks (PostgreSQL's
// row locks, SQLite's write lock), and worker B, under a short wait bound,
// runs the same phase simHeldTries times meanwhile. Each of B's waits for
// A's locks must end within the bound as busy (idem.ErrBusy), never a
// hang; and a wait is nobody's failure: B counts no failed attempt for any
// unit and parks nothing, however low max_attempts is. Then A resumes and
// commits, and the run converges as every run does.

const famHeld = "held"

const (
	simHeldTries     = 3
	simHeldWaitBound = 150 * time.Millisecond
)

// simPlanHeld pauses A inside its first write transaction, once it has
// written a unit.
func simPlanHeld(trace []simHit, firstPhase int) []simScenario {
	for k, h := range trace[:firstPhase] {
		if h.p == idemrt.PointUnitBeforeCommit && h.detail != "" { // a unit's write, not an empty window's
			sc := newScenario(famHeld)
			sc.at = k
			return []simScenario{sc}
		}
	}
	return nil
}

// heldInterlude is what B does while A, paused in its transaction, holds
// the locks.
func (r *simRun[U]) heldInterlude(phase int, a *simTask) {
	busy := 0
	for range simHeldTries {
		out, inc := r.runTask(phase, workHeld)
		r.record(out, inc)
		busy += r.checkOnlyWaited(out, "held: worker B", "A's transaction held their locks", "A's locks")
	}
	if busy == 0 {
		r.violate("held: none of worker B's %d runs answered busy, though A's transaction held the locks its work needs: a wait's error was lost (or B never met the locks, and the family tests nothing)", simHeldTries)
	}
	r.checkNoFailureRecords(phase, "held", "worker B only waited on A's locks")
	r.record(a.finish(), a.inc.id)
}

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

const famHeldRecord = "held-record"

// simHeldRecordHold is how long the forget holds the row once A has begun
// its record: ten times A's bound, so that A's wait has ended (busy) long
// before, on a loaded machine too; a wait without a bound lasts until the
// hold ends, and the record then succeeds, answering no busy.
const simHeldRecordHold = 10 * simHeldWaitBound

// simHeldRecordBound bounds each of the interlude's own waits.
const simHeldRecordBound = 30 * time.Second

// simPlanHeldRecord pauses A right after its first provider call.
func simPlanHeldRecord(trace []simHit, firstPhase int) []simScenario {
	for k, h := range trace[:firstPhase] {
		if h.p == idemrt.PointEffectAfterCall {
			sc := newScenario(famHeldRecord)
			sc.at = k
			return []simScenario{sc}
		}
	}
	return nil
}

// checkOnlyWaited: a run (who, in the violations' words) that waited on
// locks it did not get (held, while they were held) parked nothing, and
// each of its errors, its own and its units', is busy. It returns how
// many.
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
	for _, err := range errs {
		if errors.Is(err, idem.ErrBusy) {
			busy++
		} else {
			r.violate("%s, waiting on %s, ended with %v; want busy (idem.ErrBusy)", who, locks, err)
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

// heldRecordInterlude holds the ledger row of the key A is about to
// record in a forget's transaction while A records it.
func (r *simRun[U]) heldRecordInterlude(phase int, a *simTask) {
	ctx := context.Background()
	r.mu.Lock()
	key := r.pausedKey
	r.mu.Unlock()
	locked, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hold := func(_ context.Context, p idemrt.CrashPoint, detail string) error {
		if p == pointSQLAfter && strings.HasPrefix(detail, "tx ") {
			once.Do(func() {
				close(locked)
				select {
				case <-release:
				case <-time.After(2 * simHeldRecordBound): // never a hang, whatever A does
				}
			})
		}
		return nil
	}
	st, _, closeInc := r.db.incarnation(r.t, hold)
	forgot := make(chan error, 1)
	go func() {
		_, err := idem.Forget(ctx, st, "", key, r.now(), false)
		forgot <- err
	}()
	select {
	case <-locked:
	case err := <-forgot:
		r.violate("held-record: the forget of %s ended (%v) before its transaction held the row: the family tests nothing", key, err)
		close(release)
		closeInc()
		r.worldMoved()
		r.record(a.finish(), a.inc.id)
		return
	}
	// A's first statement after its call is its record's (or, with calls
	// in flight beside it, one just before): the hold runs from there.
	began := make(chan struct{})
	var first sync.Once
	watch := func(inc int, p idemrt.CrashPoint, detail string) {
		if inc == a.inc.id && p == pointSQLBefore && (detail == "BEGIN" || strings.HasPrefix(detail, "auto ")) {
			first.Do(func() { close(began) })
		}
	}
	r.watch.Store(&watch)
	done := make(chan simOutcome, 1)
	go func() { done <- a.finish() }()
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
	r.watch.Store(nil)
	close(release)
	if !ended {
		out = <-done
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
}
