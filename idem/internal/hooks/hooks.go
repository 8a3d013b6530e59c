// Package hooks holds what the tests set in a job and production never
// does: the crash hook the crash simulation stops a job with at its crash
// points, a definition edit, and the simulated clock and waits. idemrt's
// options hold a State; the public test package idem/idemtest sets it
// through Option, and the integrations inside idem (idemriver) meet the
// hook at their own durable boundaries through Of(engine).Hit.
//
// Option and Of are set by idemrt when it is initialised: they are the one
// way into an engine's hooks from outside idemrt, so that idemrt's API has
// none of them.
package hooks

import (
	"context"
	"time"
)

// Point names a durable boundary of a job, where the crash tests stop it.
type Point string

// The crash points, in the order a run meets them.
const (
	PointRunStart         Point = "run.start"
	PointBatchStart       Point = "batch.start"
	PointBatchBegin       Point = "batch.begin" // a batch's units are in hand, its transaction not begun
	PointBatchAwait       Point = "batch.await" // a batch written ahead waits for the batches in flight that write one of its keys
	PointUnitStart        Point = "unit.start"
	PointBatchWritten     Point = "batch.written" // a round of a batch's statements ran, in its transaction
	PointUnitBeforeCommit Point = "unit.commit.before"
	PointUnitAfterCommit  Point = "unit.commit.after"
	PointEffectClaimed    Point = "effect.claim.after"
	PointEffectBeforeCall Point = "effect.call.before"
	PointEffectAfterCall  Point = "effect.call.after"
	PointEffectRecorded   Point = "effect.record.after"
	PointProgressBefore   Point = "progress.save.before"
	PointProgressAfter    Point = "progress.save.after"
)

// State is a job's test hooks; the zero State is production's: no hook.
type State struct {
	// Crash is called at every crash point. It may block forever (a
	// crash: the goroutine is parked, nothing unwinds) or return an error
	// the job treats as the failure of the step just taken.
	Crash func(ctx context.Context, p Point, detail string) error
	// JobEdit is a func(*idemrt.Job[U]) applied to the definition before
	// the engine is built: the crash tests rebuild a job with bumped
	// versions with it, as a regenerated package would be.
	JobEdit any
	// LeaseClock replaces the database clock leases are compared on.
	LeaseClock func() time.Time
	// PaceWait waits for a call's start under a rate, on the lease clock,
	// instead of a real sleep.
	PaceWait func(ctx context.Context, effect string, start time.Time) error
	// SlotWait replaces the sleep between two polls for a call slot; true
	// gives the wait up as "no room".
	SlotWait func(ctx context.Context, effect string, waited, poll time.Duration) (giveUp bool)
}

// Hit calls the crash hook at p; nil without one (or without a State).
func (s *State) Hit(ctx context.Context, p Point, detail string) error {
	if s == nil || s.Crash == nil {
		return nil
	}
	return s.Crash(ctx, p, detail)
}

// Set by idemrt's init.
var (
	// Option returns an idemrt.Option that applies set to a job's State.
	Option func(set func(*State)) any
	// Of returns the State of an *idemrt.Engine[U], nil for anything else.
	Of func(engine any) *State
)
