package crashsim

type cancelFamily[U any] struct{ baseFamily[U] }

func (*cancelFamily[U]) about() familyAbout {
	return familyAbout{name: "cancel", guarantees: []int{2, 3},
		what: "the run's context is cancelled at a point (a shutdown, a job timeout, a caller gone): no " +
			"provider call starts after it, a call under way is recorded done, nothing is half-applied, " +
			"and the next run performs every effect once"}
}

func (*cancelFamily[U]) plan(d *discovery[U]) []simScenario { return planCancel(d) }

func (*cancelFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 4) }
