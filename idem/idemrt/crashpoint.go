package idemrt

import (
	"context"
)

// CrashPoint names a durable boundary of a job, where the crash tests stop it.
type CrashPoint string

const (
	PointRunStart         CrashPoint = "run.start"
	PointBatchStart       CrashPoint = "batch.start"
	PointBatchBegin       CrashPoint = "batch.begin" // a batch's units are in hand, its transaction not begun
	PointBatchAwait       CrashPoint = "batch.await" // a batch written ahead waits for the batches in flight that write one of its keys
	PointUnitStart        CrashPoint = "unit.start"
	PointBatchWritten     CrashPoint = "batch.written" // a round of a batch's statements ran, in its transaction
	PointUnitBeforeCommit CrashPoint = "unit.commit.before"
	PointUnitAfterCommit  CrashPoint = "unit.commit.after"
	PointEffectClaimed    CrashPoint = "effect.claim.after"
	PointEffectBeforeCall CrashPoint = "effect.call.before"
	PointEffectAfterCall  CrashPoint = "effect.call.after"
	PointEffectRecorded   CrashPoint = "effect.record.after"
	PointProgressBefore   CrashPoint = "progress.save.before"
	PointProgressAfter    CrashPoint = "progress.save.after"
)

// CrashHook is called at every crash point when set. It may block forever
// (a crash: the goroutine is parked, nothing unwinds) or return an error the
// job treats as the failure of the step just taken.
type CrashHook func(ctx context.Context, p CrashPoint, detail string) error
