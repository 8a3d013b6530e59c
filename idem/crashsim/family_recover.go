package crashsim

type recoverFamily[U any] struct{ baseFamily[U] }

func (*recoverFamily[U]) about() familyAbout {
	return familyAbout{name: "recover", guarantees: []int{8},
		what: "parked at once, then a person puts it back (`idem.Retry` by key, or `idem.RetryParked` for " +
			"the job: the code of the generated store and `idemgen ledger retry`): performed once more, " +
			"done, its attempts counted from 0"}
}

// plan: each effect's first call is declined for good, then put back by
// its key and with every parked effect of the job.
func (*recoverFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			for _, v := range []string{"retry-key", "retry-parked"} {
				sc := newScenario("recover")
				sc.call, sc.variant = c, v
				plan = append(plan, sc)
			}
		}
	}
	return plan
}

func (*recoverFamily[U]) sample(all []simScenario) []simScenario { return all }
