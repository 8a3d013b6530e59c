package crashsim

type rateFamily[U any] struct{ baseFamily[U] }

func (*rateFamily[U]) about() familyAbout {
	return familyAbout{name: "rate", guarantees: []int{2, 3, 5},
		what: "(an effect with a `rate`) two workers at once, four calls in flight each, under the " +
			"effects' rates, each granted start waited for on the simulated clock; two workers that " +
			"have just read the pace are held a moment so they race for the same start: every granted " +
			"start lies at least the rate's spacing from the others; then the same, crashed at hits " +
			"spread over the first phase. Every other family runs without the rate, whose waits on a " +
			"clock that stands still within a phase would only be real sleeps"}
}

// plan: (an effect with a rate) clean, then crashed at hits spread over
// the first phase.
func (*rateFamily[U]) plan(d *discovery[U]) []simScenario {
	if !hasRate(d.job) {
		return nil
	}
	plan := []simScenario{newScenario(famRate)}
	for i := 1; i <= 2; i++ {
		sc := at(famRate, i*d.firstPhase/3)
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}
