package crashsim

type poisonFamily[U any] struct{ baseFamily[U] }

func (*poisonFamily[U]) about() familyAbout {
	return familyAbout{name: "poison", guarantees: []int{3, 8},
		what: "one unit fails on every run; with `max_attempts` it is parked and progress passes it"}
}

// plan: unit 2's write fails every time.
func (*poisonFamily[U]) plan(*discovery[U]) []simScenario {
	sc := newScenario("poison")
	sc.poison = 2
	return []simScenario{sc}
}
