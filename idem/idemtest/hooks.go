package idemtest

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// CrashPoint names a durable boundary of a job, where the crash tests stop
// it: the points a CrashHook is called at.
type CrashPoint = hooks.Point

// The crash points, in the order a run meets them.
const (
	PointRunStart         = hooks.PointRunStart
	PointBatchStart       = hooks.PointBatchStart
	PointBatchBegin       = hooks.PointBatchBegin // a batch's units are in hand, its transaction not begun
	PointBatchAwait       = hooks.PointBatchAwait // a batch written ahead waits for the batches in flight that write one of its keys
	PointUnitStart        = hooks.PointUnitStart
	PointBatchWritten     = hooks.PointBatchWritten // a round of a batch's statements ran, in its transaction
	PointUnitBeforeCommit = hooks.PointUnitBeforeCommit
	PointUnitAfterCommit  = hooks.PointUnitAfterCommit
	PointEffectClaimed    = hooks.PointEffectClaimed
	PointEffectBeforeCall = hooks.PointEffectBeforeCall
	PointEffectAfterCall  = hooks.PointEffectAfterCall
	PointEffectRecorded   = hooks.PointEffectRecorded
	PointProgressBefore   = hooks.PointProgressBefore
	PointProgressAfter    = hooks.PointProgressAfter
)

// CrashHook is called at every crash point when set. It may block forever
// (a crash: the goroutine is parked, nothing unwinds) or return an error the
// job treats as the failure of the step just taken.
type CrashHook func(ctx context.Context, p CrashPoint, detail string) error

// option is an idemrt.Option that sets a job's test hooks.
func option(set func(*hooks.State)) idemrt.Option { return hooks.Option(set).(idemrt.Option) }

// WithCrashHook calls h at every crash point of the job (the generated
// crash-simulation tests stop a job with it).
func WithCrashHook(h CrashHook) idemrt.Option {
	return option(func(s *hooks.State) { s.Crash = h })
}

// WithJobEdit applies edit to the job's definition before its engine is
// built: the crash tests rebuild a job with bumped versions, as a
// regenerated package would be, and tests change an effect's rate or
// lease.
func WithJobEdit[U any](edit func(*idemrt.Job[U])) idemrt.Option {
	return option(func(s *hooks.State) { s.JobEdit = edit })
}

// WithLeaseClock replaces the database clock leases are compared on, for
// tests that simulate time passing on the database (the crash simulation
// expires leases with it); idem.WithClock does not move leases.
func WithLeaseClock(now func() time.Time) idemrt.Option {
	return option(func(s *hooks.State) { s.LeaseClock = now })
}

// WithPaceWait is for tests that simulate time, with WithLeaseClock: each
// call start an effect's rate grants is waited for through wait, on the
// simulated clock, instead of a real sleep.
func WithPaceWait(wait func(ctx context.Context, effect string, start time.Time) error) idemrt.Option {
	return option(func(s *hooks.State) { s.PaceWait = wait })
}

// WithSlotWait replaces the real sleep between two polls for a free call
// slot under an effect's concurrency. wait is told how long the call has
// waited, in real time, and the poll the engine would sleep; it returns
// once it has waited, or true to give the wait up as "no room", as a wait
// past the first half of the lease gives it up: the claim goes back
// uncounted and a later run performs the effect.
//
// The crash simulation's lease clock stands still while a worker waits, so
// only another worker's freed slot ends the wait, or the bound in real
// time (half the lease: a minute for a two-minute lease); its workers hold
// a slot for one call at most, so it gives up much sooner.
func WithSlotWait(wait func(ctx context.Context, effect string, waited, poll time.Duration) (giveUp bool)) idemrt.Option {
	return option(func(s *hooks.State) { s.SlotWait = wait })
}

// Hit calls e's crash hook at p, as the engine does at its own crash
// points: for a harness that owns a durable boundary of the job. It
// returns nil when e has no hook.
func Hit[U any](ctx context.Context, e *idemrt.Engine[U], p CrashPoint, detail string) error {
	return hooks.Of(e).Hit(ctx, p, detail)
}
