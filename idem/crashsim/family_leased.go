package crashsim

import (
	"context"
	"maps"
	"slices"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type leasedFamily[U any] struct{ baseFamily[U] }

func (*leasedFamily[U]) about() familyAbout {
	return familyAbout{name: "leased", guarantees: []int{2, 3, 5},
		what: "a worker dies just after a batch's transaction commits, the reservations it added leased " +
			"to it: a second worker running the same work at once must leave them (no call; each row " +
			"still the dead worker's, pending, its one attempt counted); once the lease runs out each " +
			"is performed once and ends done with two attempts (the reservation's and the claim's)"}
}

// plan: the worker dies just after a batch's transaction, which leased
// the effects it reserved to it, committed (the first three batches of
// the first phase).
func (*leasedFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for k, h := range d.trace[:d.firstPhase] {
		if h.p == idemtest.PointUnitAfterCommit && len(plan) < 3 {
			sc := at("leased", k)
			sc.crashAt = []int{k}
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*leasedFamily[U]) exactCalls(simScenario) bool { return true }

func (f *leasedFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{crashed: func(phase, inc int) { f.interlude(r, phase, inc) }})
}

// interlude follows worker a's death just after a batch committed:
// the reservations it added are leased to it (idem's reserve), its lease
// live on the simulated clock. Worker B runs the same phase at once and
// must leave them alone: no provider call, each row still a's, pending,
// with the one attempt its reservation counted. Then the lease runs out
// (recover), and each is performed and recorded done, the claim that did
// it counting the second attempt.
func (*leasedFamily[U]) interlude(r *simRun[U], phase, a int) {
	ctx := context.Background()
	owner := simOwner(a)
	held := r.heldBy(ctx, owner)
	for k, n := range held {
		if n != 1 {
			r.violate("leased: %s, reserved leased to worker %s, counts %d attempts; a leased reservation counts one, as a claim does", k, owner, n)
		}
	}
	calls := func() map[string]int {
		r.prov.mu.Lock()
		defer r.prov.mu.Unlock()
		m := make(map[string]int, len(held))
		for k := range held {
			m[k] = r.prov.calls[k]
		}
		return m
	}
	before := calls()
	b := r.start(phase, workPhase, nil) // a whole run: it meets the leased effects and must leave them
	b.wait()
	after := calls()
	still := r.heldBy(ctx, owner)
	for _, k := range slices.Sorted(maps.Keys(held)) {
		if after[k] != before[k] {
			r.violate("leased: worker B called the provider for %s while the reservation's lease, held by dead worker %s, was live", k, owner)
		}
		if n, ok := still[k]; !ok || n != held[k] {
			r.violate("leased: %s, leased to dead worker %s by its reservation, was taken or changed while the lease was live", k, owner)
		}
	}
	r.recover(phase)
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("leased: read the ledger: %v", err)
		return
	}
	for _, e := range entries {
		if n, ok := held[e.Key]; ok && (e.State != idem.StateDone || e.Attempts != n+1) {
			r.violate("leased: once the lease of dead worker %s ran out, %s ended %s with %d attempts; want done with %d (the leased reservation's and the claim's)",
				owner, e.Key, e.State, e.Attempts, n+1)
		}
	}
}

// heldBy is the pending ledger rows leased to owner, with their attempts,
// on committed state.
func (r *simRun[U]) heldBy(ctx context.Context, owner string) map[string]int {
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("leased: read the ledger: %v", err)
		return nil
	}
	held := map[string]int{}
	for _, e := range entries {
		if e.State == idem.StatePending && e.LeaseOwner == owner {
			held[e.Key] = e.Attempts
		}
	}
	return held
}
