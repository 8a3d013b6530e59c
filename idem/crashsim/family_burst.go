package crashsim

type burstFamily[U any] struct{ baseFamily[U] }

func (*burstFamily[U]) about() familyAbout {
	return familyAbout{name: "burst", guarantees: []int{2, 3, 5},
		what: "five callers at once on the same keys in one process whose pool has two connections (a " +
			"client retrying in a burst, a webhook redelivered): none may wait out its wait bound, " +
			"which a transaction asking its own pool for a second connection (a pool deadlock) would; " +
			"then the same, crashed at hits spread over the first phase and taken over"}
}

// plan: clean, then crashed at hits spread over the first phase.
func (*burstFamily[U]) plan(d *discovery[U]) []simScenario {
	plan := []simScenario{newScenario(famBurst)}
	for i := 1; i <= 3; i++ {
		sc := at(famBurst, i*d.firstPhase/4)
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}

// setup: each incarnation's pool has simBurstConns connections.
func (*burstFamily[U]) setup(r *simRun[U]) {
	if l, ok := r.db.(connLimiter); ok {
		l.limitConns(simBurstConns)
	}
}

func (*burstFamily[U]) overlapping(simScenario) bool { return true }

func (*burstFamily[U]) playPhase(r *simRun[U], phase int) { r.burst(phase) }
