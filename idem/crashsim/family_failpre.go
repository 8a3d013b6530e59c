package crashsim

type failpreFamily[U any] struct{ baseFamily[U] }

func (*failpreFamily[U]) about() familyAbout {
	return familyAbout{name: "failpre", guarantees: []int{2, 8},
		what: "the provider fails before applying"}
}

// plan: every provider call of the discovery run before convergence.
func (*failpreFamily[U]) plan(d *discovery[U]) []simScenario {
	return planCallFaults(d, "failpre", faultFailPre)
}

func (*failpreFamily[U]) exactCalls(simScenario) bool { return true }

func (*failpreFamily[U]) expect(r *simRun[U], e *simExpect[U]) { expectFaultedCall(r, e, false) }
