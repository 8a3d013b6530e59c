package crashsim

import (
	"slices"

	"github.com/idemgen/idemgen/idem/idemrt"
)

type stmtfailFamily[U any] struct{ baseFamily[U] }

func (*stmtfailFamily[U]) about() familyAbout {
	return familyAbout{name: "stmtfail", guarantees: []int{3, 8},
		what: "a batch's statement fails without naming a unit, and again in every transaction of its " +
			"halves that holds more than one unit: the batch is halved down to lone units, each written " +
			"with its own single-unit statement (on PostgreSQL too, where a batch of several takes the " +
			"batch form), every unit is written and the run's report counts each as if nothing had " +
			"failed; also at the second phase's first batch, whose keys the first phase wrote (the " +
			"single-unit statement's conflict clause)"}
}

// plan: a batch's statements fail without naming a unit, as a set-based
// statement does, at the first four batches of the first phase: the
// batch is halved down to the failure, and every good unit must still be
// written. Then the same at the second phase's first batch (rewrite),
// which writes keys the first phase wrote, so the lone unit its halving
// ends with meets its row (on PostgreSQL, the conflict clause of its
// single-unit statement).
func (*stmtfailFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for k, h := range d.trace[:d.firstPhase] {
		if h.p == idemrt.PointBatchWritten && len(plan) < 4 {
			plan = append(plan, at("stmtfail", k))
		}
	}
	trace := d.trace
	if i := slices.IndexFunc(trace[1:], func(h simHit) bool { return h.p == idemrt.PointRunStart }); i >= 0 {
		k := slices.IndexFunc(trace[i+1:], func(h simHit) bool { return h.p == idemrt.PointBatchWritten }) + i + 1
		if k > i && !slices.ContainsFunc(plan, func(sc simScenario) bool { return sc.at == k }) {
			sc := at("stmtfail", k)
			sc.variant = simRewrite
			plan = append(plan, sc)
		}
	}
	return plan
}

// sample keeps the rewrite: the one scenario whose lone unit meets its row.
func (*stmtfailFamily[U]) sample(all []simScenario) []simScenario {
	return keepVariant(sampleEvery(all, 1), all, simRewrite)
}

// keepVariant adds to a sample the scenarios of all but the first with
// variant v (the first is in every sample).
func keepVariant(sample, all []simScenario, v string) []simScenario {
	for _, sc := range all[min(1, len(all)):] {
		if sc.variant == v {
			sample = append(sample, sc)
		}
	}
	return sample
}
