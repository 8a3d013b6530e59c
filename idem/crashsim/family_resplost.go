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

func (*resplostFamily[U]) exactCalls(simScenario) bool { return true }

func (*resplostFamily[U]) expect(r *simRun[U], e *simExpect[U]) { expectFaultedCall(r, e, true) }

// expectFaultedCall: the faulted call, then the retry; with max_attempts
// 1 the fault was the last attempt: the effect is parked (though applied,
// when only the response was lost: applied).
func expectFaultedCall[U any](r *simRun[U], e *simExpect[U], applied bool) {
	k := r.callKey(r.sc.call)
	if e.calls == nil || k == "" {
		return
	}
	e.calls[k] = 2
	if r.effectOf(k).MaxAttempts == 1 {
		e.calls[k] = 1
		e.parked[k] = true
		delete(e.must, k)
		if applied {
			e.parkedApplied = k
		}
	}
}
