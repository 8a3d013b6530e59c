package crashsim

import (
	"context"
	"math/rand/v2"
	"time"
)

func (*concurrentFamily[U]) about() familyAbout {
	return familyAbout{name: "concurrent", guarantees: []int{5},
		what: "two workers under seeded jitter"}
}

// plan: four seeds.
func (*concurrentFamily[U]) plan(*discovery[U]) []simScenario {
	var plan []simScenario
	for seed := uint64(1); seed <= 4; seed++ {
		sc := newScenario("concurrent")
		sc.seed = seed
		plan = append(plan, sc)
	}
	return plan
}

type concurrentFamily[U any] struct {
	baseFamily[U]
	rng *rand.Rand // the scenario's seeded jitter, under r.mu
}

func (f *concurrentFamily[U]) setup(r *simRun[U]) { f.rng = rand.New(rand.NewPCG(r.sc.seed, 0)) }

// beforeCrash: a jitter of up to 300µs at every hit.
func (f *concurrentFamily[U]) beforeCrash(_ context.Context, r *simRun[U], _ *simInc, _ simHit) error {
	r.mu.Lock()
	jitter := time.Duration(f.rng.IntN(300)) * time.Microsecond
	r.mu.Unlock()
	time.Sleep(jitter)
	return nil
}

func (*concurrentFamily[U]) overlapping(simScenario) bool { return true }

// playPhase: two workers on the phase at once.
func (*concurrentFamily[U]) playPhase(r *simRun[U], phase int) { r.concurrently(phase) }
