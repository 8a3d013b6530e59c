package crashsim

import (
	"context"
	"errors"
	"slices"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// stmtfail's state, under r.mu: a batch's statement failed naming no
// unit, and fails again in every transaction of its halves that writes
// more than one unit, so each of the batch's units is written alone.
type stmtfailFamily[U any] struct {
	baseFamily[U]
	halving bool
	split   bool // the scenario's failure was in a transaction of several units
	units   int  // unit.start hits in the transaction under way
}

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
		if h.p == idemtest.PointBatchWritten && len(plan) < 4 {
			plan = append(plan, at("stmtfail", k))
		}
	}
	trace := d.trace
	if i := slices.IndexFunc(trace[1:], func(h simHit) bool { return h.p == idemtest.PointRunStart }); i >= 0 {
		k := slices.IndexFunc(trace[i+1:], func(h simHit) bool { return h.p == idemtest.PointBatchWritten }) + i + 1
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

// simRewrite is stmtfail's scenario at the second phase's first batch.
const simRewrite = "rewrite"

// faultAt is stmtfail's failure at hit n, at point p, if any: at the
// scenario's hit (a batch.written), then, until the next batch begins, at
// each batch.written of a transaction of more than one unit, so the
// halving goes down to lone units and writes every unit of the batch on
// its own (on PostgreSQL with its single-unit statement, not the batch
// form: a new key, a key rewritten, a key left unchanged). The caller
// holds r.mu.
func (s *stmtfailFamily[U]) faultAt(r *simRun[U], n int, h simHit) error {
	p := h.p
	switch p {
	case idemtest.PointBatchBegin, idemtest.PointBatchStart, idemtest.PointRunStart:
		s.halving, s.units = false, 0
	case idemtest.PointUnitStart:
		s.units++
	case idemtest.PointUnitAfterCommit:
		s.units = 0
	case idemtest.PointBatchWritten:
		switch {
		case n == r.sc.at:
			// A lone unit's failure is its own: nothing to halve. A
			// staged window publishes whole and is not halved either: a
			// failure of its every try would be a fault of the window.
			s.halving = s.units > 1 && !r.job.Stage
			s.split = s.halving
		case s.halving && s.units > 1:
		default:
			return nil
		}
		s.units = 0 // rolled back: the next transaction counts afresh
		return errors.New("simulated statement failure")
	}
	return nil
}

func (*stmtfailFamily[U]) expect(r *simRun[U], e *simExpect[U]) { expectFailedWrite(r, e) }

// checkEnd: a statement that failed naming no unit cost no unit
// anything: the halves, down to a lone unit, wrote every unit as if
// nothing had failed.
func (s *stmtfailFamily[U]) checkEnd(_ context.Context, r *simRun[U], _ simExpect[U]) {
	r.mu.Lock()
	split := s.split
	r.mu.Unlock()
	if split {
		r.checkCounts()
	}
}
