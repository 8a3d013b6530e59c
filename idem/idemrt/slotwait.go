package idemrt

import (
	"context"
	"time"
)

// slotWait is WithSlotWait's function.
type slotWait func(ctx context.Context, effect string, waited, poll time.Duration) (giveUp bool)

// WithSlotWait replaces the real sleep between two polls for a free call
// slot under an effect's concurrency (tests only). wait is told how long
// the call has waited, in real time, and the poll the engine would sleep;
// it returns once it has waited, or true to give the wait up as "no room",
// as a wait past the first half of the lease gives it up: the claim goes
// back uncounted and a later run performs the effect.
//
// The crash simulation's lease clock stands still while a worker waits, so
// only another worker's freed slot ends the wait, or the bound in real
// time (half the lease: a minute for a two-minute lease); its workers hold
// a slot for one call at most, so it gives up much sooner.
func WithSlotWait(wait func(ctx context.Context, effect string, waited, poll time.Duration) (giveUp bool)) Option {
	return func(o *options) { o.slotWait = wait }
}

// pollSlot waits poll between two polls for a slot (WithSlotWait's
// function when set), or returns noRoom when that gives the wait up.
func (e *Engine[U]) pollSlot(ctx context.Context, effect string, waited, poll time.Duration, noRoom error) error {
	if e.opt.slotWait == nil {
		return sleep(ctx, poll)
	}
	if e.opt.slotWait(ctx, effect, waited, poll) {
		return noRoom
	}
	return ctx.Err()
}
