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
// performs it. An effect without limits has no row and no query of its
// own; its engine reads the job's steering by hand (steer.go) at most once
// a second, which may give it limits.

// Rate is N provider calls per period (spec rate: 50/s, 600/m, 1000/h).
type Rate struct {
	N   int32
	Per time.Duration
}

// spacing is the least time between two call starts under r.
func (r Rate) spacing() time.Duration { return r.Per / time.Duration(r.N) }

// The limits table's rows of an effect other than its call slots (0 and
// up); its queries name them by these numbers too.
const (
	PaceSlot int32 = -1 // the rate's pacing row: when the next call may start
	GateSlot int32 = -2 // the effect's gate (gate.go)
)

// LimitQuerier holds the limits table's queries; every querier has them.
type LimitQuerier interface {
	// EnsureLimitRows adds the effect's rows for slots, each once: the
	// pacing row (PaceSlot), whose first call may start at once (its start
	// is the Unix epoch), the gate (GateSlot, closed), call slots (0 up,
	// free).
	EnsureLimitRows(ctx context.Context, job, effect string, slots []int32) error
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

// fleetLimit is one effect's limits as an engine keeps them: the spec's,
// and the ones it follows now (the spec's with an override set by hand,
// steer.go).
type fleetLimit struct {
	job, effect string
	circuit     Circuit
	specRate    Rate
	specConc    int32
	// mu guards the limits followed now and the rows the table is known to
	// have, never a round trip.
	mu  sync.Mutex
	now limitsNow
	// rowsRate, rowsGate, rowsSlots: the limits table has the effect's
	// pacing row, gate row and call slots 0..rowsSlots-1. A failed attempt to add
	// them is tried again by the next call.
	rowsRate, rowsGate bool
	rowsSlots          int32
	// calls numbers the engine's calls, so each slot holder is distinct.
	calls atomic.Uint64
	// unfreed are call slots whose release failed after their call ended
	// (a busy wait, say): each is released again before this engine seeks
	// the effect's next slot and when a run ends (freeAgain). Left alone,
	// such a slot stayed held until the call's lease ended, and every
	// worker, this one first, waited for a slot no call held (a 720 h
	// lease under concurrency 1: a month).
	unfreed []heldSlot
}

// heldSlot is a call slot as its holder names it.
type heldSlot struct {
	slot  int32
	owner string
}

// freeAgain releases the slots whose release failed before; the first
// that fails again, and those after it, wait for the next try.
func (l *fleetLimit) freeAgain(ctx context.Context, q Querier) {
	l.mu.Lock()
	pending := l.unfreed
	l.unfreed = nil
	l.mu.Unlock()
	for i, s := range pending {
		if err := q.FreeSlot(ctx, l.job, l.effect, s.slot, s.owner); err != nil {
			l.mu.Lock()
			l.unfreed = append(l.unfreed, pending[i:]...)
			l.mu.Unlock()
			return
		}
	}
}

// limitsNow is an effect's rate and concurrency as a call follows them.
type limitsNow struct {
	rate        Rate
	concurrency int32
	// local bounds this process's calls that hold or seek a slot: more
	// than the fleet's slots would only poll. A change of concurrency
	// makes a new one; a call gives its place back to the one it took.
	local chan struct{}
}

func newFleetLimit(job, effect string, rate Rate, concurrency int32, circuit Circuit) *fleetLimit {
	if rate.N <= 0 || rate.Per <= 0 {
		rate = Rate{}
	}
	l := &fleetLimit{job: job, effect: effect, circuit: circuit, specRate: rate, specConc: max(concurrency, 0)}
	l.now = limitsNow{rate: l.specRate, concurrency: l.specConc}
	if l.specConc > 0 {
		l.now.local = make(chan struct{}, l.specConc)
	}
	return l
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
		out[fx.Name] = newFleetLimit(def.Name, fx.Name, fx.Rate, fx.Concurrency, fx.Circuit)
	}
	return out
}

// follow makes the override o (nil: none) the limits calls follow from
// now on.
func (l *fleetLimit) follow(o *LimitOverride) {
	rate, conc := l.specRate, l.specConc
	if o != nil && o.Rate.N > 0 && o.Rate.Per > 0 {
		rate = o.Rate
	}
	if o != nil && o.Concurrency > 0 {
		conc = o.Concurrency
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.now.rate = rate
	if conc != l.now.concurrency {
		l.now.concurrency = conc
		l.now.local = nil
		if conc > 0 {
			l.now.local = make(chan struct{}, conc)
		}
	}
}

// current is the limits a call follows.
func (l *fleetLimit) current() limitsNow {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.now
}

// admit waits until the effect's limits let key's call start, and returns
// what ends its hold (a no-op for an effect without limits) and its
// passage through the effect's gate (gate.go), read last, right before
// the call. The wait ends with ctx, or with errNoRoom when the first half
// of the lease that ends at leaseUntil passes first, or with the gate's
// "not now".
func (e *Engine[U]) admit(ctx context.Context, fx Effect[U], key string, leaseUntil time.Time) (free func(), gate gateTicket, err error) {
	l, err := e.limitOf(ctx, fx)
	if l == nil || err != nil {
		return func() {}, gate, err
	}
	cur := l.current()
	q := e.st.Auto()
	if err := l.ensureRows(ctx, q, cur); err != nil {
		return nil, gate, fmt.Errorf("limits of effect %q: %w", fx.Name, err)
	}
	deadline := leaseUntil.Add(-fx.Lease / 2)
	free = func() {}
	if cur.concurrency > 0 {
		if free, err = e.takeSlot(ctx, l, cur, q, leaseUntil, deadline); err != nil {
			return nil, gate, err
		}
	}
	if cur.rate.N > 0 {
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

// ensureRows adds the rows the effect's limits cur need to the limits
// table, once per engine and limits, in one statement on PostgreSQL (one
// round trip where there were up to five for a concurrency of three). The
// mutex guards the flags only, never a round trip: callers that meet them
// unset both add the rows, which adding twice leaves as they are.
func (l *fleetLimit) ensureRows(ctx context.Context, q Querier, cur limitsNow) error {
	l.mu.Lock()
	needRate, needGate, haveSlots := cur.rate.N > 0 && !l.rowsRate, !l.rowsGate, l.rowsSlots
	l.mu.Unlock()
	var slots []int32
	if needRate {
		slots = append(slots, PaceSlot)
	}
	if needGate {
		slots = append(slots, GateSlot)
	}
	for slot := haveSlots; slot < cur.concurrency; slot++ {
		slots = append(slots, slot)
	}
	if len(slots) > 0 {
		if err := q.EnsureLimitRows(ctx, l.job, l.effect, slots); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.rowsRate = l.rowsRate || needRate
	l.rowsGate = true
	l.rowsSlots = max(l.rowsSlots, cur.concurrency)
	l.mu.Unlock()
	return nil
}

// takeSlot holds one of the effect's call slots until leaseUntil, polling
// while every one is held.
func (e *Engine[U]) takeSlot(ctx context.Context, l *fleetLimit, cur limitsNow, q Querier, leaseUntil, deadline time.Time) (func(), error) {
	noRoom := errNoRoom(fmt.Sprintf("concurrency %d", cur.concurrency), time.Second)
	began := time.Now() // the wait is bounded in real time too, should the lease clock stand still
	wait := time.NewTimer(leaseUntil.Sub(deadline))
	defer wait.Stop()
	select {
	case cur.local <- struct{}{}:
	case <-wait.C:
		return nil, noRoom
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	owner := fmt.Sprintf("%s#%d", e.opt.owner, l.calls.Add(1))
	l.freeAgain(ctx, q)
	poll := 5 * time.Millisecond
	for {
		now, err := e.leaseNow(ctx, nil)
		if err != nil {
			<-cur.local
			return nil, err
		}
		// A concurrency lowered by hand meanwhile is followed at once; a
		// raised one from the next call on (its new slots added then).
		e.followSteering(ctx, l)
		slots := cur.concurrency
		if now := l.current().concurrency; now > 0 {
			slots = min(slots, now)
		}
		slot, ok, err := q.TakeSlot(ctx, l.job, l.effect, slots, owner, now, leaseUntil)
		if err != nil {
			<-cur.local
			return nil, fmt.Errorf("take a call slot: %w", err)
		}
		if ok {
			return func() {
				// Freed even when the run was cancelled: the call is over.
				if err := q.FreeSlot(context.WithoutCancel(ctx), l.job, l.effect, slot, owner); err != nil {
					l.mu.Lock()
					l.unfreed = append(l.unfreed, heldSlot{slot, owner})
					l.mu.Unlock()
				}
				<-cur.local
			}, nil
		}
		if !now.Add(poll).Before(deadline) || time.Since(began) > leaseUntil.Sub(deadline) {
			<-cur.local
			return nil, noRoom
		}
		if err := e.pollSlot(ctx, l.effect, time.Since(began), poll, noRoom); err != nil {
			<-cur.local
			return nil, err
		}
		poll = min(2*poll, 250*time.Millisecond)
	}
}

// takeStart takes the effect's next call start and waits for it.
// The rate is read again at each try, so that a call that waits for its
// start while the rate is changed by hand follows the change.
func (e *Engine[U]) takeStart(ctx context.Context, l *fleetLimit, q Querier, deadline time.Time) error {
	for {
		e.followSteering(ctx, l)
		rate := l.current().rate
		if rate.N <= 0 {
			return nil // the rate set by hand is gone, and the spec has none
		}
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
			return errNoRoom(fmt.Sprintf("rate %d/%s", rate.N, rate.Per), start.Sub(now))
		}
		moved, err := q.MovePace(ctx, l.job, l.effect, seen, nextStart(start, rate))
		if err != nil {
			return fmt.Errorf("take a start under the rate: %w", err)
		}
		if moved {
			if wait := e.opt.hooks.PaceWait; wait != nil {
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

// nextStart is the start after start under r, rounded up to the
// microsecond: PostgreSQL keeps a timestamp to the microsecond, so a
// spacing below it (a rate above 1000000/s, such as 2147483647/h) stored
// as it is came back rounded down, and starts came closer than the rate.
func nextStart(start time.Time, r Rate) time.Time {
	next := start.Add(r.spacing())
	if t := next.Truncate(time.Microsecond); t.Before(next) {
		next = t.Add(time.Microsecond)
	}
	return next
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
