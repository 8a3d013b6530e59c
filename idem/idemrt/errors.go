package idemrt

import (
	"errors"
	"fmt"
	"strings"
)

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
	ErrPayloadMismatch = errors.New("same key, different payload")
	// ErrWriteFailed: the unit's database work failed and was rolled back;
	// the next run (or a redelivery) tries again.
	ErrWriteFailed = errors.New("write failed")
	// ErrEmptyKey: a placeholder of the unit's key renders empty, so the key
	// could collide with another unit's; nothing was written or performed.
	ErrEmptyKey = errors.New("key placeholder is empty")
	// ErrEffectFailed: the provider (or recording its result) failed; the
	// effect stays owed and a later run or Drain retries it with its key.
	ErrEffectFailed = errors.New("effect failed")
	// ErrEffectParked: the effect failed max_attempts times, or its provider
	// called the failure permanent (ErrPermanent); it is left for a person.
	ErrEffectParked = errors.New("effect parked")
	// ErrBusy: another worker holds the effect's lease, so its outcome is not
	// known yet (Process only: a run leaves it to that worker).
	ErrBusy = errors.New("effect in progress elsewhere")
	// ErrWaiting: the effect waits for its next attempt time: it failed
	// and backs off (its retry), or the provider asked to be called later
	// (RetryAfter). A later Run, Drain or Process performs it with its key
	// (Process only: a run leaves it for later).
	ErrWaiting = errors.New("effect waits for its next attempt")
)

// Failure is one unit or effect of a call that did not end applied or deduped.
type Failure struct {
	Key    string // the unit's key, or the effect's key when Effect is set
	Effect string // the effect's name; empty for the unit's own write
	Err    error  // wraps one of the errors above, and its cause
}

// FailuresError is the error of a call in which some units or effects did
// not end applied or deduped. The call's Report holds the same detail
// (Units, for Process) and its counts.
type FailuresError struct {
	Job      string
	Failures []Failure // the first maxFailures, in the order they happened
	Count    int       // every failure, including those not listed
}

// maxFailures bounds what a long run keeps in memory about its failures.
const maxFailures = 100

func (e *FailuresError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %q: %d failed", e.Job, e.Count)
	for i, f := range e.Failures {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", e.Count-3)
			break
		}
		b.WriteString("; ")
		b.WriteString(f.Err.Error())
	}
	return b.String()
}

// Unwrap gives errors.Is and errors.As every listed failure's error.
func (e *FailuresError) Unwrap() []error {
	errs := make([]error, len(e.Failures))
	for i, f := range e.Failures {
		errs[i] = f.Err
	}
	return errs
}

// failures collects a call's failures as the report counts them.
type failures struct {
	list  []Failure
	count int
	busy  []Failure // busy effects: an error for Process only
}

func (fs *failures) add(f Failure) {
	fs.count++
	if len(fs.list) < maxFailures {
		fs.list = append(fs.list, f)
	}
}

// err returns the call's *FailuresError, or nil when nothing failed.
func (fs *failures) err(job string, busyFails bool) error {
	list, count := fs.list, fs.count
	if busyFails && len(fs.busy) > 0 {
		list = append(append([]Failure(nil), list...), fs.busy...)
		count += len(fs.busy)
	}
	if count == 0 {
		return nil
	}
	if len(list) > maxFailures {
		list = list[:maxFailures]
	}
	return &FailuresError{Job: job, Failures: list, Count: count}
}

// unitFailed records a unit that did not end applied or deduped.
func (r *runState) unitFailed(ur UnitResult) {
	r.failed.add(Failure{Key: ur.Key, Err: ur.Err})
}

// effectFailed records an effect's outcome among the call's failures when it
// did not end done or deduped.
func (r *runState) effectFailed(er EffectResult) {
	switch er.Outcome {
	case EffectFailed, EffectParked:
		r.failed.add(Failure{Key: er.Key, Effect: er.Effect, Err: er.Err})
	case EffectBusy, EffectWaiting:
		if len(r.failed.busy) < maxFailures {
			r.failed.busy = append(r.failed.busy, Failure{Key: er.Key, Effect: er.Effect, Err: er.Err})
		}
	}
}
