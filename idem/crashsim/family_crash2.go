package crashsim

import "math/rand/v2"

type crash2Family[U any] struct{ baseFamily[U] }

func (*crash2Family[U]) about() familyAbout {
	return familyAbout{name: "crash2", guarantees: []int{1, 2, 3},
		what: "a second crash during recovery (sampled)"}
}

// plan: eight crash sites drawn at random, each crashed again at a hit of
// the recovery run.
func (*crash2Family[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	crash := distinctCrashSites(d.trace, d.full, d.inTx)
	rng := rand.New(rand.NewPCG(uint64(len(d.trace)), 7))
	for range 8 {
		k := crash[rng.IntN(len(crash))]
		sc := newScenario("crash2")
		sc.crashAt = []int{k, k + 1 + rng.IntN(len(d.trace)/2+1)}
		plan = append(plan, sc)
	}
	return plan
}
