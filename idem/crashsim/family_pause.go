package crashsim

import (
	"context"

	"github.com/idemgen/idemgen/idem/idemrt"
)

const famPause = "pause"

type pauseFamily[U any] struct{ baseFamily[U] }

func (*pauseFamily[U]) about() familyAbout {
	return familyAbout{name: "pause", guarantees: []int{5, 8},
		what: "the provider answers one call `idem.PauseEffect`: no call of that effect, any key, reaches " +
			"it before the pause ends; every effect once, none parked, and (uncrashed) every row of the " +
			"effect counts one attempt; also crashed at hits after the paused call, and taken over"}
}

func (*pauseFamily[U]) plan(d *discovery[U]) []simScenario {
	return planGate(d, famPause, func(Effect) bool { return true })
}

func (*pauseFamily[U]) sample(all []simScenario) []simScenario { return sampleGate(all) }

// setup: the scenario's call is answered PauseEffect(lease/2).
func (*pauseFamily[U]) setup(r *simRun[U]) {
	r.initGate()
	r.prov.gate.pauseCall, r.prov.gate.pauseWait = r.sc.call, r.job.Lease/2
}

// limit: a circuit that never opens, so that the effect has a gate.
func (*pauseFamily[U]) limit(_ *simRun[U], fx *idemrt.Effect[U], _ idemrt.Effect[U]) {
	fx.Circuit = simNoCircuit
}

// exactCalls: uncrashed (crashed, a call may be made again).
func (*pauseFamily[U]) exactCalls(sc simScenario) bool { return sc.at < 0 }

// expect: the paused call, then the one after the pause.
func (*pauseFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if k := r.callKey(r.sc.call); e.calls != nil && k != "" {
		e.calls[k] = 2
	}
}

// checkEnd: the paused effect's rows (uncrashed) count no attempt for the pause.
func (*pauseFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	r.prov.mu.Lock()
	var paused string
	for e := range r.prov.gate.pauseUntil {
		paused = e
	}
	r.prov.mu.Unlock()
	if extra, ok := r.gateAttempts(ctx, famPause, paused); ok && extra != 0 {
		r.violate("pause: the rows of effect %s count %d attempts more than one each; a pause burns none", paused, extra)
	}
}
