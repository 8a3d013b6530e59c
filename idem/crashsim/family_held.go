package crashsim

import (
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The held family: worker A stops inside its write transaction (at its
// first unit-before-commit hit), holding its batch's locks (PostgreSQL's
// row locks, SQLite's write lock), and worker B, under a short wait bound,
// runs the same phase simHeldTries times meanwhile. Each of B's waits for
// A's locks must end within the bound as busy (idem.ErrBusy), never a
// hang; and a wait is nobody's failure: B counts no failed attempt for any
// unit and parks nothing, however low max_attempts is. Then A resumes and
// commits, and the run converges as every run does.

type heldFamily[U any] struct{ baseFamily[U] }

func (*heldFamily[U]) about() familyAbout {
	return familyAbout{name: "held", long: 800 * time.Millisecond, guarantees: []int{5, 8},
		what: "worker A stops inside its write transaction, holding its batch's locks (PostgreSQL's row " +
			"locks, SQLite's write lock); worker B, under a wait bound of 150 ms, runs the same work " +
			"three times meanwhile: every wait ends as busy (`idem.ErrBusy`) or, for an effect with a " +
			"`concurrency`, as a wait for its call slot (`idem.ErrWaiting`), none as another error, " +
			"and none counts a failed attempt or parks anything, whatever `max_attempts` is; then A " +
			"commits and the run converges"}
}

func (*heldFamily[U]) overlapping(simScenario) bool { return true }

func (f *heldFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{pauseAt: r.atScenarioHit, interlude: func(phase int, a *simTask) { f.interlude(r, phase, a) }})
}

const (
	simHeldTries     = 3
	simHeldWaitBound = 150 * time.Millisecond
)

// plan pauses A inside its first write transaction, once it has
// written a unit. On PostgreSQL a job with neither a destination nor
// effects writes no row per unit, so its transaction holds no lock B could
// meet (spec-space seed 7, spec 2): nothing to hold there.
func (*heldFamily[U]) plan(d *discovery[U]) []simScenario {
	if d.clean.env == "postgres" && !d.job.HasDest && len(d.job.Effects) == 0 {
		return nil
	}
	for k, h := range d.trace[:d.firstPhase] {
		if h.p == idemtest.PointUnitBeforeCommit && h.detail != "" { // a unit's write, not an empty window's
			sc := newScenario("held")
			sc.at = k
			return []simScenario{sc}
		}
	}
	return nil
}

// interlude is what B does while A, paused in its transaction, holds
// the locks.
func (*heldFamily[U]) interlude(r *simRun[U], phase int, a *simTask) {
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
