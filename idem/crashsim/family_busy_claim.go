package crashsim

import (
	"context"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The busy-claim family: worker A has claimed its first effect and, before
// it calls the provider, a wait of its own runs past its bound (a
// connection from its pool, a lock on the effect's limits: the engine's
// idem.WaitError, which is busy). The effect was never called, so the
// claim goes back counting no attempt: under max_attempts it is not
// parked, and it ends done, called once, with one attempt counted. Under
// load, with a short lease (a wait bound of half of it), such waits came
// twice in a run and parked an effect of max_attempts 2 that was never
// called (spec-space seed 38, spec 5).

const famBusyClaim = "busy-claim"

type busyClaimFamily[U any] struct {
	baseFamily[U]
	key string // under r.mu: the key whose claim met the wait
}

func (*busyClaimFamily[U]) about() familyAbout {
	return familyAbout{name: famBusyClaim, guarantees: []int{5, 8},
		what: "worker A's first claimed effect meets, before its call, a wait of its own that runs past " +
			"its bound (`idem.WaitError`, busy): the effect was not called, so its claim goes back " +
			"counting no attempt, it is not parked whatever its `max_attempts`, and it ends done with " +
			"one call and one attempt counted"}
}

// plan: one scenario, for a job with effects.
func (*busyClaimFamily[U]) plan(d *discovery[U]) []simScenario {
	if len(d.job.Effects) == 0 || len(d.order) == 0 {
		return nil
	}
	return []simScenario{newScenario(famBusyClaim)}
}

// faultAt: the run's first effect.claimed answers a wait past its bound.
func (f *busyClaimFamily[U]) faultAt(_ *simRun[U], _ int, h simHit) error {
	if f.key != "" || h.p != idemtest.PointEffectClaimed {
		return nil
	}
	f.key = h.detail
	return &idem.WaitError{What: "a connection from the pool (simulated, between a claim and its call)",
		Bound: simHeldWaitBound, Err: context.DeadlineExceeded}
}

func (*busyClaimFamily[U]) exactCalls(simScenario) bool { return true }

// oneAttempt: the key whose claim met the wait counts its one success.
func (f *busyClaimFamily[U]) oneAttempt(r *simRun[U]) (string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return f.key, "a wait past its bound before the call is no attempt"
}

// checkEnd: the family met its claim.
func (f *busyClaimFamily[U]) checkEnd(_ context.Context, r *simRun[U], _ simExpect[U]) {
	r.mu.Lock()
	key := f.key
	r.mu.Unlock()
	if key == "" {
		r.violate("%s: no effect was claimed: the family tests nothing", famBusyClaim)
	}
}
