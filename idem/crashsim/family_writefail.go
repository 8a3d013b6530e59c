package crashsim

import "errors"

type writefailFamily[U any] struct {
	baseFamily[U]
	// Under r.mu: the unit whose write failed, and how many deliveries
	// the world had made then.
	failedKey string
	failedAt  int
}

func (*writefailFamily[U]) about() familyAbout {
	return familyAbout{name: "writefail", guarantees: []int{3, 8},
		what: "one unit's write fails inside its batch: it fails alone, the batch commits without it (not " +
			"with a unit `max_attempts` of 1, where one failure parks the unit: `poison`'s case)"}
}

// plan: every unit's write. A write that fails once and then succeeds;
// with a unit max_attempts of 1 its one failure parks it, which is
// poison's case (a unit whose write always fails).
func (*writefailFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	if d.job.UnitMaxAttempts == 1 {
		return nil
	}
	for k, h := range d.trace {
		if h.p == d.job.failPoint() && h.detail != "" {
			plan = append(plan, at("writefail", k))
		}
	}
	return plan
}

func (*writefailFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 2) }

// faultAt: the scenario's unit write fails, once.
func (f *writefailFamily[U]) faultAt(r *simRun[U], n int, h simHit) error {
	if n != r.sc.at {
		return nil
	}
	f.failedKey, f.failedAt = h.detail, len(r.history)
	return errors.New("simulated write failure")
}

func (f *writefailFamily[U]) failedWrite() (string, int) { return f.failedKey, f.failedAt }

func (*writefailFamily[U]) exactCalls(simScenario) bool { return true }

func (*writefailFamily[U]) expect(r *simRun[U], e *simExpect[U]) { expectFailedWrite(r, e) }

// expectFailedWrite: a fault before a staged window is published leaves
// none of its rows written; when the source serves newer versions before
// the retry, those are the first written and stay. Which ones depends on
// where the fault fell: every row must be a delivered version. A poison
// unit is such a fault repeated: its window is retried whole until the
// unit is parked, and only then published.
func expectFailedWrite[U any](r *simRun[U], e *simExpect[U]) {
	if r.job.Stage && r.job.InsertOnce && r.job.Source == SourceWatermarkName {
		e.relaxedRows = true
		e.calls = nil
	}
}
