package idemrt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Every wait of a job's database work has a bound: a connection from the
// pool, and (on PostgreSQL) a row lock another transaction holds, each end
// within it with a *WaitError, which errors.Is reports as ErrBusy: a
// busy, call-again-later answer, never a hang. A write that waited out
// its bound is not the unit's fault: it counts no failed attempt and parks
// nothing.

// DefaultWaitBound is the wait bound of a job that does not set one
// (WithWaitBound) and has no effect whose lease is shorter than twice it.
const DefaultWaitBound = 30 * time.Second

// WithWaitBound bounds each wait of the job's transactions for a pool
// connection or a row lock (default DefaultWaitBound, or half the job's
// shortest effect lease when that is less: a write that waits longer than
// that could not perform its effects within their lease anyway).
func WithWaitBound(d time.Duration) Option { return func(o *options) { o.waitBound = d } }

// WaitError is a wait that ran out of its bound: What names what was
// waited for. errors.Is(err, ErrBusy) reports it.
type WaitError struct {
	What  string
	Bound time.Duration
	Err   error // the database's or the pool's own error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("busy: waited %s for %s: %v", e.Bound, e.What, e.Err)
}

func (e *WaitError) Unwrap() error { return e.Err }

// Is lets errors.Is(err, ErrBusy) answer true: call again later.
func (e *WaitError) Is(target error) bool { return target == ErrBusy }

// waitBoundKey marks a context with the wait bound of the job running
// under it, for the stores' transactions (idempg.Store.InTx, SQLiteInTx).
type waitBoundKey struct{}

// withWaitBound returns ctx carrying bound.
func withWaitBound(ctx context.Context, bound time.Duration) context.Context {
	return context.WithValue(ctx, waitBoundKey{}, bound)
}

// WaitBound is the wait bound ctx carries, or DefaultWaitBound (a call
// from outside a job: recovery, a caller's own store use).
func WaitBound(ctx context.Context) time.Duration {
	if d, ok := ctx.Value(waitBoundKey{}).(time.Duration); ok && d > 0 {
		return d
	}
	return DefaultWaitBound
}

// jobWaitBound is a job's wait bound: as set, else LeaseWaitBound of its
// effects' leases.
func jobWaitBound[U any](def *Job[U], set time.Duration) time.Duration {
	if set > 0 {
		return set
	}
	leases := make([]time.Duration, len(def.Effects))
	for i, fx := range def.Effects {
		leases[i] = fx.Lease
	}
	return LeaseWaitBound(leases...)
}

// LeaseWaitBound is the wait bound of a job whose effects have these
// leases and that sets none: DefaultWaitBound, capped at half the shortest
// lease (zero: none), so that a wait ends well before a claim's lease.
func LeaseWaitBound(leases ...time.Duration) time.Duration {
	bound := DefaultWaitBound
	for _, lease := range leases {
		if lease > 0 {
			bound = min(bound, lease/2)
		}
	}
	return bound
}

// boundedAcquire runs get, which takes a connection, within ctx's wait bound; a
// wait past it is a *WaitError naming the pool and its size. A failure once
// the bound has run out (while ctx has not) is such a wait, whatever it
// says: a new connection whose open outlasts the bound fails as the driver
// words it, the embedded SQLite's as "interrupted", not as the context's
// deadline (CI, 2026-12-05: the held family's worker B, on a loaded
// machine, ended "list units to retry: sqlite3: interrupted", an error the
// engine counts as an attempt where a wait counts none).
func boundedAcquire[C any](ctx context.Context, pool string, get func(ctx context.Context) (C, error)) (C, error) {
	bound := WaitBound(ctx)
	bounded, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	c, err := get(bounded)
	if err != nil && ctx.Err() == nil && (bounded.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
		err = &WaitError{What: waitForConnection + pool, Bound: bound, Err: err}
	}
	return c, err
}

// waitForConnection begins the What of a wait for a pool connection.
const waitForConnection = "a connection from "

// connectionWait is the wait for a pool connection that err tells of, or
// nil: the pool had none to give within the bound (not a lock, which is
// one row's or one database's).
func connectionWait(err error) *WaitError {
	var we *WaitError
	if errors.As(err, &we) && strings.HasPrefix(we.What, waitForConnection) {
		return we
	}
	return nil
}
