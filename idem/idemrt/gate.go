package idemrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// An effect's gate: a provider's "not now" heard by the whole fleet, and
// a circuit per effect. Both live in the effect's limits rows (slot -2 of
// the limits table, beside the pacing row and the call slots of
// limits.go), on the database's clock, so every worker of every process
// sharing the database obeys them:
//
//   - PauseEffect(d, err), returned by a provider, pauses the effect: no
//     call of it starts before d has passed on the database's clock. The
//     row that got the answer, and every row that meets the pause, waits
//     for its end without counting an attempt (as RetryAfter).
//   - circuit {failures: K, cool_down: C, max_cool_down: M} (spec;
//     Circuit): K failed calls in a row across the fleet open the circuit.
//     No call starts for the cool-down, C with jitter, doubling with each
//     reopening, never longer than M (8 C when not given); then exactly
//     one call, the probe, is let through fleet-wide. Its
//     success closes the circuit; its failure opens it again. A failure
//     that finds the circuit open (the one that opened it too) and a call
//     that meets it count no attempt: an outage parks nothing.
//
// The gate is read once per call of an effect that has limits (a rate, a
// concurrency or a circuit), right before the call; an effect with none
// has no gate, and a PauseEffect from its provider holds the row that got
// it only (as RetryAfter). A person lifts a pause or closes a circuit by
// hand with LiftGate (`idemgen ledger lift`); `idemgen status` shows it.

// Circuit is an effect's circuit breaker (spec circuit). The zero value is
// none: a circuit is off by default, as it changes what every caller of
// the effect sees (calls wait instead of failing) and costs a query per
// call.
type Circuit struct {
	// Failures is how many failed calls in a row, across the fleet, open
	// the circuit; 0: no circuit.
	Failures int32
	// CoolDown is how long the circuit stays open the first time; each
	// reopening doubles it, up to MaxCoolDown.
	CoolDown time.Duration
	// MaxCoolDown is the longest a cool-down lasts, jitter included: the
	// most a recovered provider waits for the next probe. Zero:
	// maxCoolDownGrowth times CoolDown. Below CoolDown: CoolDown.
	MaxCoolDown time.Duration
}

// maxCoolDownGrowth bounds the cool-down's doubling when the spec gives
// no max_cool_down.
const maxCoolDownGrowth = 8

// ceiling is the longest cool-down, jitter included.
func (c Circuit) ceiling() time.Duration {
	if c.MaxCoolDown > 0 {
		return max(c.MaxCoolDown, c.CoolDown)
	}
	return c.CoolDown * maxCoolDownGrowth
}

// coolDown is the cool-down of the circuit's opens-th opening in a row,
// with jitter: the step times a factor in [1, 1.25), so that processes
// that saw it open at once do not all come back at once; never longer
// than the ceiling, so that a provider that recovers waits at most that
// long for the probe that lets the fleet call it again.
func (c Circuit) coolDown(opens int32, draw func() float64) time.Duration {
	most := c.ceiling()
	d := c.CoolDown
	for i := int32(1); i < opens && d < most; i++ {
		d *= 2
	}
	return min(time.Duration(float64(d)*(1+draw()/4)), most)
}

// PauseEffect marks err, returned by an effect provider, as a "not now"
// for the whole effect, not only the key (an account throttled, a
// provider down for maintenance): no worker sharing the database starts a
// call of the effect before d has passed (the effect's first retry step
// when d is not positive), and no row waiting for it counts an attempt.
// It is a RetryAfter too: errors.Is(err, ErrRetryAfter) holds, and on an
// effect without limits (no rate, concurrency or circuit) it holds this
// row only. PauseEffect(d, nil) is nil.
func PauseEffect(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return retryAfterError{d: d, err: err, effect: true}
}

// pauseOf returns the pause err asks for when it is a PauseEffect.
func pauseOf(err error) (time.Duration, bool) {
	var r retryAfterError
	if errors.As(err, &r) && r.effect {
		return r.d, true
	}
	return 0, false
}

// The gate's states (EffectGate.State).
const (
	GateClosed = ""       // calls start as the limits let them
	GatePaused = "paused" // no call until Until (PauseEffect)
	GateOpen   = "open"   // the circuit is open: no call until Until, then one probe
	GateProbe  = "probe"  // the probe is in flight, held by Owner until Until
)

// EffectGate is an effect's gate as the limits table holds it.
type EffectGate struct {
	State    string
	Until    time.Time // the pause's or cool-down's end; the probe's lease end
	Owner    string    // the probe's holder
	Failures int32     // failed calls in a row
	Opens    int32     // openings in a row (the cool-down doubles with each)
	Since    time.Time // when it was paused or opened
	Reason   string    // the provider's last answer that paused it or failed
}

// Shut reports whether no call may start at now (a probe aside).
func (g EffectGate) Shut(now time.Time) bool {
	return g.State != GateClosed && g.Until.After(now)
}

// GateQuerier holds the gate's queries (the limits table's slot -2); every
// querier has them. Every time is the database's.
type GateQuerier interface {
	// Gate reads the effect's gate; found is false without a gate row.
	Gate(ctx context.Context, job, effect string) (g EffectGate, found bool, err error)
	// PauseGate pauses the effect until until (an open circuit stays open,
	// at least until then).
	PauseGate(ctx context.Context, job, effect string, now, until time.Time, reason string) error
	// FailGate counts a failed call; threshold in a row open the circuit
	// until openUntil. It returns the gate's state and time after it.
	FailGate(ctx context.Context, job, effect string, threshold int32, now, openUntil time.Time, reason string) (state string, until time.Time, err error)
	// TakeProbe makes owner's call the probe, held until until, when the
	// circuit is open and its cool-down (or a dead probe's lease) over.
	TakeProbe(ctx context.Context, job, effect, owner string, now, until time.Time) (bool, error)
	// CloseGate closes the circuit after owner's probe succeeded;
	// ReopenGate opens it again until until after it failed.
	CloseGate(ctx context.Context, job, effect, owner string) (bool, error)
	ReopenGate(ctx context.Context, job, effect, owner string, until time.Time, reason string) (bool, error)
	// ResetGateFailures starts the failures in a row from none.
	ResetGateFailures(ctx context.Context, job, effect string) error
	// LiftGate lifts a pause or closes a circuit by hand; false when the
	// gate was closed with no failures.
	LiftGate(ctx context.Context, job, effect string) (bool, error)
}

// LiftGate lifts the pause of job's effect, or closes its circuit, by
// hand (`idemgen ledger lift JOB EFFECT`): calls start again at once, and
// the circuit counts failures from none. The owed rows that gave their
// claim back at the gate, waiting for its end, are owed again at once
// too. It reports whether the gate was paused, open or counting failures;
// the provider's last answer is kept.
func LiftGate(ctx context.Context, st Store, job, effect string) (bool, error) {
	var lifted bool
	err := st.InTx(ctx, func(q Querier) (err error) {
		g, found, err := q.Gate(ctx, job, effect)
		if err != nil {
			return err
		}
		if lifted, err = q.LiftGate(ctx, job, effect); err != nil || !lifted || !found || g.Until.IsZero() {
			return err
		}
		// A row that met the gate waits until its end as the worker read
		// it, released a moment later: a little after Until.
		_, err = q.ReleaseGateWaits(ctx, job, effect, g.Until.Add(-time.Second), g.Until.Add(gateWaitSlack))
		return err
	})
	if err != nil {
		return false, fmt.Errorf("lift the gate of job %q effect %q: %w", job, effect, err)
	}
	return lifted, nil
}

// GateObserver is an Observer that hears its effects' gates too: an
// Observer with this method gets it (idemotel's adds an idemgen.gate
// event and attributes to the call's span). state is the gate after a
// call paused the effect (GatePaused), opened or reopened its circuit
// (GateOpen), closed it with the probe's success (GateClosed), or met it
// shut (the state it met); until is when it lets a call through; reason
// is the provider's answer.
type GateObserver interface {
	Gate(ctx context.Context, job, effect, state string, until time.Time, reason string)
}

// gateEvent tells the observer, when it hears gates, about one.
func (e *Engine[U]) gateEvent(ctx context.Context, effect, state string, until time.Time, reason string) {
	if obs, ok := e.opt.observer.(GateObserver); ok {
		obs.Gate(ctx, e.def.Name, effect, state, until, reason)
	}
}

// gatePatience is the longest a call waits in its process at a shut gate;
// a longer wait gives the claim back, not counted, with the gate's end as
// the row's next attempt time, so no claim is held through a pause.
const gatePatience = 250 * time.Millisecond

// gateWaitSlack bounds how long after its gate's end a row that met the
// gate has its next attempt (the time between the worker's reads of the
// gate and of the clock at the row's release), for LiftGate to find it.
// A row whose own backoff ends in that slack goes at the lift too.
const gateWaitSlack = 5 * time.Second

// probeRecheck is how soon a row that met the probe in flight is tried
// again: the probe's outcome decides, not its lease.
const probeRecheck = time.Second

// gateTicket is what a call's passage through its effect's gate leaves
// for the call's end (gateSucceeded, gateFailed).
type gateTicket struct {
	l     *fleetLimit
	probe string // the probe's holder when the call is the probe
	opens int32  // the openings in a row when it became the probe
}

// passGate waits until the effect's gate lets a call start, or gives a
// "not now" (a RetryAfter: not counted) until the gate's time. A call
// that finds the circuit's cool-down over becomes its one probe.
func (e *Engine[U]) passGate(ctx context.Context, l *fleetLimit, q Querier, leaseUntil, deadline time.Time) (gateTicket, error) {
	t := gateTicket{l: l}
	began := time.Now() // the wait is bounded in real time, should the lease clock stand still
	for {
		now, err := e.leaseNow(ctx, nil)
		if err != nil {
			return t, err
		}
		g, _, err := q.Gate(ctx, l.job, l.effect)
		if err != nil {
			return t, fmt.Errorf("read the effect's gate: %w", err)
		}
		if (g.State == GateOpen || g.State == GateProbe) && !g.Until.After(now) {
			owner := fmt.Sprintf("%s#probe%d", e.opt.owner, l.calls.Add(1))
			ok, err := q.TakeProbe(ctx, l.job, l.effect, owner, now, leaseUntil)
			if err != nil {
				return t, fmt.Errorf("take the circuit's probe: %w", err)
			}
			if ok {
				t.probe, t.opens = owner, g.Opens
				return t, nil
			}
			if time.Since(began) <= gatePatience {
				continue // another worker's call is the probe: read the gate again
			}
			return t, RetryAfter(probeRecheck, gateShutError(l.effect, g))
		}
		if !g.Shut(now) {
			return t, nil
		}
		wait := g.Until.Sub(now)
		if wait > gatePatience || g.Until.After(deadline) || time.Since(began) > gatePatience {
			if g.State == GateProbe {
				wait = min(wait, probeRecheck)
			}
			e.gateEvent(ctx, l.effect, g.State, g.Until, g.Reason)
			return t, RetryAfter(wait, gateShutError(l.effect, g))
		}
		if err := sleep(ctx, wait); err != nil {
			return t, err
		}
	}
}

// gateShutError says why a call did not start at its effect's gate.
func gateShutError(effect string, g EffectGate) error {
	until := g.Until.UTC().Format(time.RFC3339Nano)
	switch g.State {
	case GatePaused:
		return fmt.Errorf("effect %q is paused until %s: %s", effect, until, g.Reason)
	case GateProbe:
		return fmt.Errorf("effect %q's circuit is open, its probe in flight until %s: %s", effect, until, g.Reason)
	}
	return fmt.Errorf("effect %q's circuit is open until %s after %d failures in a row: %s", effect, until, g.Failures, g.Reason)
}

// gateSucceeded records a call's success at its effect's gate: the probe
// closes the circuit; any success starts the failures in a row again.
func (e *Engine[U]) gateSucceeded(ctx context.Context, t gateTicket, log *slog.Logger) {
	if t.l == nil || t.l.circuit.Failures <= 0 && t.probe == "" {
		return
	}
	ctx = context.WithoutCancel(ctx) // the call is over: its outcome is recorded
	q := e.st.Auto()
	var err error
	if t.probe != "" {
		var closed bool
		if closed, err = q.CloseGate(ctx, t.l.job, t.l.effect, t.probe); closed {
			log.Info("idemgen: the circuit's probe succeeded; the circuit is closed")
			e.gateEvent(ctx, t.l.effect, GateClosed, time.Time{}, "")
		}
	} else {
		err = q.ResetGateFailures(ctx, t.l.job, t.l.effect)
	}
	if err != nil {
		log.Warn("idemgen: recording a success at the effect's gate failed", slog.Any("err", err))
	}
}

// gateFailed records a call's failure at its effect's gate and returns the
// cause to release the row with: a PauseEffect pauses the effect; a
// failure the circuit counts may open it (or reopen it, for the probe),
// and then comes back as a RetryAfter until its cool-down ends, so that
// it counts no attempt. A permanent failure, or a RetryAfter of the key,
// is an answer of a working provider: it counts no failure, and closes
// the circuit when it is the probe's.
func (e *Engine[U]) gateFailed(ctx context.Context, fx Effect[U], t gateTicket, cause error, log *slog.Logger) error {
	pause, paused := pauseOf(cause)
	if t.l == nil {
		if paused {
			log.Warn("idemgen: the provider paused the effect, which has no limits (rate, concurrency or circuit): only this row waits", slog.Any("err", cause))
		}
		return cause
	}
	ctx = context.WithoutCancel(ctx)
	q := e.st.Auto()
	now, err := e.leaseNow(ctx, nil)
	if err != nil {
		log.Warn("idemgen: without the database clock the failure is not recorded at the effect's gate", slog.Any("err", err))
		return cause
	}
	_, notNow := retryAfterOf(cause)
	switch {
	case paused:
		if pause <= 0 {
			pause = fx.Retry.orDefault().Initial
		}
		if err := q.PauseGate(ctx, t.l.job, t.l.effect, now, now.Add(pause), cause.Error()); err != nil {
			log.Warn("idemgen: pausing the effect failed; only this row waits", slog.Any("err", err))
			return cause
		}
		log.Warn("idemgen: the provider paused the effect; no worker calls it before the pause ends",
			slog.Time("until", now.Add(pause)), slog.Any("err", cause))
		e.gateEvent(ctx, t.l.effect, GatePaused, now.Add(pause), cause.Error())
		return cause
	case notNow || errors.Is(cause, ErrPermanent):
		if t.probe != "" {
			e.gateSucceeded(ctx, t, log)
		}
		return cause
	case t.l.circuit.Failures <= 0:
		return cause
	case t.probe != "":
		until := now.Add(t.l.circuit.coolDown(t.opens+1, jitter))
		reopened, err := q.ReopenGate(ctx, t.l.job, t.l.effect, t.probe, until, cause.Error())
		if err != nil || !reopened {
			if err != nil {
				log.Warn("idemgen: reopening the circuit after its probe failed did not work", slog.Any("err", err))
			}
			return cause
		}
		log.Warn("idemgen: the circuit's probe failed; the circuit is open again", slog.Time("until", until), slog.Any("err", cause))
		e.gateEvent(ctx, t.l.effect, GateOpen, until, cause.Error())
		return RetryAfter(until.Sub(now), fmt.Errorf("the circuit's probe failed, not counted: %w", cause))
	}
	state, until, err := q.FailGate(ctx, t.l.job, t.l.effect, t.l.circuit.Failures, now, now.Add(t.l.circuit.coolDown(1, jitter)), cause.Error())
	if err != nil {
		log.Warn("idemgen: counting the failure at the effect's circuit failed", slog.Any("err", err))
		return cause
	}
	if (state == GateOpen || state == GateProbe) && until.After(now) {
		wait := until.Sub(now)
		if state == GateProbe {
			wait = min(wait, probeRecheck)
		}
		e.gateEvent(ctx, t.l.effect, state, until, cause.Error())
		return RetryAfter(wait, fmt.Errorf("the effect's circuit is open, not counted: %w", cause))
	}
	return cause
}
