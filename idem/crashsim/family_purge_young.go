package crashsim

import (
	"context"
	"fmt"
)

type purgeYoungFamily[U any] struct{ baseFamily[U] }

func (*purgeYoungFamily[U]) about() familyAbout {
	return familyAbout{name: "purge-young", guarantees: []int{2},
		what: "purge at a point, nothing past retention"}
}

// plan: every fourth point outside a transaction, when an effect has a
// retention.
func (*purgeYoungFamily[U]) plan(d *discovery[U]) []simScenario {
	return planPurges(d, "purge-young", func(n int) bool { return n%4 == 0 })
}

func (*purgeYoungFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 4) }

// afterCrash: the purge at the scenario's point.
func (*purgeYoungFamily[U]) afterCrash(ctx context.Context, r *simRun[U], _ *simInc, n int, h simHit) {
	if n == r.sc.at {
		r.purgeNow(ctx, fmt.Sprintf("at %s", h.p), false)
	}
}

func (*purgeYoungFamily[U]) exactCalls(simScenario) bool { return true }
