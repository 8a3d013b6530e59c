package crashsim

type liveleaseFamily[U any] struct{ baseFamily[U] }

func (*liveleaseFamily[U]) about() familyAbout {
	return familyAbout{name: "livelease", guarantees: []int{2, 5},
		what: "a second worker meets a live lease: its claim is refused and it must not call"}
}

// plan: at each effect's first call.
func (*liveleaseFamily[U]) plan(d *discovery[U]) []simScenario {
	return atFirstCalls(d, "livelease")
}

// atFirstCalls is a scenario of family at each effect's first call.
func atFirstCalls[U any](d *discovery[U], family string) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if k, ok := d.firstCall[fx.Name]; ok {
			plan = append(plan, at(family, k))
		}
	}
	return plan
}

func (*liveleaseFamily[U]) exactCalls(simScenario) bool { return true }

// playPhase: worker A pauses at the effect's first call, holding a live
// lease; B, running the same phase, must leave the effect alone (its
// claim is refused; the provider is not called).
func (*liveleaseFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{pauseAt: r.atScenarioHit, interlude: func(phase int, a *simTask) {
		b := r.start(phase, workPhase, nil) // a whole run: it meets the leased effect and must leave it
		b.wait()
		a.finish()
	}})
}
