package crashsim

type writefailFamily[U any] struct{ baseFamily[U] }

func (*writefailFamily[U]) about() familyAbout {
	return familyAbout{name: "writefail", guarantees: []int{3, 8},
		what: "one unit's write fails inside its batch: it fails alone, the batch commits without it (not " +
			"with a unit `max_attempts` of 1, where one failure parks the unit: `poison`'s case)"}
}

// plan: every unit's write. A write that fails once and then succeeds;
// with a unit max_attempts of 1 its one failure parks it, which is
// poison's case (a unit whose write always fails).
func (*writefailFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	if d.job.UnitMaxAttempts == 1 {
		return nil
	}
	for k, h := range d.trace {
		if h.p == d.job.failPoint() && h.detail != "" {
			plan = append(plan, at("writefail", k))
		}
	}
	return plan
}

func (*writefailFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 2) }
