package crashsim

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type purgePendingFamily[U any] struct {
	baseFamily[U]
	purged bool // under r.mu: the parked variant's purge before phase 1 is done
}

func (*purgePendingFamily[U]) about() familyAbout {
	return familyAbout{name: "purge-pending", guarantees: []int{2, 7},
		what: "a purge past every retention while effects are owed (reserved, claimed, called but not " +
			"recorded) or one is parked; then the rest of the fixture: owed and parked rows stay, the " +
			"owed effect is performed once, the parked one stays parked (a handed-in key whose effect " +
			"is parked, or whose `insert_once` row is still there, changed, is still a mismatch), and " +
			"an update of a row whose done ledger row was purged never decides a `when: inserted` " +
			"effect again"}
}

func (*purgePendingFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 3) }

// plan: everything past retention is purged while the first
// call of each effect is parked (before phase 1), and at every point of
// phase 0 where effects are reserved but not yet recorded.
func (*purgePendingFamily[U]) plan(d *discovery[U]) []simScenario {
	if !slices.ContainsFunc(d.job.Effects, func(fx Effect) bool { return fx.Retention > 0 }) {
		return nil
	}
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			sc := newScenario("purge-pending")
			sc.call, sc.variant = c, "parked"
			plan = append(plan, sc)
		}
	}
	for k, h := range d.trace[:d.firstPhase] {
		switch h.p {
		case idemtest.PointUnitAfterCommit, idemtest.PointEffectClaimed, idemtest.PointEffectAfterCall:
			if !simInTx(d.job, h) {
				plan = append(plan, at("purge-pending", k))
			}
		}
	}
	return plan
}

// setup: the parked variant's call is declined for good.
func (*purgePendingFamily[U]) setup(r *simRun[U]) {
	if r.sc.call >= 0 {
		r.prov.permanentCall = r.sc.call
	}
}

// exactCalls: of handed-in units, see expect.
func (*purgePendingFamily[U]) exactCalls(simScenario) bool { return true }

func (*purgePendingFamily[U]) purgesPastRetention() bool { return true }

// afterCrash: a scenario planned at a hit purges past retention there;
// the parked variant purges once phase 1 begins.
func (f *purgePendingFamily[U]) afterCrash(ctx context.Context, r *simRun[U], _ *simInc, n int, h simHit) {
	if n == r.sc.at {
		r.purgeNow(ctx, fmt.Sprintf("at %s", h.p), true)
	}
	r.mu.Lock()
	purge := r.sc.variant == "parked" && !f.purged && !r.clock.Before(phaseClock(1))
	f.purged = f.purged || purge
	r.mu.Unlock()
	if purge {
		r.purgeNow(ctx, "with an effect parked, before the second phase", true)
	}
}

// expect adjusts the oracle's expectation for purge-pending: the
// parked variant's effect ends parked after one call. Past retention a key
// is new again: a handed-in unit delivered again after its done row was
// purged, or an effect decided on every write (not only on insert), calls
// the provider again with the same key, so calls are exact only for a
// source's units whose effects are decided on insert.
func (*purgePendingFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	r.prov.mu.Lock()
	if r.sc.call >= 0 && r.sc.call < len(r.prov.order) {
		k := r.prov.order[r.sc.call]
		e.parked[k] = true
		delete(e.must, k)
		if e.calls != nil {
			e.calls[k] = 1
		}
	}
	r.prov.mu.Unlock()
	if r.job.Source == SourceNoneName || slices.ContainsFunc(r.job.Effects, func(fx Effect) bool { return fx.When != idemrt.WhenInserted }) {
		e.calls = nil
	}
}

// checkEnd: after a purge past retention, a handed-in key delivered
// again with a field changed is still a mismatch (guarantee 7) when its
// effect was parked meanwhile (its parked row keeps the key known), and
// when its insert_once row is still there though its records are gone (an
// effect never acts on data the destination does not hold).
func (*purgePendingFamily[U]) checkEnd(ctx context.Context, r *simRun[U], exp simExpect[U]) {
	if r.job.Source != SourceNoneName {
		return
	}
	if r.sc.variant == "parked" || r.job.InsertOnce && r.job.HasDest {
		r.checkMismatch(ctx, exp)
	}
	if r.sc.variant == "parked" || !r.job.InsertOnce || !r.job.HasDest {
		return
	}
	// The same key unchanged is not a mismatch: the row holds its data.
	verbs, closeInc := r.aux(r.now)
	defer closeInc()
	orig := r.phases[0][0]
	if rep, _ := verbs.Process(ctx, orig); rep.Mismatched != 0 {
		r.violate("purge-pending: %s redelivered unchanged after its records were purged was reported as a mismatch, though its row holds its data: %s", r.job.keyOf(orig), rep)
	}
}
