package idemrt

import (
	"context"
	"time"
)

// pollSlot waits poll between two polls for a slot (the test's slot wait
// when set: idemtest.WithSlotWait), or returns noRoom when that gives the
// wait up.
func (e *Engine[U]) pollSlot(ctx context.Context, effect string, waited, poll time.Duration, noRoom error) error {
	if e.opt.hooks.SlotWait == nil {
		return sleep(ctx, poll)
	}
	if e.opt.hooks.SlotWait(ctx, effect, waited, poll) {
		return noRoom
	}
	return ctx.Err()
}
