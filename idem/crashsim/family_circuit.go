package crashsim

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

const famCircuit = "circuit"

type circuitFamily[U any] struct {
	baseFamily[U]
	// due is the clock of a clean run that must see the circuit's probe
	// (zero: none), and calls the effect's calls before it.
	due   time.Time
	calls int
}

func (*circuitFamily[U]) about() familyAbout {
	return familyAbout{name: "circuit", long: time.Second, guarantees: []int{5, 8},
		what: "the effect's provider is down for more calls than `max_attempts` under a circuit (the spec's, or " +
			"the family's own, short beside the lease, where the spec gives none): no call " +
			"inside a cool-down after a failure once the circuit's failures are reached, and the circuit open no " +
			"sooner than them; one probe at a " +
			"time, with the runs after the phases calling four at once and the provider holding each " +
			"probe until the other rows have met the gate; an open circuit ends within `max_cool_down` " +
			"of the last failure, read at each phase's end and after each run after the phases, and (uncrashed) " +
			"measured: the run just after max_cool_down from the failure that opened it makes the probe, " +
			"which comes no sooner than its opening's cool-down; every effect once, none parked, and (uncrashed) only the failures " +
			"before the circuit opened count; also crashed and taken over"}
}

// plan: each effect whose max_attempts its circuit (simCircuitOf: the
// spec's, or the family's own) can protect. The failures before the
// circuit opens count attempts: a row whose budget is no larger is parked
// by them, as it would be without a circuit; the family's "none parked"
// is for a budget the circuit can protect.
func (*circuitFamily[U]) plan(d *discovery[U]) []simScenario {
	return planGate(d, famCircuit, func(fx Effect) bool {
		return fx.MaxAttempts <= 0 || fx.MaxAttempts > int(simCircuitOf(fx).Failures)
	})
}

func (*circuitFamily[U]) sample(all []simScenario) []simScenario { return sampleGate(all) }

// setup: the outage of the scenario's effect; a probe is held while
// another row of the effect is claimed.
func (*circuitFamily[U]) setup(r *simRun[U]) {
	r.initGate()
	g := r.prov.gate
	// The effect's own circuit (limit): the spec's, or the family's own
	// by the effect's lease, not the job's longest (an effect of lease 2m
	// beside one of 720h cools down 7.5s).
	c := simCircuitOf(r.effectNamed(r.sc.effect))
	g.outageCall, g.outageEffect = r.sc.call, r.sc.effect
	g.failures, g.coolDown, g.ceiling = int(c.Failures), c.CoolDown, simCeiling(c)
	g.othersHeld = func(effect, key string) bool {
		rows, err := r.db.observer().Auto().Ledger(context.Background())
		if err != nil {
			return false // the hold ends; a second probe could then be missed, not invented
		}
		for _, e := range rows {
			if e.Effect == effect && e.Key != key && e.LeaseOwner != "" {
				return true
			}
		}
		return false
	}
}

// limit: every effect under its circuit (simCircuitOf), from the spec's
// declaration of it, not the built job's (checkDeclared holds the two
// equal).
func (*circuitFamily[U]) limit(r *simRun[U], fx *idemrt.Effect[U], _ idemrt.Effect[U]) {
	fx.Circuit = simCircuitOf(r.effectNamed(fx.Name))
}

// options: the runs after the phases call simCircuitAtOnce at a time.
func (*circuitFamily[U]) options(r *simRun[U]) []idem.Option {
	if r.isConverging() {
		return []idem.Option{idem.WithEffectConcurrency(simCircuitAtOnce)}
	}
	return nil
}

func (*circuitFamily[U]) convergenceRuns(r *simRun[U]) int {
	return simCircuitOutage(r.prov.gate.failures, r.prov.gate.maxAttempts) + 3
}

// afterPhases: the runs after the phases hold each probe.
func (*circuitFamily[U]) afterPhases(r *simRun[U]) {
	r.prov.mu.Lock()
	r.prov.gate.holdProbes = true
	r.prov.mu.Unlock()
}

// beforePhase reads the circuit the phase before left open: its first
// opening is met nowhere else.
func (*circuitFamily[U]) beforePhase(r *simRun[U], phase int) {
	if phase > 0 {
		r.checkCoolDown(context.Background())
	}
}

// simCoolDownSlack absorbs the databases' time precision.
const simCoolDownSlack = 5 * time.Millisecond

// beforeCleanRun (uncrashed): while the provider's count says the circuit
// is open, the next run comes just after max_cool_down from the failure
// that opened it: the cool-down, jitter included, is over then, and the
// run must make the probe.
func (f *circuitFamily[U]) beforeCleanRun(r *simRun[U]) {
	f.due = time.Time{}
	g := r.prov.gate
	r.prov.mu.Lock()
	effect := g.outageEffect
	open := g.outageBegun && g.failsInRow[effect] >= g.failures
	due, calls := g.lastFail[effect].Add(g.ceiling+simCoolDownSlack), g.callsOf[effect]
	r.prov.mu.Unlock()
	if !open || r.sc.at >= 0 || !due.After(r.now()) {
		return
	}
	f.due, f.calls = due, calls
	r.setClock(due)
}

// convergenceStep: none after a run set to the measured probe's time;
// else at least the circuit's ceiling, so that each run after the phases
// comes after the cool-down, whichever reopening it is (a spec's cool-down
// may outlast the lease + 1m step).
func (f *circuitFamily[U]) convergenceStep(r *simRun[U], step time.Duration) time.Duration {
	if !f.due.IsZero() {
		return 0
	}
	r.prov.mu.Lock()
	ceiling := r.prov.gate.ceiling
	r.prov.mu.Unlock()
	return max(step, ceiling+simCoolDownSlack)
}

// afterCleanRun: the circuit's end as the gate holds it, and the probe
// the run must have made.
func (f *circuitFamily[U]) afterCleanRun(ctx context.Context, r *simRun[U]) {
	r.checkCoolDown(ctx)
	if f.due.IsZero() {
		return
	}
	r.prov.mu.Lock()
	effect, calls := r.prov.gate.outageEffect, r.prov.gate.callsOf[r.prov.gate.outageEffect]
	r.prov.mu.Unlock()
	if calls == f.calls {
		r.violate("circuit: no call of effect %s by a run at %s, past max_cool_down (%s) after the failure that opened its circuit: its cool-down outlasted its ceiling",
			effect, f.due.Format(time.RFC3339Nano), r.prov.gate.ceiling)
	}
}

// checkEnd: the down effect's rows (uncrashed) count only the failures
// before the circuit opened.
func (*circuitFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	r.prov.mu.Lock()
	effect, failures := r.prov.gate.outageEffect, r.prov.gate.failures
	if !r.prov.gate.outageBegun {
		effect = ""
	}
	r.prov.mu.Unlock()
	if extra, ok := r.gateAttempts(ctx, famCircuit, effect); ok && extra > failures-1 {
		r.violate("circuit: the rows of effect %s count %d failed attempts; only the %d before the circuit opened count", effect, extra, failures-1)
	}
}

// effectNamed is the spec's declaration of the job's effect named name.
func (r *simRun[U]) effectNamed(name string) Effect {
	for _, fx := range r.job.Effects {
		if fx.Name == name {
			return fx
		}
	}
	return Effect{Name: name, Lease: r.job.Lease}
}
