package crashsim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// The gate families (idem/idemrt/gate.go): the provider's "not now" for a whole
// effect, and an effect's circuit, each played clean and crashed at hits
// spread over the first phase (the next process takes over once the
// crashed one's leases run out).
//
//   - pause: one call of an effect is answered idem.PauseEffect(lease/2):
//     no call of that effect, any key, any worker, may reach the provider
//     before the pause ends on the simulated clock; every effect is still
//     performed once, none is parked, and (clean) every row of the effect
//     ends with one attempt counted: a row that met the pause burned none.
//   - circuit: from one call of an effect on, the provider is down for
//     simCircuitOutage(...) calls of it. The effect's circuit (the spec's
//     where it sets one, else the family's own: failures
//     simCircuitFailures, cool_down lease/16, max_cool_down twice that;
//     simCircuitOf) opens; while the provider's own count
//     says it is open, a call must come a cool-down after the last failed
//     one (the probe), and only one (a second call at once is a second
//     probe). The runs after the phases call the effect simCircuitAtOnce
//     at a time, and the provider holds each probe until every other row
//     of the effect has given its claim back (or simProbeHold passes): a
//     call that reaches the provider meanwhile is a second probe at once,
//     fleet-wide. After each run the open circuit's end must lie within
//     max_cool_down of the last failure (the outage reopens it more times
//     than the doubling takes to pass the ceiling); every effect is
//     still performed once and none is parked although the outage lasts
//     longer than max_attempts; and (clean) the effect's rows count at
//     most failures-1 failed attempts in all: failures that met
//     the circuit open, and the probes', count none.
//
// The phases' runs are sequential within a process (one call in flight),
// so what the provider sees is what the gate let through, and the matrix
// replays each crash to the same hit; the clean runs after them, with
// calls at once, are where a second probe could meet the first.

// simCircuitFailures is the circuit's failures in a row in the circuit
// family where the spec gives the effect no circuit; other families'
// effects get a circuit that never opens (simNoCircuit), so that their
// effects have a gate for PauseEffect.
const simCircuitFailures = 2

var simNoCircuit = idemrt.Circuit{Failures: 1 << 30, CoolDown: time.Hour}

// simGate is the provider's side of the gate families.
type simGate struct {
	// pauseCall's key is answered PauseEffect(pauseWait) once (-1: none);
	// a call of its effect before pauseUntil is early.
	pauseCall  int
	pauseWait  time.Duration
	pauseUntil map[string]time.Time
	// outageCall starts the outage of outageEffect (simScenario.effect):
	// from its first call at or after outageCall, outageLeft more calls of
	// it fail.
	outageCall   int
	outageEffect string
	outageBegun  bool
	outageLeft   int
	coolDown     time.Duration
	// failsInRow and lastFail: the provider's own count of an effect's
	// failures in a row and when the last one was answered.
	failsInRow map[string]int
	lastFail   map[string]time.Time
	wrong      []string
	// callsOf counts each effect's calls; failures is the outage
	// effect's circuit's failures in a row, ceiling its max_cool_down
	// (jitter included), and exact says that no crash has made the
	// provider's count of the openings uncertain (crashed).
	callsOf  map[string]int
	failures int
	ceiling  time.Duration
	exact    bool
	// holdProbes: a probe of the outage is held (holdProbe) while the
	// rest of the run's calls meet the gate; probing counts an effect's
	// probes in flight. holdProbe returns when no other row of effect
	// but key is claimed.
	holdProbes bool
	held       int // probes held so far (at most simProbesHeld)
	probing    map[string]int
	othersHeld func(effect, key string) bool
	// slotted: effects with a concurrency, whose call slots keep a second
	// call from meeting the probe anyway; their probes are not held (the
	// others would hold the hold for their slot wait).
	slotted map[string]bool
	// maxAttempts is the job's effects' largest max_attempts.
	maxAttempts int
}

func newSimGate() *simGate {
	return &simGate{pauseCall: -1, outageCall: -1, pauseUntil: map[string]time.Time{}, failsInRow: map[string]int{}, lastFail: map[string]time.Time{},
		probing: map[string]int{}, slotted: map[string]bool{}, callsOf: map[string]int{}, exact: true}
}

// initGate sets the provider up for a gate family's scenario.
func (r *simRun[U]) initGate() {
	g := r.prov.gate
	for _, fx := range r.job.Effects {
		g.maxAttempts = max(g.maxAttempts, fx.MaxAttempts)
		g.slotted[fx.Name] = fx.Concurrency > 0
	}
}

// simCircuitAtOnce is how many calls at once the circuit family's runs
// after the phases make.
const simCircuitAtOnce = 4

// simProbeHold bounds how long the provider holds a probe (real time).
const simProbeHold = 2 * time.Second

// simProbesHeld is how many probes a scenario holds: each hold lasts
// while the others meet the gate (tens of ms on SQLite, per probe of an
// outage that outlasts max_attempts), and a second probe shows at the
// first hold it meets.
const simProbesHeld = 3

// probe reports whether a call of effect now would be a probe of the
// open circuit that the provider holds (the runs after the phases), and
// records a second one in flight at once. Called with the provider's lock.
func (g *simGate) probe(effect, key string, now time.Time) bool {
	if !g.holdProbes || g.slotted[effect] || effect != g.outageEffect || g.outageLeft <= 0 || g.failsInRow[effect] < g.failures {
		return false
	}
	if g.probing[effect] == 0 && g.held >= simProbesHeld {
		return false // enough holds; a second probe at once is still recorded below while one is held
	}
	if g.probing[effect] > 0 {
		g.wrong = append(g.wrong, fmt.Sprintf("circuit: %s of effect %s called at %s while another probe of it was in flight: two probes at once",
			key, effect, now.Format(time.RFC3339)))
	}
	g.probing[effect]++
	g.held++
	return true
}

// holdProbe waits, without the provider's lock, until no other row of
// effect is claimed (each met the probe in flight and gave its claim back),
// at most simProbeHold; then the probe is answered.
func (g *simGate) holdProbe(effect, key string) {
	for began := time.Now(); time.Since(began) < simProbeHold && g.othersHeld(effect, key); {
		time.Sleep(5 * time.Millisecond)
	}
}

// simCircuitCoolDown is the circuit family's own cool-down: its longest
// without a ceiling (8 times) is shorter than a lease, so that the next
// process after a crash, a lease later, finds it over.
func simCircuitCoolDown(lease time.Duration) time.Duration { return max(lease/16, time.Second) }

// simCircuitCeiling is the circuit family's own max_cool_down: twice the
// cool-down, reached at the second reopening.
func simCircuitCeiling(lease time.Duration) time.Duration { return 2 * simCircuitCoolDown(lease) }

// simCircuitOf is the circuit the circuit family plays an effect under:
// the spec's, where it sets one, else the family's own, short beside the
// effect's lease. A spec's cool-down may outlast a lease (24h beside 5m):
// the next process after a crash then finds the circuit still open, and
// the runs after the phases step past its ceiling (convergenceStep).
func simCircuitOf(fx Effect) idemrt.Circuit {
	if fx.Circuit.Failures > 0 {
		return fx.Circuit
	}
	return idemrt.Circuit{Failures: simCircuitFailures, CoolDown: simCircuitCoolDown(fx.Lease), MaxCoolDown: simCircuitCeiling(fx.Lease)}
}

// simCeiling is a circuit's longest cool-down, jitter included, from the
// spec's words (docs/spec.md): max_cool_down, never below cool_down; 8
// times cool_down when not given.
func simCeiling(c idemrt.Circuit) time.Duration {
	if c.MaxCoolDown > 0 {
		return max(c.MaxCoolDown, c.CoolDown)
	}
	return 8 * c.CoolDown
}

// circuitStep is the cool-down of a circuit's opens-th opening in a row
// without its jitter, worked out from the spec's words: cool_down, doubled
// with each reopening, at most the ceiling.
func circuitStep(coolDown, ceiling time.Duration, opens int) time.Duration {
	d := coolDown
	for i := 1; i < opens && d < ceiling; i++ {
		d *= 2
	}
	return min(d, ceiling)
}

// simCircuitOutage is how many calls of the effect fail: the circuit's
// failures, and more probes than max_attempts, so that counting the
// failures of an open circuit would park a row.
func simCircuitOutage(failures, maxAttempts int) int { return failures + maxAttempts + 2 }

// answer is the gate families' answer to call n of key (of effect) at
// now, when they make one; it also checks the call against what the
// provider said before.
func (g *simGate) answer(n int, effect, key string, now time.Time) (error, bool) {
	if until, ok := g.pauseUntil[effect]; ok && now.Before(until) {
		g.wrong = append(g.wrong, fmt.Sprintf("pause: %s of effect %s called at %s, the effect paused until %s", key, effect, now.Format(time.RFC3339), until.Format(time.RFC3339)))
	}
	g.callsOf[effect]++
	if g.failures > 0 && g.failsInRow[effect] >= g.failures && now.Before(g.lastFail[effect].Add(g.coolDown)) {
		g.wrong = append(g.wrong, fmt.Sprintf("circuit: %s of effect %s called at %s, %d failures in a row, the last at %s: inside the cool-down %s (a call during it, or a second probe)",
			key, effect, now.Format(time.RFC3339), g.failsInRow[effect], g.lastFail[effect].Format(time.RFC3339), g.coolDown))
	} else if g.failures > 0 && g.failsInRow[effect] >= g.failures && g.exact {
		// The probe: the cool-down it observed is at least the opening's
		// step (cool_down doubled with each reopening, at most the
		// ceiling; the jitter only lengthens it).
		opens := g.failsInRow[effect] - g.failures + 1
		if least := circuitStep(g.coolDown, g.ceiling, opens); now.Sub(g.lastFail[effect]) < least {
			g.wrong = append(g.wrong, fmt.Sprintf("circuit: the probe %s of effect %s came %s after the failure that opened the circuit for the %d. time in a row (at %s): its cool-down is at least %s (cool_down %s, doubled per reopening, max_cool_down %s)",
				key, effect, now.Sub(g.lastFail[effect]), opens, g.lastFail[effect].Format(time.RFC3339Nano), least, g.coolDown, g.ceiling))
		}
	}
	if n == g.pauseCall {
		g.pauseUntil[effect] = now.Add(g.pauseWait)
		return idem.PauseEffect(g.pauseWait, fmt.Errorf("simulated 429 for the whole account at %s", key)), true
	}
	// The outage begins at the planned effect's first call from the
	// planned call on: a crash or calls at once can put another effect's
	// call at that number, one whose budget the plan kept out of the
	// family (max_attempts no larger than the circuit's failures).
	if !g.outageBegun && effect == g.outageEffect && n >= g.outageCall {
		g.outageBegun, g.outageLeft = true, simCircuitOutage(g.failures, g.maxAttempts)
	}
	if effect == g.outageEffect && g.outageLeft > 0 {
		g.outageLeft--
		g.failsInRow[effect]++
		g.lastFail[effect] = now
		return fmt.Errorf("simulated 503 of effect %s's provider at %s, %d more to come", effect, key, g.outageLeft), true
	}
	g.failsInRow[effect] = 0
	return nil, false
}

// crashed forgives, after a process died, the last failure of each effect
// in a row: the process may have died after the provider answered it and
// before the runtime recorded it at the effect's gate (as a crash between
// a call and the ledger can lose its outcome), so the fleet's count may be
// one short of the provider's and the circuit open one failure later.
func (g *simGate) crashed() {
	g.exact = false
	for effect, n := range g.failsInRow {
		if n > 0 {
			g.failsInRow[effect] = n - 1
		}
	}
}

// checkGate: what the provider saw broke no pause and no cool-down.
func (r *simRun[U]) checkGate() {
	r.prov.mu.Lock()
	wrong := slices.Clone(r.prov.gate.wrong)
	r.prov.mu.Unlock()
	if len(wrong) > 0 {
		r.violate("end: %s", strings.Join(wrong, "; "))
	}
}

// gateAttempts is, in a clean scenario of a gate family, how many
// attempts more than one each the done rows of effect (the one paused or
// down) count; ok is false when there is nothing to judge (a crashed
// claim counts its attempt).
func (r *simRun[U]) gateAttempts(ctx context.Context, family, effect string) (extra int, ok bool) {
	if effect == "" {
		r.violate("%s: no call of an effect was answered as the scenario planned", family)
		return 0, false
	}
	if r.sc.at >= 0 {
		return 0, false // a crashed claim counts its attempt
	}
	rows, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("%s: read the ledger: %v", family, err)
		return 0, false
	}
	for _, e := range rows {
		if e.Effect == effect && e.State == idem.StateDone {
			extra += e.Attempts - 1
		}
	}
	return extra, true
}

// checkCoolDown (circuit): an open circuit ends within max_cool_down of
// the provider's last failure, whichever reopening it is, and opened no
// sooner than its failures in a row. Every opening
// is recorded at a failure's answer, on the simulated clock, which stands
// still within a run; a crash that lost a failure's record leaves an
// earlier end, never a later one.
func (r *simRun[U]) checkCoolDown(ctx context.Context) {
	g := r.prov.gate
	r.prov.mu.Lock()
	effect, last, begun, ceiling := g.outageEffect, g.lastFail[g.outageEffect], g.outageBegun, g.ceiling
	inRow, failures, exact := g.failsInRow[g.outageEffect], g.failures, g.exact
	r.prov.mu.Unlock()
	if !begun {
		return
	}
	gate, found, err := r.db.observer().Auto().Gate(ctx, r.job.Name, effect)
	if err != nil {
		r.violate("circuit: read the gate of effect %s: %v", effect, err)
		return
	}
	if found && gate.State == idemrt.GateOpen && gate.Until.Sub(last) > ceiling {
		r.violate("circuit: effect %s's circuit is open until %s, %s after the last failure at %s (opened %d times in a row); max_cool_down is %s",
			effect, gate.Until.Format(time.RFC3339Nano), gate.Until.Sub(last), last.Format(time.RFC3339Nano), gate.Opens, ceiling)
	}
	// Opened no sooner than the spec's failures in a row (the provider's
	// count is exact while no process has died).
	if found && gate.State == idemrt.GateOpen && exact && inRow < failures {
		r.violate("circuit: effect %s's circuit is open after %d failures in a row; its circuit opens at %d", effect, inRow, failures)
	}
}

// isConverging reports whether the phases are over (the clean runs after).
func (r *simRun[U]) isConverging() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.converging
}

// gateCrashOffsets are the hits after an effect's first call at which a
// gate family crashes.
var gateCrashOffsets = []int{2, 7, 15}

// planGate plans a gate family: for each effect it takes, clean, then
// crashed at hits after the effect's first call (the first phase's calls
// of it meet the gate), and taken over.
func planGate[U any](d *discovery[U], family string, takes func(Effect) bool) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		c := d.firstCallOf(fx.Name)
		if c < 0 || !takes(fx) {
			continue
		}
		sc := newScenario(family)
		sc.call, sc.effect = c, fx.Name
		plan = append(plan, sc)
		if k, ok := d.firstCall[fx.Name]; ok {
			for _, dk := range gateCrashOffsets {
				sc = at(family, k+dk)
				sc.call, sc.effect, sc.crashAt = c, fx.Name, []int{k + dk}
				plan = append(plan, sc)
			}
		}
	}
	return plan
}

// sampleGate is a gate family's -short sample: each effect clean (where
// the gate's timing is measured), and crashed once, the n-th effect at
// gateCrashOffsets[n mod 3], so that a job's effects between them crash
// early, midway and late in the gate's story. Each scenario of a gate
// family waits out a gate in real time (its about's long); playing all
// four per effect was a third of a consumer job's PostgreSQL -short time.
func sampleGate(all []simScenario) []simScenario {
	var out []simScenario
	effect, crashes := -1, 0 // the effect's index in the plan, and its crashes met so far
	for _, sc := range all {
		if len(sc.crashAt) == 0 { // planGate begins each effect's scenarios clean
			out = append(out, sc)
			effect, crashes = effect+1, 0
			continue
		}
		if crashes == effect%len(gateCrashOffsets) {
			out = append(out, sc)
		}
		crashes++
	}
	return out
}
