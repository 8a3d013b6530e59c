package crashsim

type doubleFamily[U any] struct{ baseFamily[U] }

func (*doubleFamily[U]) about() familyAbout {
	return familyAbout{name: "double", guarantees: []int{5},
		what: "the same run started twice, at once"}
}

func (*doubleFamily[U]) plan(*discovery[U]) []simScenario {
	return []simScenario{newScenario("double")}
}

func (*doubleFamily[U]) overlapping(simScenario) bool { return true }

// playPhase: two workers on the phase at once.
func (*doubleFamily[U]) playPhase(r *simRun[U], phase int) { r.concurrently(phase) }
