package crashsim

type circuitFamily[U any] struct{ baseFamily[U] }

func (*circuitFamily[U]) about() familyAbout {
	return familyAbout{name: "circuit", guarantees: []int{5, 8},
		what: "the effect's provider is down for more calls than `max_attempts` under a circuit: no call " +
			"inside a cool-down after a failure once the circuit's failures are reached; one probe at a " +
			"time, with the runs after the phases calling four at once and the provider holding each " +
			"probe until the other rows have met the gate; an open circuit ends within `max_cool_down` " +
			"of the last failure; every effect once, none parked, and (uncrashed) only the failures " +
			"before the circuit opened count; also crashed and taken over"}
}

func (*circuitFamily[U]) plan(d *discovery[U]) []simScenario { return planGate(d, famCircuit) }

func (*circuitFamily[U]) sample(all []simScenario) []simScenario { return all }
