package crashsim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// The fleet family: two workers at once under one concurrency. Every
// effect is held to concurrency 1 across workers (the limits table); the
// provider counts each effect's calls in flight, holding each call open a
// moment so that two workers' calls would overlap, and a second call of
// an effect while one is in flight is a violation.
//
// An effect's rate is not simulated: the simulation's clock stands still
// within a phase, so pacing on it would only add real waits. The
// example's tests prove the rate across workers with real clocks.

// simFleetHold is how long a call of the fleet family stays in flight:
// long enough that the two workers' calls overlap on PostgreSQL too, whose
// round trips are slower than SQLite's (at 3 ms they could miss each other
// there, and a slot taken while live could pass).
const simFleetHold = 15 * time.Millisecond

// simFlight counts each effect's calls in flight (the fleet family).
type simFlight struct {
	limit int32
	mu    sync.Mutex
	now   map[string]*atomic.Int32
	wide  []string // effects seen above limit, with the count
}

// enter counts a call of effect in flight and returns its leaving.
func (f *simFlight) enter(effect string) func() {
	f.mu.Lock()
	c := f.now[effect]
	if c == nil {
		c = &atomic.Int32{}
		f.now[effect] = c
	}
	f.mu.Unlock()
	if n := c.Add(1); n > f.limit {
		f.mu.Lock()
		f.wide = append(f.wide, fmt.Sprintf("%s: %d calls in flight", effect, n))
		f.mu.Unlock()
	}
	time.Sleep(simFleetHold)
	return func() { c.Add(-1) }
}

// limits is the edit of a scenario's effects: no rate (see above) and no
// circuit, but where the scenario's family sets them (its limit: the rate
// family's rate, family_rate.go; the gate families' circuit, gate.go; the fleet
// family's concurrency 1).
func (r *simRun[U]) limits(edit func(*idemrt.Job[U])) func(*idemrt.Job[U]) {
	return func(j *idemrt.Job[U]) {
		r.checkDeclared(j)
		if edit != nil {
			edit(j)
		}
		for i := range j.Effects {
			spec := j.Effects[i]
			j.Effects[i].Rate = idemrt.Rate{}
			j.Effects[i].Circuit = idemrt.Circuit{}
			r.fam.limit(r, &j.Effects[i], spec)
		}
	}
}

// checkFleet: no effect had more calls in flight than its concurrency.
func (r *simRun[U]) checkFleet() {
	if r.prov.flight == nil {
		return
	}
	r.prov.flight.mu.Lock()
	wide := r.prov.flight.wide
	r.prov.flight.mu.Unlock()
	if len(wide) > 0 {
		r.violate("end: under concurrency %d across workers, %s", r.prov.flight.limit, strings.Join(wide, "; "))
	}
}

// simSlotPatience is how long, in real time, a worker of the simulation
// waits for a call slot under an effect's concurrency before it gives the
// wait up as "no room" (idemtest.WithSlotWait). The simulated lease clock stands
// still meanwhile, so the engine's own bound, half the lease, ran out in
// real time: a minute a wait, three waits a scenario of the takeover and
// livelease families once a spec declared a concurrency. A slot is held
// for one call at most here (simFleetHold, simStallTimeout), so a wait that
// outlasts this has met a worker the scenario keeps paused, whose slot no
// wait would see freed, and ends as the engine's bound would end it.
const simSlotPatience = time.Second

// simSlotPatienceBesidePaused is the patience while the scenario keeps a
// worker paused: the slot waited for is then most likely the paused
// worker's, and the three waits of a takeover scenario took 3 s of its 3.1.
// A running worker's slot is still freed well within it (one call).
const simSlotPatienceBesidePaused = 250 * time.Millisecond

// slotWait is the simulation's idemtest.WithSlotWait (simSlotWait).
func (r *simRun[U]) slotWait(ctx context.Context, _ string, waited, poll time.Duration) bool {
	return simSlotWait(ctx, waited, poll, r.pausedNow.Load() > 0)
}

// simSlotWait sleeps a slot wait's poll, capped so that a freed slot is
// seen soon, and gives up (true) after simSlotPatience, or
// simSlotPatienceBesidePaused while the scenario keeps a worker paused.
func simSlotWait(ctx context.Context, waited, poll time.Duration, paused bool) bool {
	patience := simSlotPatience
	if paused {
		patience = simSlotPatienceBesidePaused
	}
	if waited >= patience {
		return true
	}
	t := time.NewTimer(min(poll, 20*time.Millisecond))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// checkDeclared: the job the generated code builds declares what the
// spec says (its crashsim.Job, from the spec alone). The scenarios then
// run each effect without its rate and with their own circuit, so a rate,
// a concurrency or a circuit lost between the spec and the built job would
// show nowhere else. The declared versions are the base ones: a bump's
// edit comes after this check.
func (r *simRun[U]) checkDeclared(j *idemrt.Job[U]) {
	if r.declared.Swap(true) {
		return
	}
	if j.Version != r.job.Version || j.MaxAttempts != int32(r.job.UnitMaxAttempts) {
		r.violate("declared: job %s is built with version %d, max_attempts %d; the spec says %d, %d",
			r.job.Name, j.Version, j.MaxAttempts, r.job.Version, r.job.UnitMaxAttempts)
	}
	if len(j.Effects) != len(r.job.Effects) {
		r.violate("declared: job %s is built with %d effects; the spec declares %d", r.job.Name, len(j.Effects), len(r.job.Effects))
		return
	}
	for i, fx := range r.job.Effects {
		got, want := builtDeclaration(j.Effects[i]), specDeclaration(fx)
		if want.Retry == (idemrt.Backoff{}) {
			got.Retry = idemrt.Backoff{}
		}
		if want.Timeout == 0 {
			got.Timeout = 0
		}
		if got != want {
			r.violate("declared: effect %s is built with %+v; the spec says %+v", fx.Name, got, want)
		}
	}
}

// effectDeclaration is what a spec declares of an effect that the job
// must be built with. Retry and Timeout are compared only where the spec
// sets them (zero: the runtime's defaults, which the build may spell out).
type effectDeclaration struct {
	Name        string
	Version     int32
	When        idemrt.When
	Lease       time.Duration
	Retention   time.Duration
	KeepResult  bool
	MaxAttempts int32
	Retry       idemrt.Backoff
	Timeout     time.Duration
	Rate        idemrt.Rate
	Concurrency int32
	Circuit     idemrt.Circuit
}

func specDeclaration(fx Effect) effectDeclaration {
	return effectDeclaration{Name: fx.Name, Version: fx.Version, When: fx.When, Lease: fx.Lease, Retention: fx.Retention,
		KeepResult: fx.KeepResult, MaxAttempts: int32(fx.MaxAttempts), Retry: fx.Retry, Timeout: fx.Timeout,
		Rate: fx.Rate, Concurrency: fx.Concurrency, Circuit: fx.Circuit}
}

func builtDeclaration[U any](fx idemrt.Effect[U]) effectDeclaration {
	return effectDeclaration{Name: fx.Name, Version: fx.Version, When: fx.When, Lease: fx.Lease, Retention: fx.Retention,
		KeepResult: fx.KeepResult, MaxAttempts: fx.MaxAttempts, Retry: fx.Retry, Timeout: fx.Timeout,
		Rate: fx.Rate, Concurrency: fx.Concurrency, Circuit: fx.Circuit}
}
