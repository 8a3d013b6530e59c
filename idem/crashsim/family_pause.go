package crashsim

type pauseFamily[U any] struct{ baseFamily[U] }

func (*pauseFamily[U]) about() familyAbout {
	return familyAbout{name: "pause", guarantees: []int{5, 8},
		what: "the provider answers one call `idem.PauseEffect`: no call of that effect, any key, reaches " +
			"it before the pause ends; every effect once, none parked, and (uncrashed) every row of the " +
			"effect counts one attempt; also crashed at hits after the paused call, and taken over"}
}

func (*pauseFamily[U]) plan(d *discovery[U]) []simScenario { return planGate(d, famPause) }

func (*pauseFamily[U]) sample(all []simScenario) []simScenario { return all }
