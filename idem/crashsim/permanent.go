package crashsim

import (
	"context"
	"errors"

	"github.com/idemgen/idemgen/idem"
)

// A handed-in job's permanent failure met again (the permanent family):
// a watermark job meets its declined effect again in the re-run and the
// backfill, but the re-run of a handed-in job hands in the last phase's
// units only, so a permanent flag lost on the way back from the ledger
// went unseen there. After convergence every unit of every phase is
// handed in again: the declined key must be reported parked and
// permanent, and nothing called.

// checkPermanentReplay hands every unit in again and checks the declined
// key's report.
func (r *simRun[U]) checkPermanentReplay(ctx context.Context) {
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
