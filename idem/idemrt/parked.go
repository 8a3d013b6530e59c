package idemrt

// Parked units. A unit whose write fails is recorded in the package's
// parked table, in a transaction of its own after the failed one rolled
// back: one attempt more, its payload and error. After the unit's
// max_attempts it is parked: a later fetch of the same payload skips it,
// and progress passes it. Without max_attempts it stays failing, and
// progress waits for it as before. A successful write of the key deletes
// its row in the write's own transaction. A person puts a row back
// (Store.Retry, attempts at 0), and each Run (Drain for handed-in units)
// writes the unit again from the stored payload until it is written or has
// failed max_attempts more times, when it is parked again.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"
)

// States of a parked-table row.
const (
	UnitStateFailing = "failing" // failed fewer than max_attempts times (or has no max_attempts): progress waits
	UnitStateParked  = "parked"  // failed max_attempts times: skipped with this payload, passed by progress
	UnitStateRetry   = "retry"   // put back by a person: each Run (or Drain) writes it again
)

// ErrParked is the error of a unit that was not attempted because it is
// parked with the same payload; Retry (idemgen ledger retry) puts it back.
var ErrParked = errors.New("unit is parked after max_attempts failed writes")

// ParkedUnit is one unit whose write failed and that has not been written
// since, for operators and tests (what `idemgen ledger list` shows).
type ParkedUnit struct {
	Job       string
	Key       string
	Payload   []byte // the unit as JSON, as it last failed
	Attempts  int    // failed writes since the first failure or the last Retry
	LastError string
	// State is "failing", "parked" or "retry".
	State string
	// Mark is the unit's watermark field for a watermark job, else nil.
	Mark          *time.Time
	JobVersion    int
	FirstFailedAt time.Time
	UpdatedAt     time.Time
}

// UnitFailureState is what a batch lookup of the parked table finds for a key.
type UnitFailureState struct {
	State string
	Hash  []byte
}

// UnitFailure is one failed write as the engine records it.
type UnitFailure struct {
	Job, UnitKey  string
	Payload, Hash []byte
	LastError     string
	Mark          *time.Time
	JobVersion    int32
}

// ParkQuerier holds the parked-table queries; every querier has them.
type ParkQuerier interface {
	LookupUnitFailure(ctx context.Context, job, unitKey string) (state string, hash []byte, found bool, err error)
	// LookupUnitFailures is LookupUnitFailure for a batch: the rows found, by key.
	LookupUnitFailures(ctx context.Context, job string, unitKeys []string) (map[string]UnitFailureState, error)
	ClearUnitFailure(ctx context.Context, job, unitKey string) error
	RecordUnitFailure(ctx context.Context, f UnitFailure, now time.Time) error
	SettleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (state string, attempts int32, err error)
	RetryingUnits(ctx context.Context, job, after string, limit int32) ([]UnitFailure, error)
	UnitFailures(ctx context.Context) ([]ParkedUnit, error)
	// ParkedPage reads at most limit of job's rows with unit keys after
	// after, in unit key order (see ParkedPage).
	ParkedPage(ctx context.Context, job, after string, limit int32) ([]ParkedUnit, error)
	RetryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error)
	RetryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error)
}

// failedOutcome records a unit whose write failed, after its transaction
// rolled back, and returns OutcomeParked when this failure reached the
// unit's max_attempts. A payload mismatch is not a failed write, and a
// cancelled run is not an attempt: neither is recorded.
func (e *Engine[U]) failedOutcome(ctx context.Context, u U, key string, cause error, log *slog.Logger) Outcome {
	return e.recordFailure(ctx, u, key, cause, e.def.MaxAttempts, log)
}

// unknownOutcome records a unit whose commit may have succeeded (the
// client saw an error after it): failing, so progress waits for the next
// run, which finds it written (and clears the row) or writes it; never
// parked on it, however low max_attempts is: a parked unit is skipped
// with this payload for good, though its row may be there.
func (e *Engine[U]) unknownOutcome(ctx context.Context, u U, key string, cause error, log *slog.Logger) Outcome {
	return e.recordFailure(ctx, u, key, cause, 0, log)
}

// recordFailure is failedOutcome with the attempts that park the unit
// (none when limit <= 0).
func (e *Engine[U]) recordFailure(ctx context.Context, u U, key string, cause error, limit int32, log *slog.Logger) Outcome {
	if errors.Is(cause, ErrPayloadMismatch) {
		return OutcomeMismatch
	}
	if errors.Is(cause, ErrEmptyKey) {
		return OutcomeFailed // bad data under no key of its own: nothing to record
	}
	if ctx.Err() != nil || errors.Is(cause, ErrBusy) {
		// Canceled, or a wait past its bound: not the unit's failure, so
		// no attempt is counted toward parking it.
		return OutcomeFailed
	}
	payload, err := e.payload(u)
	if err != nil {
		log.Warn("idemgen: unit failure not recorded", slog.Any("err", err))
		return OutcomeFailed
	}
	sum := sha256.Sum256(payload)
	f := UnitFailure{Job: e.def.Name, UnitKey: key, Payload: payload, Hash: sum[:], LastError: cause.Error(), JobVersion: e.def.Version}
	if e.def.MarkOf != nil {
		m := e.def.MarkOf(u)
		f.Mark = &m
	}
	if limit <= 0 {
		limit = math.MaxInt32 // no max_attempts: failing for good, never parked
	}
	var state string
	var attempts int32
	err = e.st.InTx(ctx, func(q Querier) error {
		if err := q.RecordUnitFailure(ctx, f, e.opt.now()); err != nil {
			return err
		}
		var err error
		state, attempts, err = q.SettleUnitFailure(ctx, e.def.Name, key, limit)
		return err
	})
	if err != nil {
		log.Warn("idemgen: unit failure not recorded", slog.Any("err", err))
		return OutcomeFailed
	}
	if state != UnitStateParked {
		return OutcomeFailed
	}
	log.Error("idemgen: unit parked after max_attempts failed writes; progress passes it",
		slog.Int("attempts", int(attempts)), slog.Any("err", cause))
	return OutcomeParked
}

// skipParked reports a unit left alone because it is parked with this payload.
func (e *Engine[U]) skipParked(key string, rep *runState, log *slog.Logger) UnitResult {
	rep.countUnit(OutcomeParked)
	log.Warn("idemgen: unit skipped: it is parked with this payload (Store.Retry puts it back)")
	ur := UnitResult{Key: key, Outcome: OutcomeParked, Err: fmt.Errorf("job %q key %q: %w", e.def.Name, key, ErrParked)}
	rep.unitFailed(ur)
	return ur
}

// retryUnits writes again, from their stored payloads, the units a person
// put back: a success deletes the row in the write's transaction; a
// failure counts an attempt (from 0, where Retry set it) and leaves the
// unit for the next Run until max_attempts parks it again.
func (e *Engine[U]) retryUnits(ctx context.Context, rep *runState) error {
	after := ""
	for {
		rows, err := e.st.Auto().RetryingUnits(ctx, e.def.Name, after, 100)
		if err != nil {
			return fmt.Errorf("job %q: list units to retry: %w", e.def.Name, err)
		}
		if len(rows) == 0 {
			return nil
		}
		back := make([]U, 0, len(rows))
		for _, row := range rows {
			after = row.UnitKey
			if isParkedMessage(row.Payload) {
				e.reparkUnreadable(ctx, row, fmt.Errorf("job %q key %q: %w", e.def.Name, row.UnitKey, errMessageNotUnit))
				continue
			}
			u, err := decodeUnit[U](row.Payload)
			if err != nil {
				e.reparkUnreadable(ctx, row, fmt.Errorf("job %q key %q: the stored payload does not decode into the unit: %w", e.def.Name, row.UnitKey, err))
				continue
			}
			back = append(back, u)
		}
		if err := e.apply(ctx, back, rep, false, e.def.MarkOf, &applied{}); err != nil {
			return err
		}
	}
}
