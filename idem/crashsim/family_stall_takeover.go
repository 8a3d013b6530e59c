package crashsim

import "github.com/idemgen/idemgen/idem/idemrt"

type stallTakeoverFamily[U any] struct{ baseFamily[U] }

func (*stallTakeoverFamily[U]) about() familyAbout {
	return familyAbout{name: "stall-takeover", guarantees: []int{2, 5, 8},
		what: "a provider call hangs past its timeout, ignoring the cancel: a second worker draining a " +
			"second before the caller's lease ends must not call (never two calls of one key in " +
			"flight); then the call is answered and recorded, or its process dies during it and, once " +
			"the lease has run out, another worker takes the effect over and performs it once"}
}

func (*stallTakeoverFamily[U]) plan(d *discovery[U]) []simScenario {
	return simPlanHangs(d.job, d.order[:d.calls], func(k string) string { return d.effectOf[k] })
}

// setup: the world goes on while the hanging call hangs (hangInterlude).
func (*stallTakeoverFamily[U]) setup(r *simRun[U]) { r.prov.hang = r.hangInterlude }

// limit: the stall families' short timeout on every effect.
func (*stallTakeoverFamily[U]) limit(_ *simRun[U], fx *idemrt.Effect[U], _ idemrt.Effect[U]) {
	fx.Timeout = simStallTimeout
}

func (*stallTakeoverFamily[U]) exactCalls(simScenario) bool { return true }

// expect: when A's process died, the dropped call, then the takeover's.
func (*stallTakeoverFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if k := r.callKey(r.sc.call); e.calls != nil && k != "" && r.sc.variant == "crash" {
		e.calls[k] = 2
	}
}
