package crashsim

import (
	"context"
	"fmt"
	"slices"
)

type purgeOldFamily[U any] struct{ baseFamily[U] }

func (*purgeOldFamily[U]) about() familyAbout {
	return familyAbout{name: "purge-old", guarantees: []int{2},
		what: "purge at a point, everything done is past retention"}
}

// plan: every third point outside a transaction (every point with full),
// when an effect has a retention.
func (*purgeOldFamily[U]) plan(d *discovery[U]) []simScenario {
	return planPurges(d, "purge-old", func(n int) bool { return d.full || n%3 == 0 })
}

func (*purgeOldFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 2) }

// planPurges is a purge scenario at the points outside a transaction
// that pick takes (n counts those points).
func planPurges[U any](d *discovery[U], family string, pick func(n int) bool) []simScenario {
	if !slices.ContainsFunc(d.job.Effects, func(fx Effect) bool { return fx.Retention > 0 }) {
		return nil
	}
	var plan []simScenario
	n := 0
	for k, h := range d.trace {
		if simInTx(d.job, h) || h.p == pointSQLBefore || h.p == pointSQLAfter {
			continue
		}
		if pick(n) {
			plan = append(plan, at(family, k))
		}
		n++
	}
	return plan
}

// afterCrash: the purge at the scenario's point.
func (*purgeOldFamily[U]) afterCrash(ctx context.Context, r *simRun[U], _ *simInc, n int, h simHit) {
	if n == r.sc.at {
		r.purgeNow(ctx, fmt.Sprintf("at %s", h.p), true)
	}
}

func (*purgeOldFamily[U]) purgesPastRetention() bool { return true }
