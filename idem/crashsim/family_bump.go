package crashsim

type bumpFamily[U any] struct{ baseFamily[U] }

func (*bumpFamily[U]) about() familyAbout {
	return familyAbout{name: "bump", guarantees: []int{6},
		what: "an effect's or the job's version bumped mid-history"}
}

// plan: each effect's version bumped, and (a watermark job with a
// destination) the job's.
func (*bumpFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for i := range d.job.Effects {
		sc := newScenario("bump")
		sc.bump = i + 1
		plan = append(plan, sc)
	}
	if d.job.HasDest && d.job.Source == SourceWatermarkName {
		sc := newScenario("bump")
		sc.bump = -1
		plan = append(plan, sc)
	}
	return plan
}

func (*bumpFamily[U]) sample(all []simScenario) []simScenario { return all }
