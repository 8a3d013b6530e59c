package crashsim

import (
	"context"

	"github.com/idemgen/idemgen/idem"
)

type recoverFamily[U any] struct{ baseFamily[U] }

func (*recoverFamily[U]) about() familyAbout {
	return familyAbout{name: "recover", guarantees: []int{8},
		what: "parked at once, then a person puts it back (`idem.Retry` by key, or `idem.RetryParked` for " +
			"the job: the code of the generated store and `idemgen ledger retry`): performed once more, " +
			"done, its attempts counted from 0"}
}

// plan: each effect's first call is declined for good, then put back by
// its key and with every parked effect of the job.
func (*recoverFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			for _, v := range []string{"retry-key", "retry-parked"} {
				sc := newScenario("recover")
				sc.call, sc.variant = c, v
				plan = append(plan, sc)
			}
		}
	}
	return plan
}

func (*recoverFamily[U]) sample(all []simScenario) []simScenario { return all }

// setup: the scenario's call's key is declined for good.
func (*recoverFamily[U]) setup(r *simRun[U]) { r.prov.permanentCall = r.sc.call }

// afterPhases plays the person on call: the
// provider takes the declined key now, and the person puts its parked
// effect back, by its key or with every parked effect of the job, through
// the runtime's recovery (what the generated Store and `idemgen ledger
// retry` call). Exactly that one effect must come back.
func (*recoverFamily[U]) afterPhases(r *simRun[U]) {
	r.prov.mu.Lock()
	key := ""
	if r.sc.call < len(r.prov.order) {
		key = r.prov.order[r.sc.call]
		delete(r.prov.permanent, key)
	}
	r.prov.mu.Unlock()
	if key == "" {
		return
	}
	ctx := context.Background()
	st, closeInc := r.helper()
	defer closeInc()
	var changes []idem.Change
	var err error
	if r.sc.variant == "retry-parked" {
		changes, err = idem.RetryParked(ctx, st, r.now(), r.job.Name)
	} else {
		changes, err = idem.Retry(ctx, st, "", key, r.now())
	}
	if err != nil || len(changes) != 1 || changes[0].Key != key || changes[0].State != idem.StateParked {
		r.violate("recover: a person's %s of %s: %+v, %v; want the one parked effect put back", r.sc.variant, key, changes, err)
	}
}

// oneAttempt: the key the person put back counts its one success.
func (*recoverFamily[U]) oneAttempt(r *simRun[U]) (string, string) {
	return r.callKey(r.sc.call), "a person's retry counts attempts from 0"
}

func (*recoverFamily[U]) exactCalls(simScenario) bool { return true }

// expect: the declined call, then the one after the person's retry.
func (*recoverFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if k := r.callKey(r.sc.call); k != "" && e.calls != nil {
		e.calls[k] = 2
	}
}
