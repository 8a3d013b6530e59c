package crashsim

import "github.com/idemgen/idemgen/idem/idemrt"

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
		if h.p == idemrt.PointUnitAfterCommit && len(plan) < 3 {
			sc := at("leased", k)
			sc.crashAt = []int{k}
			plan = append(plan, sc)
		}
	}
	return plan
}
