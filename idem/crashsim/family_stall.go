package crashsim

import "github.com/idemgen/idemgen/idem/idemrt"

type stallFamily[U any] struct{ baseFamily[U] }

func (*stallFamily[U]) about() familyAbout {
	return familyAbout{name: "stall", guarantees: []int{2, 8},
		what: "a provider call hangs past the effect's timeout (each call in turn): it is cancelled, " +
			"tried again later with the same key, and never called again while it hangs"}
}

// plan: every provider call of the discovery run before convergence.
func (*stallFamily[U]) plan(d *discovery[U]) []simScenario {
	return planCallFaults(d, "stall", faultStall)
}

// limit: a short timeout on every effect, so the stalled call is cancelled soon.
func (*stallFamily[U]) limit(_ *simRun[U], fx *idemrt.Effect[U], _ idemrt.Effect[U]) {
	fx.Timeout = simStallTimeout
}

func (*stallFamily[U]) exactCalls(simScenario) bool { return true }

func (*stallFamily[U]) expect(r *simRun[U], e *simExpect[U]) { expectFaultedCall(r, e, false) }
