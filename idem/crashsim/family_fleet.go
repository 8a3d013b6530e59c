package crashsim

type fleetFamily[U any] struct{ baseFamily[U] }

func (*fleetFamily[U]) about() familyAbout {
	return familyAbout{name: "fleet", guarantees: []int{5, 8},
		what: "two workers at once, every effect held to `concurrency` 1 across workers: never two calls " +
			"of one effect in flight, each effect still once"}
}

func (*fleetFamily[U]) plan(*discovery[U]) []simScenario { return []simScenario{newScenario("fleet")} }
