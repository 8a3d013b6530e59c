package crashsim

import (
	"context"
	"errors"
)

type poisonFamily[U any] struct {
	baseFamily[U]
	key string // the unit whose write always fails
}

func (*poisonFamily[U]) about() familyAbout {
	return familyAbout{name: "poison", guarantees: []int{3, 8},
		what: "one unit fails on every run; with `max_attempts` it is parked and progress passes it"}
}

// plan: unit 2's write fails every time.
func (*poisonFamily[U]) plan(*discovery[U]) []simScenario {
	sc := newScenario("poison")
	sc.poison = 2
	return []simScenario{sc}
}

func (f *poisonFamily[U]) setup(r *simRun[U]) { f.key = r.job.keyOf(r.job.Unit(r.sc.poison, 1)) }

func (f *poisonFamily[U]) brokenUnit() string { return f.key }

// beforeCrash: the poison unit's write fails every time it is attempted;
// a parked one is not attempted (else the oracle sees its row).
func (f *poisonFamily[U]) beforeCrash(_ context.Context, r *simRun[U], _ *simInc, h simHit) error {
	if h.p == r.job.failPoint() && h.detail == f.key && !r.parked(h.detail) {
		return errors.New("simulated poison unit: its write always fails")
	}
	return nil
}

func (*poisonFamily[U]) exactCalls(simScenario) bool { return true }

func (*poisonFamily[U]) convergenceRuns(r *simRun[U]) int { return r.job.UnitMaxAttempts + 2 }

func (*poisonFamily[U]) runsAll() bool { return true }

// expect: a fault before a staged window is published (expectFailedWrite);
// without a unit max_attempts, the poison unit's batch is never
// published, or its page never passed: what lies behind it is not applied.
func (*poisonFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	expectFailedWrite(r, e)
	if r.job.UnitMaxAttempts == 0 && (r.job.Stage || r.job.Source == SourceCursorName) {
		e.relaxedRows = true
		e.must = map[string]bool{}
		e.calls = nil
	}
}
