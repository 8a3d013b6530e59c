package crashsim

type takeoverFamily[U any] struct{ baseFamily[U] }

func (*takeoverFamily[U]) about() familyAbout {
	return familyAbout{name: "takeover", guarantees: []int{2, 5},
		what: "a worker stalls past its lease, another takes over; the first one's late call succeeds or " +
			"fails, before or after the new owner records"}
}

// plan: at each effect's first call, each variant.
func (*takeoverFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if k, ok := d.firstCall[fx.Name]; ok {
			for _, v := range []string{"b-done late-ok", "b-done late-fails", "b-paused late-ok", "b-paused late-fails", "b-before b-fails"} {
				sc := at("takeover", k)
				sc.variant = v
				plan = append(plan, sc)
			}
		}
	}
	return plan
}

func (*takeoverFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 5) }
