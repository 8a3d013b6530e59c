package crashsim

type heldFamily[U any] struct{ baseFamily[U] }

func (*heldFamily[U]) about() familyAbout {
	return familyAbout{name: "held", guarantees: []int{5, 8},
		what: "worker A stops inside its write transaction, holding its batch's locks (PostgreSQL's row " +
			"locks, SQLite's write lock); worker B, under a wait bound of 150 ms, runs the same work " +
			"three times meanwhile: every wait ends as busy (`idem.ErrBusy`), none as another error, " +
			"and none counts a failed attempt or parks anything, whatever `max_attempts` is; then A " +
			"commits and the run converges"}
}

func (*heldFamily[U]) plan(d *discovery[U]) []simScenario { return simPlanHeld(d.trace, d.firstPhase) }
