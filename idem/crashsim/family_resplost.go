package crashsim

type resplostFamily[U any] struct{ baseFamily[U] }

func (*resplostFamily[U]) about() familyAbout {
	return familyAbout{name: "resplost", guarantees: []int{2},
		what: "the provider applies the effect, the caller sees an error"}
}

// plan: every provider call of the discovery run before convergence.
func (*resplostFamily[U]) plan(d *discovery[U]) []simScenario {
	return planCallFaults(d, "resplost", faultRespLost)
}

// planCallFaults faults each provider call of the discovery run made
// before convergence, in turn.
func planCallFaults[U any](d *discovery[U], family string, fault simFault) []simScenario {
	var plan []simScenario
	for c := 0; c < d.calls; c++ {
		sc := newScenario(family)
		sc.call = c
		sc.faults = map[int]simFault{c: fault}
		plan = append(plan, sc)
	}
	return plan
}
