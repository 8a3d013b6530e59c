package crashsim

import (
	"context"
	"errors"

	"github.com/idemgen/idemgen/idem"
)

type permanentFamily[U any] struct{ baseFamily[U] }

func (*permanentFamily[U]) about() familyAbout {
	return familyAbout{name: "permanent", guarantees: []int{8},
		what: "the provider declines for good: parked at once, not retried; every re-run and backfill " +
			"reports it permanent exactly when the provider said so; a handed-in job gets every unit of " +
			"every phase handed in again, and the declined key must come back parked and permanent, " +
			"with no call"}
}

// plan: each effect's first call is declined for good.
func (*permanentFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			sc := newScenario("permanent")
			sc.call = c
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*permanentFamily[U]) sample(all []simScenario) []simScenario { return all }

// setup: the scenario's call's key is declined for good.
func (*permanentFamily[U]) setup(r *simRun[U]) { r.prov.permanentCall = r.sc.call }

func (*permanentFamily[U]) exactCalls(simScenario) bool { return true }

// expect: the declined call, once; parked.
func (*permanentFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if k := r.callKey(r.sc.call); e.calls != nil && k != "" {
		e.calls[k] = 1
		e.parked[k] = true
		delete(e.must, k)
	}
}

// A handed-in job's permanent failure met again (the permanent family):
// a watermark job meets its declined effect again in the re-run and the
// backfill, but the re-run of a handed-in job hands in the last phase's
// units only, so a permanent flag lost on the way back from the ledger
// went unseen there. After convergence every unit of every phase is
// handed in again: the declined key must be reported parked and
// permanent, and nothing called.

// checkEnd hands every unit of a handed-in job in again and checks the
// declined key's report.
func (*permanentFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	if r.job.Source != SourceNoneName {
		return
	}
	r.prov.mu.Lock()
	declined := ""
	for k := range r.prov.permanent {
		declined = k
	}
	before := r.prov.n
	r.prov.mu.Unlock()
	if declined == "" {
		return
	}
	verbs, closeInc := r.aux(r.now)
	defer closeInc()
	var units []U
	for _, phase := range r.phases {
		units = append(units, phase...)
	}
	_, err := verbs.Process(ctx, units...)
	r.prov.mu.Lock()
	calls := r.prov.n - before
	r.prov.mu.Unlock()
	if calls != 0 {
		r.violate("permanent: handing every unit in again called the provider %d times", calls)
	}
	var fe *idem.FailuresError
	if !errors.As(err, &fe) {
		r.violate("permanent: handing every unit in again reported no failure (err %v); the declined effect %s is parked", err, declined)
		return
	}
	for _, f := range fe.Failures {
		if f.Key != declined {
			continue
		}
		if !errors.Is(f.Err, idem.ErrEffectParked) || !errors.Is(f.Err, idem.ErrPermanent) {
			r.violate("permanent: handing the declined key's unit in again reports %s as %v; want parked and permanent", declined, f.Err)
		}
		return
	}
	r.violate("permanent: handing every unit in again did not report the declined effect %s (%v)", declined, err)
}
