package idem

import "github.com/idemgen/idemgen/idem/idemrt"

// The errors a call returns for the units and effects that did not end
// applied or deduped. Each is wrapped, with the job, the key and the cause,
// in one of the errors a *FailuresError carries, so
//
//	if errors.Is(err, idem.ErrPayloadMismatch) { ... }   // 422 for a webhook
//	var fe *idem.FailuresError; errors.As(err, &fe)     // every failing key
//
// both work on what Process, Run, Backfill and Drain return.
var (
	// ErrPayloadMismatch: a handed-in unit repeats a key with a different
	// payload; a retry must carry the same data.
	ErrPayloadMismatch = idemrt.ErrPayloadMismatch
	// ErrWriteFailed: the unit's database work failed and was rolled back;
	// the next run (or a redelivery) tries again.
	ErrWriteFailed = idemrt.ErrWriteFailed
	// ErrEmptyKey: a placeholder of the unit's key renders empty, so the key
	// could collide with another unit's; nothing was written or performed.
	ErrEmptyKey = idemrt.ErrEmptyKey
	// ErrEffectFailed: the provider (or recording its result) failed; the
	// effect stays owed and a later run or Drain retries it with its key.
	ErrEffectFailed = idemrt.ErrEffectFailed
	// ErrEffectParked: the effect failed max_attempts times, or its provider
	// called the failure permanent (ErrPermanent); it is left for a person.
	ErrEffectParked = idemrt.ErrEffectParked
	// ErrBusy: another worker holds the effect's lease, so its outcome is not
	// known yet (Process only: a run leaves it to that worker).
	ErrBusy = idemrt.ErrBusy
	// ErrWaiting: the effect waits for its next attempt time: it failed
	// and backs off (its retry), or the provider asked to be called later
	// (RetryAfter). A later Run, Drain or Process performs it with its key
	// (Process only: a run leaves it for later).
	ErrWaiting = idemrt.ErrWaiting
)

// Failure is one unit or effect of a call that did not end applied or deduped.
type Failure = idemrt.Failure

// FailuresError is the error of a call in which some units or effects did
// not end applied or deduped. The call's Report holds the same detail
// (Units, for Process) and its counts.
type FailuresError = idemrt.FailuresError
