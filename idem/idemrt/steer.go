package idemrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Steering by hand: the person on call changes an effect's limits while
// the fleet runs, with no spec change, generate or deploy (`idemgen ledger
// limit` and `pause`, the operations page):
//
//   - SetLimits overrides the spec's rate and concurrency of an effect,
//     fleet-wide, in the effect's override row of the limits table;
//     ResetLimits goes back to the spec's values.
//   - PauseByHand pauses the effect, as a provider's PauseEffect does, in
//     the effect's gate row; LiftGate ends it early.
//
// Every engine re-reads its job's override and gate rows at most
// steerStaleness after it last did, on the next call of any of its
// effects, in one query: a worker follows within about a second, without
// a restart. An effect the spec gives no limits that someone steers gets
// them from then on (its gate read per call, as any limited effect's).

// steerStaleness is how old a worker's view of its job's steering may be.
const steerStaleness = time.Second

// LimitOverride is an effect's rate and concurrency set by hand. A zero
// Rate or Concurrency keeps the spec's.
type LimitOverride struct {
	Rate        Rate
	Concurrency int32
	// By is who set it; Since when (the database's clock; SetLimits fills it).
	By    string
	Since time.Time
}

// Steering is what an effect's override and gate rows hold.
type Steering struct {
	Override *LimitOverride // nil: the spec's limits
	Gate     *EffectGate    // nil: no gate row holds anything
}

// SteerQuerier holds steering's queries (the limits table's slots -3 and
// -2); every querier has them. Every time is the database's.
type SteerQuerier interface {
	SetLimitOverride(ctx context.Context, job, effect string, o LimitOverride) error
	// ClearLimitOverride removes the override; false when there was none.
	ClearLimitOverride(ctx context.Context, job, effect string) (bool, error)
	// PauseGateByHand pauses the effect from now until until, whatever its
	// gate held, with by as the gate's owner.
	PauseGateByHand(ctx context.Context, job, effect string, now, until time.Time, by, reason string) error
	// JobSteering reads the job's overrides and the gates that hold
	// something, by effect.
	JobSteering(ctx context.Context, job string) (map[string]Steering, error)
	// ReleaseGateWaits makes the effect's owed rows whose next attempt is
	// between from and to (those that met its gate, after a lift) owed
	// at once; it returns how many.
	ReleaseGateWaits(ctx context.Context, job, effect string, from, to time.Time) (int64, error)
}

// SetLimits overrides the rate and concurrency of job's effect fleet-wide
// (`idemgen ledger limit JOB EFFECT -rate N/s -concurrency N`): every
// worker follows within about a second. o.Since is the database's now.
func SetLimits(ctx context.Context, st Store, job, effect string, o LimitOverride) error {
	if err := o.check(); err != nil {
		return err
	}
	q := st.Auto()
	now, err := q.DBNow(ctx)
	if err != nil {
		return fmt.Errorf("read the database's clock: %w", err)
	}
	o.Since = now
	if err := q.SetLimitOverride(ctx, job, effect, o); err != nil {
		return fmt.Errorf("override the limits of job %q effect %q: %w", job, effect, err)
	}
	return nil
}

// check refuses an override that sets nothing or something impossible.
func (o LimitOverride) check() error {
	switch {
	case o.Rate.N < 0 || o.Rate.N > 0 && o.Rate.Per <= 0:
		return fmt.Errorf("rate %d/%s: want a positive number of calls over a positive period", o.Rate.N, o.Rate.Per)
	case o.Concurrency < 0:
		return fmt.Errorf("concurrency %d: want a positive number of calls at once", o.Concurrency)
	case o.Rate.N == 0 && o.Concurrency == 0:
		return errors.New("an override sets a rate, a concurrency or both (to go back to the spec's, reset it)")
	}
	return nil
}

// ResetLimits removes the override of job's effect: its limits are the
// spec's again, on every worker within about a second. It reports
// whether there was one.
func ResetLimits(ctx context.Context, st Store, job, effect string) (bool, error) {
	had, err := st.Auto().ClearLimitOverride(ctx, job, effect)
	if err != nil {
		return false, fmt.Errorf("reset the limits of job %q effect %q: %w", job, effect, err)
	}
	return had, nil
}

// PauseByHand pauses job's effect for d fleet-wide (`idemgen ledger pause
// JOB EFFECT -for D`), as a provider's PauseEffect does: no call of it
// starts before d has passed on the database's clock, and no row waiting
// for it counts an attempt. LiftGate ends it early. It returns the
// pause's end.
func PauseByHand(ctx context.Context, st Store, job, effect string, d time.Duration, by string) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("pause for %s: want a positive duration", d)
	}
	q := st.Auto()
	now, err := q.DBNow(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	until := now.Add(d)
	if err := q.PauseGateByHand(ctx, job, effect, now, until, by, "paused by hand by "+by); err != nil {
		return time.Time{}, fmt.Errorf("pause job %q effect %q: %w", job, effect, err)
	}
	return until, nil
}

// steerCache is an engine's view of its job's steering, re-read at most
// steerStaleness after the last read. The mutex guards the fields only,
// never a round trip: a call that finds the view stale while another
// reads it waits for that read, so that no call follows a view older
// than the one being read.
type steerCache struct {
	mu       sync.Mutex
	readAt   time.Time     // zero: never read
	inFlight chan struct{} // closed when the read under way ends; nil without one
	rows     map[string]Steering
	err      error // the last read's
	warned   bool  // a failed read was logged since the last good one
}

// steering returns the job's steering, read again when it is stale.
func (e *Engine[U]) steering(ctx context.Context) (map[string]Steering, error) {
	c := &e.steer
	c.mu.Lock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < steerStaleness {
		defer c.mu.Unlock()
		return c.rows, nil
	}
	if wait := c.inFlight; wait != nil {
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.rows, c.err
	}
	done := make(chan struct{})
	c.inFlight = done
	c.mu.Unlock()

	rows, err := e.st.Auto().JobSteering(ctx, e.def.Name)

	c.mu.Lock()
	defer c.mu.Unlock()
	c.inFlight, c.err = nil, err
	close(done)
	if err != nil {
		return c.rows, err
	}
	c.rows, c.readAt, c.warned = rows, time.Now(), false
	return rows, nil
}

// limitOf returns the limits fx is under now, the spec's with the
// override applied, or nil when it has none: an effect the spec gives no
// limits gets them once someone steers it. A failed read of the steering
// fails the call of an effect with limits, as its other limit queries
// would; one without runs on the spec, logged.
func (e *Engine[U]) limitOf(ctx context.Context, fx Effect[U]) (*fleetLimit, error) {
	steer, err := e.steering(ctx)
	e.limitsMu.Lock()
	l := e.limits[fx.Name]
	e.limitsMu.Unlock()
	if err != nil {
		if l != nil {
			return nil, fmt.Errorf("read the steering of effect %q: %w", fx.Name, err)
		}
		e.warnSteering(err)
		return nil, nil
	}
	s, steered := steer[fx.Name]
	if l == nil {
		if !steered {
			return nil, nil
		}
		e.limitsMu.Lock()
		if l = e.limits[fx.Name]; l == nil {
			l = newFleetLimit(e.def.Name, fx.Name, Rate{}, 0, Circuit{})
			if e.limits == nil {
				e.limits = map[string]*fleetLimit{}
			}
			e.limits[fx.Name] = l
		}
		e.limitsMu.Unlock()
	}
	l.follow(s.Override)
	return l, nil
}

// followSteering brings l up to the job's steering (a view at most
// steerStaleness old), for a call that waits for its start or slot. A
// failed read leaves l as it was: the call's next try reads again.
func (e *Engine[U]) followSteering(ctx context.Context, l *fleetLimit) {
	if steer, err := e.steering(ctx); err == nil {
		l.follow(steer[l.effect].Override)
	}
}

// warnSteering logs a failed read of the steering once until a read works.
func (e *Engine[U]) warnSteering(err error) {
	e.steer.mu.Lock()
	warned := e.steer.warned
	e.steer.warned = true
	e.steer.mu.Unlock()
	if !warned {
		e.opt.log.Warn("idemgen: reading the effects' limits set by hand failed; effects without limits of their own run on the spec's", slog.Any("err", err))
	}
}

// SteerSlotOverride is the limits table's slot of an effect's override
// row (slot -1 paces its calls, -2 is its gate, 0 and up its call slots).
const SteerSlotOverride = -3

// ReadOverride makes an override of what its row holds: the rate's calls
// and period (as Go writes a duration; "" without a rate), the
// concurrency, who set it and when.
func ReadOverride(rateN int32, ratePer string, concurrency int32, by string, since time.Time) (LimitOverride, error) {
	o := LimitOverride{Concurrency: concurrency, By: by, Since: since}
	if rateN > 0 {
		per, err := time.ParseDuration(ratePer)
		if err != nil {
			return o, fmt.Errorf("the override's rate period %q: %w", ratePer, err)
		}
		o.Rate = Rate{N: rateN, Per: per}
	}
	return o, nil
}
