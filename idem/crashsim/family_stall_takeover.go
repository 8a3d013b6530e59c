package crashsim

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
