package crashsim

import "time"

type throttleFamily[U any] struct{ baseFamily[U] }

func (*throttleFamily[U]) about() familyAbout {
	return familyAbout{name: "throttle", guarantees: []int{8},
		what: "the provider answers `RetryAfter` more times than `max_attempts`: the effect ends done " +
			"with one attempt counted, and a run a second after each answer calls nothing"}
}

// plan: each effect's first call is answered "not now" max_attempts+1 times.
func (*throttleFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			sc := newScenario("throttle")
			sc.call, sc.times = c, fx.MaxAttempts+1
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*throttleFamily[U]) sample(all []simScenario) []simScenario { return all }

// setup: the scenario's call's key is answered "not now" (lease/2) sc.times times.
func (*throttleFamily[U]) setup(r *simRun[U]) {
	r.prov.throttleCall, r.prov.throttleTimes, r.prov.throttleWait = r.sc.call, r.sc.times, r.job.Lease/2
}

func (*throttleFamily[U]) exactCalls(simScenario) bool { return true }

func (*throttleFamily[U]) convergenceRuns(r *simRun[U]) int { return r.sc.times + 3 }

// beforeCleanRun: a run a second later, before the time the provider
// named: it must not call.
func (*throttleFamily[U]) beforeCleanRun(r *simRun[U]) {
	r.setClock(r.now().Add(time.Second))
	r.cleanRun(len(r.phases) - 1)
}

// expect: each "not now" is a call that burns no attempt: more of them
// than max_attempts still end in the effect done.
func (*throttleFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if k := r.callKey(r.sc.call); e.calls != nil && k != "" {
		e.calls[k] = r.sc.times + 1
	}
}

// oneAttempt: the throttled key counts its one success.
func (*throttleFamily[U]) oneAttempt(r *simRun[U]) (string, string) {
	return r.callKey(r.sc.call), `the provider's "not now" answers count none`
}
