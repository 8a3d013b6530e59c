package idemrt

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Fleet-wide limits: an effect's rate and concurrency (spec rate,
// concurrency) bound its provider calls across every worker sharing the
// database, kept in the package's limits table:
//
//   - concurrency N: call slots 0..N-1. A call holds a slot (TakeSlot)
//     from just before it starts until it returns, and at most until its
//     lease ends, so a crashed worker's slot comes free when its lease
//     would have (on the database's clock, as leases are).
//   - rate N/period: the pacing row holds when the next call may start.
//     A call takes that start and moves it on by period/N (MovePace, a
//     compare-and-set), then waits for it: starts are never closer than
//     period/N, fleet-wide, so no window of a period holds more than N.
//
// A call that cannot get its slot or start in the first half of its lease
// gives its claim back without counting an attempt, as the provider's
// RetryAfter does: the effect waits (ErrWaiting) and a later run or drain
// performs it. An effect without limits costs nothing: no row, no query.

// Rate is N provider calls per period (spec rate: 50/s, 600/m, 1000/h).
type Rate struct {
	N   int32
	Per time.Duration
}

// spacing is the least time between two call starts under r.
func (r Rate) spacing() time.Duration { return r.Per / time.Duration(r.N) }

// LimitQuerier holds the limits table's queries; every querier has them.
type LimitQuerier interface {
	// EnsureLimitSlot adds a row once: the pacing row (slot -1, heldUntil
	// the first start), or a free call slot (heldUntil zero).
	EnsureLimitSlot(ctx context.Context, job, effect string, slot int32, heldUntil time.Time) error
	// TakeSlot holds a free slot below slots for owner until until; false
	// when every one is held at now.
	TakeSlot(ctx context.Context, job, effect string, slots int32, owner string, now, until time.Time) (slot int32, ok bool, err error)
	FreeSlot(ctx context.Context, job, effect string, slot int32, owner string) error
	// Pace reads when the effect's next call may start; MovePace moves it
	// from seen to next, false when another worker moved it first.
	Pace(ctx context.Context, job, effect string) (time.Time, error)
	MovePace(ctx context.Context, job, effect string, seen, next time.Time) (bool, error)
}

// errNoRoom is a call that found no slot or start within its lease: it is
// given back as "not now" for wait.
func errNoRoom(what string, wait time.Duration) error {
	return RetryAfter(wait, fmt.Errorf("%s across workers has no room before the lease ends; called again in %s", what, wait.Round(time.Millisecond)))
}

// fleetLimit is one effect's limits as an engine keeps them.
type fleetLimit struct {
	job, effect string
	rate        Rate
	concurrency int32
	circuit     Circuit
	// local bounds this process's calls that hold or seek a slot: more
	// than the fleet's slots would only poll.
	local chan struct{}
	// rowsMu guards rows: the limits table has this effect's rows. A
	// failed attempt to add them is tried again by the next call.
	rowsMu sync.Mutex
	rows   bool
	// calls numbers the engine's calls, so each slot holder is distinct.
	calls atomic.Uint64
}

// newFleetLimits returns the limits of def's effects that have any.
func newFleetLimits[U any](def *Job[U]) map[string]*fleetLimit {
	var out map[string]*fleetLimit
	for _, fx := range def.Effects {
		if fx.Rate.N <= 0 && fx.Concurrency <= 0 && fx.Circuit.Failures <= 0 {
			continue
		}
		if out == nil {
			out = map[string]*fleetLimit{}
		}
		l := &fleetLimit{job: def.Name, effect: fx.Name, concurrency: fx.Concurrency, circuit: fx.Circuit}
		if fx.Rate.N > 0 && fx.Rate.Per > 0 {
			l.rate = fx.Rate
		}
		if fx.Concurrency > 0 {
			l.local = make(chan struct{}, fx.Concurrency)
		}
		out[fx.Name] = l
	}
	return out
}

// admit waits until the effect's limits let key's call start, and returns
// what ends its hold (a no-op for an effect without limits) and its
// passage through the effect's gate (gate.go), read last, right before
// the call. The wait ends with ctx, or with errNoRoom when the first half
// of the lease that ends at leaseUntil passes first, or with the gate's
// "not now".
func (e *Engine[U]) admit(ctx context.Context, fx Effect[U], key string, leaseUntil time.Time) (free func(), gate gateTicket, err error) {
	l := e.limits[fx.Name]
	if l == nil {
		return func() {}, gate, nil
	}
	q := e.st.Auto()
	if err := l.ensureRows(ctx, q); err != nil {
		return nil, gate, fmt.Errorf("limits of effect %q: %w", fx.Name, err)
	}
	deadline := leaseUntil.Add(-fx.Lease / 2)
	free = func() {}
	if l.concurrency > 0 {
		if free, err = e.takeSlot(ctx, l, q, leaseUntil, deadline); err != nil {
			return nil, gate, err
		}
	}
	if l.rate.N > 0 {
		if err := e.takeStart(ctx, l, q, deadline); err != nil {
			free()
			return nil, gate, err
		}
	}
	if gate, err = e.passGate(ctx, l, q, leaseUntil, deadline); err != nil {
		free()
		return nil, gate, err
	}
	return free, gate, nil
}

// ensureRows adds the effect's rows to the limits table, once per engine.
// The mutex guards the flag only, never a round trip: callers that meet
// it unset both add the rows, which adding twice leaves as they are.
func (l *fleetLimit) ensureRows(ctx context.Context, q Querier) error {
	l.rowsMu.Lock()
	done := l.rows
	l.rowsMu.Unlock()
	if done {
		return nil
	}
	if l.rate.N > 0 {
		if err := q.EnsureLimitSlot(ctx, l.job, l.effect, -1, time.Unix(0, 0).UTC()); err != nil {
			return err
		}
	}
	// The gate (slot -2), closed.
	if err := q.EnsureLimitSlot(ctx, l.job, l.effect, -2, time.Time{}); err != nil {
		return err
	}
	for slot := range l.concurrency {
		if err := q.EnsureLimitSlot(ctx, l.job, l.effect, slot, time.Time{}); err != nil {
			return err
		}
	}
	l.rowsMu.Lock()
	l.rows = true
	l.rowsMu.Unlock()
	return nil
}

// takeSlot holds one of the effect's call slots until leaseUntil, polling
// while every one is held.
func (e *Engine[U]) takeSlot(ctx context.Context, l *fleetLimit, q Querier, leaseUntil, deadline time.Time) (func(), error) {
	noRoom := errNoRoom(fmt.Sprintf("concurrency %d", l.concurrency), time.Second)
	began := time.Now() // the wait is bounded in real time too, should the lease clock stand still
	wait := time.NewTimer(leaseUntil.Sub(deadline))
	defer wait.Stop()
	select {
	case l.local <- struct{}{}:
	case <-wait.C:
		return nil, noRoom
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	owner := fmt.Sprintf("%s#%d", e.opt.owner, l.calls.Add(1))
	poll := 5 * time.Millisecond
	for {
		now, err := e.leaseNow(ctx, nil)
		if err != nil {
			<-l.local
			return nil, err
		}
		slot, ok, err := q.TakeSlot(ctx, l.job, l.effect, l.concurrency, owner, now, leaseUntil)
		if err != nil {
			<-l.local
			return nil, fmt.Errorf("take a call slot: %w", err)
		}
		if ok {
			return func() {
				// Freed even when the run was cancelled: the call is over.
				_ = q.FreeSlot(context.WithoutCancel(ctx), l.job, l.effect, slot, owner)
				<-l.local
			}, nil
		}
		if !now.Add(poll).Before(deadline) || time.Since(began) > leaseUntil.Sub(deadline) {
			<-l.local
			return nil, noRoom
		}
		if err := e.pollSlot(ctx, l.effect, time.Since(began), poll, noRoom); err != nil {
			<-l.local
			return nil, err
		}
		poll = min(2*poll, 250*time.Millisecond)
	}
}

// takeStart takes the effect's next call start and waits for it.
func (e *Engine[U]) takeStart(ctx context.Context, l *fleetLimit, q Querier, deadline time.Time) error {
	for {
		now, err := e.leaseNow(ctx, nil)
		if err != nil {
			return err
		}
		seen, err := q.Pace(ctx, l.job, l.effect)
		if err != nil {
			return fmt.Errorf("read the rate's pace: %w", err)
		}
		start := now
		if seen.After(now) {
			start = seen
		}
		if start.After(deadline) {
			return errNoRoom(fmt.Sprintf("rate %d/%s", l.rate.N, l.rate.Per), start.Sub(now))
		}
		moved, err := q.MovePace(ctx, l.job, l.effect, seen, start.Add(l.rate.spacing()))
		if err != nil {
			return fmt.Errorf("take a start under the rate: %w", err)
		}
		if moved {
			if wait := e.opt.paceWait; wait != nil {
				return wait(ctx, l.effect, start)
			}
			// Waited for on the clock read after the queries: they took time.
			if now, err = e.leaseNow(ctx, nil); err != nil {
				return err
			}
			return sleep(ctx, start.Sub(now))
		}
		// Another worker took this start first: read the next one.
	}
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
