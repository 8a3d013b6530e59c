package crashsim

type permanentFamily[U any] struct{ baseFamily[U] }

func (*permanentFamily[U]) about() familyAbout {
	return familyAbout{name: "permanent", guarantees: []int{8},
		what: "the provider declines for good: parked at once, not retried; every re-run and backfill " +
			"reports it permanent exactly when the provider said so; a handed-in job gets every unit of " +
			"every phase handed in again, and the declined key must come back parked and permanent, " +
			"with no call"}
}

// plan: each effect's first call is declined for good.
func (*permanentFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			sc := newScenario("permanent")
			sc.call = c
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*permanentFamily[U]) sample(all []simScenario) []simScenario { return all }
