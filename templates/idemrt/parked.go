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
	"bytes"
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
	unitFailing = "failing" // failed fewer than max_attempts times (or has no max_attempts): progress waits
	unitParked  = "parked"  // failed max_attempts times: skipped with this payload, passed by progress
	unitRetry   = "retry"   // put back by a person: each Run (or Drain) writes it again
)

// ErrParked is the error of a unit that was not attempted because it is
// parked with the same payload; Store.Retry puts it back.
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

// unitFailure is one failed write as the engine records it.
type unitFailure struct {
	job, unitKey  string
	payload, hash []byte
	lastError     string
	mark          *time.Time
	jobVersion    int32
}

// parkQuerier holds the parked-table queries; every querier has them.
type parkQuerier interface {
	unitFailure(ctx context.Context, job, unitKey string) (state string, hash []byte, found bool, err error)
	clearUnitFailure(ctx context.Context, job, unitKey string) error
	recordUnitFailure(ctx context.Context, f unitFailure, now time.Time) error
	settleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (state string, attempts int32, err error)
	retryingUnits(ctx context.Context, job, after string, limit int32) ([]unitFailure, error)
	unitFailures(ctx context.Context) ([]ParkedUnit, error)
	retryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error)
	retryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error)
}

// checkParked runs first in a unit's transaction. A unit parked with this
// very payload is skipped, not attempted. Any other row of the key is
// deleted, so it goes exactly when the write commits and stays if it fails.
func (e *engine[U]) checkParked(ctx context.Context, q querier, key string, payload []byte) (skip bool, err error) {
	state, hash, found, err := q.unitFailure(ctx, e.def.name, key)
	if err != nil {
		return false, fmt.Errorf("look up parked unit: %w", err)
	}
	if !found {
		return false, nil
	}
	if sum := sha256.Sum256(payload); state == unitParked && bytes.Equal(hash, sum[:]) {
		return true, nil
	}
	if err := q.clearUnitFailure(ctx, e.def.name, key); err != nil {
		return false, fmt.Errorf("clear parked unit: %w", err)
	}
	return false, nil
}

// failedOutcome records a unit whose write failed, after its transaction
// rolled back, and returns OutcomeParked when this failure reached the
// unit's max_attempts. A payload mismatch is not a failed write, and a
// cancelled run is not an attempt: neither is recorded.
func (e *engine[U]) failedOutcome(ctx context.Context, u U, key string, cause error, log *slog.Logger) Outcome {
	if errors.Is(cause, ErrPayloadMismatch) {
		return OutcomeMismatch
	}
	if ctx.Err() != nil {
		return OutcomeFailed
	}
	payload, err := e.payload(u)
	if err != nil {
		log.Warn("idemgen: unit failure not recorded", slog.Any("err", err))
		return OutcomeFailed
	}
	sum := sha256.Sum256(payload)
	f := unitFailure{job: e.def.name, unitKey: key, payload: payload, hash: sum[:], lastError: cause.Error(), jobVersion: e.def.version}
	if e.def.markOf != nil {
		m := e.def.markOf(u)
		f.mark = &m
	}
	limit := e.def.maxAttempts
	if limit <= 0 {
		limit = math.MaxInt32 // no max_attempts: failing for good, never parked
	}
	var state string
	var attempts int32
	err = e.st.inTx(ctx, func(q querier) error {
		if err := q.recordUnitFailure(ctx, f, e.opt.now()); err != nil {
			return err
		}
		var err error
		state, attempts, err = q.settleUnitFailure(ctx, e.def.name, key, limit)
		return err
	})
	if err != nil {
		log.Warn("idemgen: unit failure not recorded", slog.Any("err", err))
		return OutcomeFailed
	}
	if state != unitParked {
		return OutcomeFailed
	}
	log.Error("idemgen: unit parked after max_attempts failed writes; progress passes it",
		slog.Int("attempts", int(attempts)), slog.Any("err", cause))
	return OutcomeParked
}

// skipParked reports a unit left alone because it is parked with this payload.
func (e *engine[U]) skipParked(key string, rep *Report, log *slog.Logger) UnitResult {
	rep.countUnit(OutcomeParked)
	log.Warn("idemgen: unit skipped: it is parked with this payload (Store.Retry puts it back)")
	return UnitResult{Key: key, Outcome: OutcomeParked, Err: fmt.Errorf("job %q key %q: %w", e.def.name, key, ErrParked)}
}

// retryUnits writes again, from their stored payloads, the units a person
// put back: a success deletes the row in the write's transaction; a
// failure counts an attempt (from 0, where Retry set it) and leaves the
// unit for the next Run until max_attempts parks it again.
func (e *engine[U]) retryUnits(ctx context.Context, rep *Report) error {
	after := ""
	for {
		rows, err := e.st.auto().retryingUnits(ctx, e.def.name, after, 100)
		if err != nil {
			return fmt.Errorf("job %q: list units to retry: %w", e.def.name, err)
		}
		if len(rows) == 0 {
			return nil
		}
		back := make([]U, 0, len(rows))
		for _, row := range rows {
			after = row.unitKey
			u, err := decodeUnit[U](row.payload)
			if err != nil {
				e.opt.log.Error("idemgen: unit put back for retry has an unreadable payload; left as is",
					slog.String("job", e.def.name), slog.String("key", row.unitKey), slog.Any("err", err))
				continue
			}
			back = append(back, u)
		}
		if _, err := e.apply(ctx, back, rep, false, e.def.markOf); err != nil {
			return err
		}
	}
}
