package idemrt

import "errors"

// Settlement is what a consumer does with the message a unit came in: the
// answer to "may the broker forget it?", effects included, so that no
// caller has to read UnitResult.Effects.
type Settlement int

const (
	// SettleDone: the unit committed and every effect ended (done,
	// deduped, or parked for a person, who sees it). Acknowledge.
	SettleDone Settlement = iota
	// SettleOwed: the unit committed, and an effect is still owed (busy
	// under another worker's lease, waiting for its next attempt, or
	// failed and retried later). The ledger holds it, so the message may
	// be acknowledged: a drain performs it.
	SettleOwed
	// SettleRetry: the unit's write failed and rolled back; nothing of it
	// is kept. Give the message back for redelivery after a backoff.
	SettleRetry
	// SettleDead: the unit can never succeed as it is (a payload
	// mismatch, an empty key, parked after max_attempts). Park and settle
	// the message so that it never loops.
	SettleDead
)

func (s Settlement) String() string {
	switch s {
	case SettleDone:
		return "done"
	case SettleOwed:
		return "owed"
	case SettleRetry:
		return "retry"
	case SettleDead:
		return "dead"
	}
	return "unknown"
}

// Settle says what to do with the message the unit came in.
func (r UnitResult) Settle() Settlement {
	switch {
	case r.Outcome == OutcomeMismatch, r.Outcome == OutcomeParked,
		errors.Is(r.Err, ErrPayloadMismatch), errors.Is(r.Err, ErrEmptyKey), errors.Is(r.Err, ErrParked):
		return SettleDead
	case r.Outcome == OutcomeFailed, r.Err != nil, !r.Outcome.committed():
		// A failed write, or anything not known to have committed: the
		// broker keeps the message.
		return SettleRetry
	}
	for _, fx := range r.Effects {
		switch fx.Outcome {
		case EffectDone, EffectDeduped, EffectParked:
		default: // busy, waiting, failed, or an outcome this code does not know
			return SettleOwed
		}
	}
	return SettleDone
}

// committed reports whether the outcome is a unit whose transaction committed.
func (o Outcome) committed() bool {
	switch o {
	case OutcomeInserted, OutcomeUpdated, OutcomeUnchanged, OutcomeDeduped, OutcomeAccepted:
		return true
	}
	return false
}
