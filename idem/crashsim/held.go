package crashsim

import (
	"context"
	"errors"
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
		if out.rep.Parked > 0 || out.rep.EffectsParked > 0 {
			r.violate("held: worker B parked %d units and %d effects while A's transaction held their locks: a wait past its bound is no attempt", out.rep.Parked, out.rep.EffectsParked)
		}
		errs := out.errs
		for _, u := range out.rep.Units {
			if u.Err != nil {
				errs = append(errs, u.Err)
			}
		}
		for _, err := range errs {
			if errors.Is(err, idem.ErrBusy) {
				busy++
			} else {
				r.violate("held: worker B, waiting on A's locks, ended with %v; want busy (idem.ErrBusy)", err)
			}
		}
	}
	if busy == 0 {
		r.violate("held: none of worker B's %d runs answered busy, though A's transaction held the locks its work needs: a wait's error was lost (or B never met the locks, and the family tests nothing)", simHeldTries)
	}
	var keys []string
	for _, u := range r.delivered(phase) {
		keys = append(keys, r.job.keyOf(u))
	}
	failures, err := r.db.observer().Auto().LookupUnitFailures(context.Background(), r.job.Name, keys)
	switch {
	case err != nil:
		r.violate("held: read the unit failures: %v", err)
	case len(failures) > 0:
		for k, f := range failures {
			r.violate("held: unit %s has a failure record (%+v) after worker B only waited on A's locks: a wait past its bound counted as an attempt", k, f)
			break
		}
	}
	r.record(a.finish(), a.inc.id)
}
