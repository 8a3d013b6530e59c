package crashsim

import "github.com/idemgen/idemgen/idem"

type fanoutCrashFamily[U any] struct{ baseFamily[U] }

func (*fanoutCrashFamily[U]) about() familyAbout {
	return familyAbout{name: "fanout-crash", guarantees: []int{1, 2, 3},
		what: "the same, crashed at hits spread over the first two phases, whichever goroutine meets them"}
}

// plan: crashed at hits spread over the first two phases (the hits of a
// concurrent run come in another order than the discovery's: k is the
// k-th hit, wherever it falls).
func (*fanoutCrashFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for i := 1; i <= 8; i++ {
		sc := at("fanout-crash", i*d.secondPhase/9)
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}

func (*fanoutCrashFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 2) }

func (*fanoutCrashFamily[U]) options(*simRun[U]) []idem.Option { return fanoutOptions() }
