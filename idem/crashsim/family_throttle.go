package crashsim

type throttleFamily[U any] struct{ baseFamily[U] }

func (*throttleFamily[U]) about() familyAbout {
	return familyAbout{name: "throttle", guarantees: []int{8},
		what: "the provider answers `RetryAfter` more times than `max_attempts`: the effect ends done " +
			"with one attempt counted, and a run a second after each answer calls nothing"}
}

// plan: each effect's first call is answered "not now" max_attempts+1 times.
func (*throttleFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			sc := newScenario("throttle")
			sc.call, sc.times = c, fx.MaxAttempts+1
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*throttleFamily[U]) sample(all []simScenario) []simScenario { return all }
