package idemrt

import (
	"context"
	"time"
)

// The states of an effect's ledger row, one name each in the Go API
// (LedgerEntry.State, LedgerRow.State, HeldEffect.State, Change.State), the
// CLI, its JSON, logs and OpenTelemetry. StateLeased is only ever shown
// (ShownEffectState): the row is stored pending.
const (
	StatePending = "pending" // owed: the next run or drain performs it
	StateLeased  = "leased"  // owed, and held by a worker whose lease has not run out
	StateDone    = "done"
	StateParked  = "parked" // max_attempts failed calls or a permanent failure: left for a person
)

// StoredParked is how the ledger's state column stores StateParked. The
// column's CHECK constraint predates the word, and changing it would
// rebuild every package's ledger on SQLite, so only SQL sees this word:
// the stores translate every row they read with LedgerState.
const StoredParked = "failed"

// LedgerState is the state a ledger row stored as stored is in.
func LedgerState(stored string) string {
	if stored == StoredParked {
		return StateParked
	}
	return stored
}

// Store is one dialect's access to the package's tables.
type Store interface {
	// InTx runs fn in one transaction, committing when fn returns nil.
	InTx(ctx context.Context, fn func(q Querier) error) error
	// Auto runs single statements outside a transaction.
	Auto() Querier
}

// concurrentWriter is a store on which several transactions write at
// once, to some purpose: PostgreSQL. ConcurrentWrites is how many batch
// transactions one job may keep open at once. SQLite takes one writer at
// a time.
type concurrentWriter interface{ ConcurrentWrites() int }

// Querier holds the bookkeeping queries every job uses. Each dialect
// implements it over its sqlc-generated queries.
type Querier interface {
	Progress(ctx context.Context, job string) (ProgressRow, error)
	SaveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error
	SaveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error
	// See records a batch of handed-in keys (distinct) with their payload
	// hashes; it returns the stored hash of every key seen before.
	See(ctx context.Context, job string, unitKeys []string, hashes [][]byte, jobVersion int32, now time.Time) (seen map[string][]byte, err error)
	// Reserve adds pending ledger rows for one effect of a batch of units;
	// a key already in the ledger is left as it is.
	Reserve(ctx context.Context, r Reservations, now time.Time) error
	// ReserveLeased is Reserve for the worker that performs the effects
	// once the transaction commits: the rows it adds are leased to owner
	// until leaseUntil (on the database's clock) with an attempt counted,
	// as ClaimMany would leave them, and their keys come back. A key
	// already in the ledger is left as it is, for the claim. A rollback
	// takes the lease away with the row.
	ReserveLeased(ctx context.Context, r Reservations, now time.Time, owner string, leaseUntil time.Time) (leased map[string]bool, err error)
	// Decided returns the units of a batch an earlier version of the effect
	// was reserved for.
	Decided(ctx context.Context, job, effect string, unitKeys []string, version int32) (map[string]bool, error)
	// ClaimMany leases the pending, unleased keys of a batch to owner until
	// until, counting an attempt each: the keys it leased.
	ClaimMany(ctx context.Context, keys []string, owner string, now, until time.Time) (map[string]bool, error)
	// CompleteMany marks keys done with their results (in parallel),
	// fenced by the lease owner: the keys it recorded, those still leased
	// by owner.
	CompleteMany(ctx context.Context, keys []string, results [][]byte, owner string, now time.Time) (map[string]bool, error)
	// Release gives back the lease of a failed attempt (see Release) and
	// returns the row's state: parked when the failure is
	// permanent or attempts reached max, with the reason in its columns;
	// else pending, not to be claimed before its next attempt time.
	Release(ctx context.Context, r Release) (state string, err error)
	Effect(ctx context.Context, key string) (LedgerRow, bool, error)
	// Effects is Effect for a batch: the rows found (state, result and last
	// error), by key.
	Effects(ctx context.Context, keys []string) (map[string]LedgerRow, error)
	Pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]LedgerRow, error)
	// Purge deletes at most limit done rows of an effect done before
	// before.
	Purge(ctx context.Context, job, effect string, before time.Time, limit int32) (int64, error)
	// PurgeSeen deletes at most limit of a job's handed-in key records
	// first seen before before whose key has no ledger row left.
	PurgeSeen(ctx context.Context, job string, before time.Time, limit int32) (int64, error)
	// Ledger reads every ledger row, a page at a time (ReadWholeLedger).
	Ledger(ctx context.Context) ([]LedgerEntry, error)
	// LedgerPage reads at most limit ledger rows with effect keys after
	// after, in effect key order (see LedgerPage).
	LedgerPage(ctx context.Context, after string, limit int32) ([]LedgerEntry, error)
	// DBNow reads the database's clock on the querier's own connection
	// (inside a transaction, on the transaction's), which leases are
	// compared on.
	DBNow(ctx context.Context) (time.Time, error)
	ParkQuerier
	RecoveryQuerier
	LimitQuerier
	GateQuerier
	SteerQuerier
}

type ProgressRow struct {
	Found     bool
	Watermark time.Time
	HasMark   bool
	Cursor    string
	Position  int64
}

// Reservations are the ledger rows one effect owes for a batch of units:
// Keys, UnitKeys and Payloads run in parallel.
type Reservations struct {
	Job           string
	Effect        string
	EffectVersion int32
	JobVersion    int32
	Keys          []string
	UnitKeys      []string
	Payloads      [][]byte
}

type LedgerRow struct {
	Key           string
	Job           string
	Effect        string
	EffectVersion int32
	JobVersion    int32
	UnitKey       string
	Payload       []byte
	State         string
	Attempts      int32
	Result        []byte
	LastError     string
	// Permanent: the provider called the last failure permanent (see Permanent).
	Permanent bool
	// ParkedReason says why a parked row is parked ("permanent" or
	// "max_attempts"); "" otherwise, and on rows parked before the column.
	ParkedReason string
	// NextAttemptAt is when a pending row that failed may be tried again,
	// on the database's clock; zero when it has not failed.
	NextAttemptAt time.Time
}

// Release is a failed attempt given back to the ledger (Querier.Release).
type Release struct {
	Key, Owner  string
	LastError   string
	MaxAttempts int32
	// Permanent parks the effect at once (the provider's Permanent).
	Permanent bool
	// NotCounted gives the claim's attempt back: the provider said "not
	// now" (RetryAfter), which does not count against max_attempts.
	NotCounted bool
	Now        time.Time // the job's clock, for updated_at
	// NextAttempt is the time, on the database's clock, before which a row
	// left pending is not claimed, given its attempts after the release;
	// nil leaves it claimable at once.
	NextAttempt func(attempts int32) time.Time
}

// LedgerEntry is one ledger row, for operators and tests.
type LedgerEntry struct {
	Key           string
	Job           string
	Effect        string
	EffectVersion int
	UnitKey       string
	State         string
	Attempts      int
	LeaseOwner    string
	Result        []byte
	LastError     string
	// Permanent: the provider called the last failure permanent (see Permanent).
	Permanent bool
	// ParkedReason says why a parked row is parked: "permanent" or
	// "max_attempts"; "" for a row that is not parked.
	ParkedReason string
	// NextAttemptAt is when a pending row that failed may be tried again,
	// on the database's clock; zero when it has not failed.
	NextAttemptAt time.Time
}
