package crashsim

type failkFamily[U any] struct{ baseFamily[U] }

func (*failkFamily[U]) about() familyAbout {
	return familyAbout{name: "failk", guarantees: []int{8},
		what: "an effect fails `max_attempts - 1` times and ends done; `max_attempts` times and ends " +
			"parked; after each failure the wait it is given lies within [½, 1] of its step (the spec's " +
			"`retry` initial, doubling with each failure up to its max)"}
}

// plan: each effect's first call fails max_attempts-1 times (it ends
// done), and max_attempts times (parked).
func (*failkFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		c := d.firstCallOf(fx.Name)
		if c < 0 {
			continue
		}
		for _, times := range []int{fx.MaxAttempts - 1, fx.MaxAttempts} {
			if times < 1 {
				continue
			}
			sc := newScenario("failk")
			sc.call, sc.times = c, times
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*failkFamily[U]) sample(all []simScenario) []simScenario { return all }
