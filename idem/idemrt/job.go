package idemrt

import (
	"context"
	"time"
)

// Window is the time range a watermark run or backfill fetches: units whose
// watermark field lies in [Since, Until).
type Window struct {
	Since, Until time.Time
}

// when an effect is decided, relative to the destination write.
type When int

const (
	WhenAlways   When = iota
	WhenInserted      // the write inserted the row
	WhenChanged       // the write inserted or changed the row
)

func (w When) Matches(o Outcome) bool {
	switch w {
	case WhenInserted:
		return o == OutcomeInserted
	case WhenChanged:
		return o == OutcomeInserted || o == OutcomeUpdated
	}
	return o != OutcomeFailed && o != OutcomeMismatch
}

// Job is what the generated code tells the engine about one job.
type Job[U any] struct {
	Name    string
	Version int32
	// KeyOf renders the unit's idempotency key.
	KeyOf func(U) string
	// CheckKey refuses a unit whose key placeholder renders empty, naming
	// the field (wrapping ErrEmptyKey); nil when no placeholder can.
	CheckKey func(U) error
	// canonical returns the unit with times in UTC, so payloads compare by value.
	Canonical func(U) U
	// write upserts the unit into the destination; nil when there is none.
	Write func(ctx context.Context, q Querier, u U, key string, jobVersion int32) (Outcome, error)
	// WriteBatch upserts units with distinct keys in one statement and
	// returns their outcomes in order; nil outcomes (or a nil WriteBatch):
	// the dialect has no batch statement, and Write runs per unit.
	WriteBatch func(ctx context.Context, q Querier, units []U, keys []string, jobVersion int32) ([]Outcome, error)
	// Holds reports whether the destination row under the unit's key holds
	// exactly the unit's data; nil unless the job is handed-in and its
	// write can leave a row that differs from the unit (insert_once,
	// newer_wins). See settleReplays.
	Holds func(ctx context.Context, q Querier, u U) (bool, error)
	// CheckSeen records handed-in keys with a payload hash (source: none).
	CheckSeen bool
	// stage publishes each window, page or Process call in one transaction.
	Stage   bool
	Effects []Effect[U]
	// maxAttempts parks a unit whose write failed in this many runs; 0: never.
	MaxAttempts int32
	// markOf is a watermark job's watermark field, recorded with a failed unit.
	MarkOf func(U) time.Time
}

type Effect[U any] struct {
	Name        string
	Version     int32
	When        When
	KeyOf       func(U) string
	Lease       time.Duration
	Retention   time.Duration // zero: keep forever
	KeepResult  bool
	MaxAttempts int32
	// Retry is the backoff between failed attempts (spec retry); a zero
	// field takes DefaultRetry's.
	Retry Backoff
	// Timeout bounds one provider call (spec timeout); zero: no bound.
	Timeout time.Duration
	// Rate and Concurrency bound this effect's provider calls across every
	// worker sharing the database (spec rate, concurrency; limits.go);
	// zero: no bound.
	Rate        Rate
	Concurrency int32
	// Circuit opens after failures in a row across the fleet (spec
	// circuit; gate.go); zero: none.
	Circuit Circuit
	// call performs the effect at the provider, passing key as its idempotency key.
	Call func(ctx context.Context, key string, u U) ([]byte, error)
}
