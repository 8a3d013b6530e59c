package idem

import (
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// Window is the time range a watermark run or backfill fetches: units whose
// watermark field lies in [Since, Until).
type Window = idemrt.Window

// Outcome is what happened to one unit.
type Outcome = idemrt.Outcome

const (
	OutcomeInserted  = idemrt.OutcomeInserted  // a new destination row
	OutcomeUpdated   = idemrt.OutcomeUpdated   // an existing row took newer data
	OutcomeUnchanged = idemrt.OutcomeUnchanged // the row already held this (or newer) data
	OutcomeDeduped   = idemrt.OutcomeDeduped   // the key was already handled; nothing written
	OutcomeAccepted  = idemrt.OutcomeAccepted  // no destination: the unit's effects were considered
	OutcomeFailed    = idemrt.OutcomeFailed    // the unit's write failed; retried on the next run
	OutcomeMismatch  = idemrt.OutcomeMismatch  // a handed-in key came back with a different payload
	OutcomeParked    = idemrt.OutcomeParked    // failed max_attempts runs, or parked with this payload already; progress passes it
)

// EffectOutcome is what happened to one effect of one unit.
type EffectOutcome = idemrt.EffectOutcome

const (
	EffectDone    = idemrt.EffectDone    // the provider was called and the ledger marked done
	EffectDeduped = idemrt.EffectDeduped // the ledger says done already; the kept result is returned
	EffectFailed  = idemrt.EffectFailed  // the provider failed; retried on a later run
	EffectParked  = idemrt.EffectParked  // failed max_attempts times; left for a person
	EffectBusy    = idemrt.EffectBusy    // another run holds the reservation's lease
	EffectWaiting = idemrt.EffectWaiting // failed or throttled; waits for its next attempt time (retry, RetryAfter)
)

// Report counts what one run did. Units is filled by Process only.
type Report = idemrt.Report

// UnitResult is the outcome of one handed-in unit and its effects.
type UnitResult = idemrt.UnitResult

// EffectResult is the outcome of one effect; Result is the kept result, if any.
type EffectResult = idemrt.EffectResult

// Settlement is what a consumer does with a unit's message (UnitResult.Settle).
type Settlement = idemrt.Settlement

const (
	SettleDone  = idemrt.SettleDone  // committed, every effect ended (done, deduped or parked): acknowledge
	SettleOwed  = idemrt.SettleOwed  // committed, an effect still owed in the ledger: acknowledge, a drain performs it
	SettleRetry = idemrt.SettleRetry // the write failed and rolled back: redeliver after a backoff
	SettleDead  = idemrt.SettleDead  // never succeeds as it is (mismatch, empty key, parked): park and settle
)

// Option configures a job.
type Option = idemrt.Option

// WithLogger sends the job's logs to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return idemrt.WithLogger(l) }

// WithClock replaces time.Now, for leases, windows and ledger times.
func WithClock(now func() time.Time) Option { return idemrt.WithClock(now) }

// WithOwner names this worker in ledger leases (default: a random id per job value).
func WithOwner(owner string) Option { return idemrt.WithOwner(owner) }

// WithStart sets where a watermark job's first window begins (default: the zero time).
func WithStart(t time.Time) Option { return idemrt.WithStart(t) }

// WithMaxPages bounds how many source pages one run fetches (default 10000).
func WithMaxPages(n int) Option { return idemrt.WithMaxPages(n) }

// WithBatchSize bounds how many units one transaction writes (default
// 1000): a larger page is written in batches of n.
func WithBatchSize(n int) Option { return idemrt.WithBatchSize(n) }

// WithEffectConcurrency bounds how many provider calls one job has in
// flight (default 16); 1 performs effects one at a time, in order.
func WithEffectConcurrency(n int) Option { return idemrt.WithEffectConcurrency(n) }

// WithWriteAhead(false) stops a job without effects from committing
// batches in the background while the next page is fetched and the next
// batch prepared and written on another connection. It is on by default
// on stores that take several writers at once (PostgreSQL; SQLite takes
// one at a time, so there it is off). Up to five batch transactions are
// open at once on PostgreSQL, one connection fewer than the pool's most
// (at least two); units are still counted, reported and observed in
// order; a batch that shares a unit key with any batch in flight waits
// for every batch in flight; and progress is saved only once every batch
// before it has committed. A job
// with effects already overlaps its calls with the next batch
// (WithEffectConcurrency) and writes one batch at a time.
func WithWriteAhead(on bool) Option { return idemrt.WithWriteAhead(on) }

// The states of an effect's ledger row, one name each in the Go API
// (LedgerEntry.State, LedgerRow.State, HeldEffect.State, Change.State), the
// CLI, its JSON, logs and OpenTelemetry. StateLeased is only ever shown
// (ShownEffectState): the row is stored pending.
const (
	StatePending = idemrt.StatePending // owed: the next run or drain performs it
	StateLeased  = idemrt.StateLeased  // owed, and held by a worker whose lease has not run out
	StateDone    = idemrt.StateDone
	StateParked  = idemrt.StateParked // max_attempts failed calls or a permanent failure: left for a person
)

// Store is one dialect's access to the package's tables.
type Store = idemrt.Store

// LedgerEntry is one ledger row, for operators and tests.
type LedgerEntry = idemrt.LedgerEntry
