package idemrt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Window is the time range a watermark run or backfill fetches: units whose
// watermark field lies in [Since, Until).
type Window struct {
	Since, Until time.Time
}

// Outcome is what happened to one unit.
type Outcome string

const (
	OutcomeInserted  Outcome = "inserted"  // a new destination row
	OutcomeUpdated   Outcome = "updated"   // an existing row took newer data
	OutcomeUnchanged Outcome = "unchanged" // the row already held this (or newer) data
	OutcomeDeduped   Outcome = "deduped"   // the key was already handled; nothing written
	OutcomeAccepted  Outcome = "accepted"  // no destination: the unit's effects were considered
	OutcomeFailed    Outcome = "failed"    // the unit's write failed; retried on the next run
	OutcomeMismatch  Outcome = "mismatch"  // a handed-in key came back with a different payload
	OutcomeParked    Outcome = "parked"    // failed max_attempts runs, or parked with this payload already; progress passes it
)

// EffectOutcome is what happened to one effect of one unit.
type EffectOutcome string

const (
	EffectDone    EffectOutcome = "done"    // the provider was called and the ledger marked done
	EffectDeduped EffectOutcome = "deduped" // the ledger says done already; the kept result is returned
	EffectFailed  EffectOutcome = "failed"  // the provider failed; retried on a later run
	EffectParked  EffectOutcome = "parked"  // failed max_attempts times; left for a person
	EffectBusy    EffectOutcome = "busy"    // another run holds the reservation's lease
	EffectWaiting EffectOutcome = "waiting" // failed or throttled; waits for its next attempt time (retry, RetryAfter)
)

// Report counts what one run did. Units is filled by Process only.
type Report struct {
	Job string

	Seen, Inserted, Updated, Unchanged, Deduped, Accepted, Failed, Mismatched int

	// Parked counts units parked by this run or skipped as parked. They were
	// not written, so Failed counts them too.
	Parked int

	EffectsDone, EffectsDeduped, EffectsFailed, EffectsParked, EffectsBusy int

	// EffectsWaiting counts effects the provider asked to call later
	// (RetryAfter), or met before their next attempt time.
	EffectsWaiting int

	Units []UnitResult

	// Backlog is the job's work in the ledger when a Run, Backfill or
	// Drain ended: what is owed, and what is parked and waits for a
	// person, whether or not this call met it. A run meets a parked effect
	// only while it reads the effect's unit again (inside the overlap
	// window, or in a backfilled window), and counts it in EffectsParked
	// then; Backlog counts it on every run until a person puts it back.
	// nil for Process (it reports its own units), when the call stopped,
	// and when the count could not be read (a warning is logged).
	Backlog *Backlog
}

// backlogOps are the calls whose Report carries the job's Backlog.
var backlogOps = map[string]bool{"run": true, "backfill": true, "drain": true}

// runState is one call of the engine while it goes on: its report, and what
// only the engine needs (never handed to the caller).
type runState struct {
	Report

	// tried holds the effect keys this call already attempted, with their
	// results: a failed effect waits for the next run instead of burning
	// attempts twice, and a repeat of the key in the call gets the result.
	tried map[string]EffectResult

	// failed collects what the call returns as its *FailuresError.
	failed failures

	// inFlight is the batch whose effect calls (endBatch), or whose
	// transaction (writeAhead), is still going on, the newest of them
	// when several are written ahead; nil when none is.
	inFlight *inFlight
}

// inFlight is a batch's effect calls, or its transaction, going on in the
// background.
type inFlight struct {
	keys map[string]bool // the effect keys being performed, or the unit keys being written
	join func()          // waits for the batch, counts it, ends its units
	// before is the batch written ahead before this one, still in flight
	// (writeAhead keeps up to writeAheadDepth); nil otherwise.
	before *inFlight
}

// awaitInFlight waits for the batches in flight, if any, oldest first.
func (r *runState) awaitInFlight() { r.keepInFlight(0) }

// keepInFlight waits for the oldest batches in flight, in order, until at
// most n are left.
func (r *runState) keepInFlight(n int) {
	var chain []*inFlight // newest first
	for f := r.inFlight; f != nil; f = f.before {
		chain = append(chain, f)
	}
	if len(chain) <= n {
		return
	}
	if n == 0 {
		r.inFlight = nil
	} else {
		chain[n-1].before = nil
	}
	for i := len(chain) - 1; i >= n; i-- {
		chain[i].before = nil
		chain[i].join()
	}
}

// add adds the counts, units and failures of o, a batch counted apart
// (written ahead), to r.
func (r *runState) add(o *runState) {
	r.Report.Add(o.Report)
	for _, f := range o.failed.list {
		r.failed.add(f)
	}
	r.failed.count += o.failed.count - len(o.failed.list)
	r.failed.busy = append(r.failed.busy, o.failed.busy...)
}

// UnitResult is the outcome of one handed-in unit and its effects.
type UnitResult struct {
	Key     string
	Outcome Outcome
	Err     error
	Effects []EffectResult
}

// EffectResult is the outcome of one effect; Result is the kept result, if any.
type EffectResult struct {
	Effect  string
	Key     string
	Outcome EffectOutcome
	Result  []byte
	Err     error
}

func (r *Report) countUnit(o Outcome) {
	r.Seen++
	switch o {
	case OutcomeInserted:
		r.Inserted++
	case OutcomeUpdated:
		r.Updated++
	case OutcomeUnchanged:
		r.Unchanged++
	case OutcomeDeduped:
		r.Deduped++
	case OutcomeAccepted:
		r.Accepted++
	case OutcomeFailed:
		r.Failed++
	case OutcomeMismatch:
		r.Failed++
		r.Mismatched++
	case OutcomeParked:
		r.Failed++
		r.Parked++
	}
}

func (r *Report) countEffect(o EffectOutcome) {
	switch o {
	case EffectDone:
		r.EffectsDone++
	case EffectDeduped:
		r.EffectsDeduped++
	case EffectFailed:
		r.EffectsFailed++
	case EffectParked:
		r.EffectsFailed++
		r.EffectsParked++
	case EffectBusy:
		r.EffectsBusy++
	case EffectWaiting:
		r.EffectsWaiting++
	}
}

// Add adds o's counts and units to r, to sum the reports of several calls.
func (r *Report) Add(o Report) {
	r.Seen += o.Seen
	r.Inserted += o.Inserted
	r.Updated += o.Updated
	r.Unchanged += o.Unchanged
	r.Deduped += o.Deduped
	r.Accepted += o.Accepted
	r.Failed += o.Failed
	r.Mismatched += o.Mismatched
	r.Parked += o.Parked
	r.EffectsDone += o.EffectsDone
	r.EffectsDeduped += o.EffectsDeduped
	r.EffectsFailed += o.EffectsFailed
	r.EffectsParked += o.EffectsParked
	r.EffectsBusy += o.EffectsBusy
	r.EffectsWaiting += o.EffectsWaiting
	r.Units = append(r.Units, o.Units...)
}

// LogValue lets a Report be logged as one slog group.
func (r Report) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("job", r.Job),
		slog.Int("seen", r.Seen), slog.Int("inserted", r.Inserted), slog.Int("updated", r.Updated),
		slog.Int("unchanged", r.Unchanged), slog.Int("deduped", r.Deduped), slog.Int("accepted", r.Accepted),
		slog.Int("failed", r.Failed), slog.Int("mismatched", r.Mismatched), slog.Int("parked", r.Parked),
		slog.Int("effects_done", r.EffectsDone), slog.Int("effects_deduped", r.EffectsDeduped),
		slog.Int("effects_failed", r.EffectsFailed), slog.Int("effects_parked", r.EffectsParked),
		slog.Int("effects_busy", r.EffectsBusy), slog.Int("effects_waiting", r.EffectsWaiting),
		slog.Any("backlog", r.Backlog),
	)
}

// String prints the counts on one line, then the backlog if read.
func (r Report) String() string {
	return r.counts() + r.Backlog.text()
}

func (r Report) counts() string {
	return fmt.Sprintf("%s: seen=%d inserted=%d updated=%d unchanged=%d deduped=%d accepted=%d failed=%d mismatched=%d parked=%d effects: done=%d deduped=%d failed=%d parked=%d busy=%d waiting=%d",
		r.Job, r.Seen, r.Inserted, r.Updated, r.Unchanged, r.Deduped, r.Accepted, r.Failed, r.Mismatched, r.Parked,
		r.EffectsDone, r.EffectsDeduped, r.EffectsFailed, r.EffectsParked, r.EffectsBusy, r.EffectsWaiting)
}

// Option configures a job.
type Option func(*options)

type options struct {
	log      *slog.Logger
	now      func() time.Time
	owner    string
	start    time.Time
	maxPages int
	// batchSize bounds the units written in one transaction.
	batchSize int
	// purgeBatch bounds the rows one of Purge's statements deletes.
	purgeBatch int
	// purgeShare is the most of its time Purge spends in its statements.
	purgeShare float64
	// effectConcurrency bounds the provider calls in flight.
	effectConcurrency int
	// writeAhead commits batches while the next is prepared and written:
	// asked for (WithWriteAhead) and, once NewEngine has looked, possible.
	// writeAheadDepth is then how many batch transactions may be open at
	// once (the store's ConcurrentWrites).
	writeAhead      bool
	writeAheadDepth int
	hook            CrashHook
	observer        Observer
	// leaseClock replaces the database clock for leases (tests only).
	leaseClock func() time.Time
	// paceWait waits for a call's start under a rate on the lease clock
	// (tests only: WithPaceWait).
	paceWait func(ctx context.Context, effect string, start time.Time) error
	slotWait slotWait // between polls for a call slot (tests only: WithSlotWait)
	dbClock  *dbClock
	// waitBound bounds each wait for a connection or a lock (WithWaitBound).
	waitBound time.Duration
	// defEdit is a func(*Job[U]) the crash tests use to rebuild a job
	// with bumped versions, as a regenerated package would be.
	defEdit any
}

// WithLogger sends the job's logs to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock replaces time.Now, for leases, windows and ledger times.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithOwner names this worker in ledger leases (default: a random id per job value).
func WithOwner(owner string) Option { return func(o *options) { o.owner = owner } }

// WithStart sets where a watermark job's first window begins (default: the zero time).
func WithStart(t time.Time) Option { return func(o *options) { o.start = t } }

// WithMaxPages bounds how many source pages one run fetches (default 10000).
func WithMaxPages(n int) Option { return func(o *options) { o.maxPages = n } }

// WithBatchSize bounds how many units one transaction writes (default
// 1000): a larger page is written in batches of n.
func WithBatchSize(n int) Option { return func(o *options) { o.batchSize = n } }

// WithEffectConcurrency bounds how many provider calls one job has in
// flight (default 16); 1 performs effects one at a time, in order.
func WithEffectConcurrency(n int) Option { return func(o *options) { o.effectConcurrency = n } }

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
func WithWriteAhead(on bool) Option { return func(o *options) { o.writeAhead = on } }

// WithPaceWait is for tests that simulate time (the crash simulation),
// with WithLeaseClock: each call start an effect's rate grants is waited
// for through wait, on the simulated clock, instead of a real sleep.
func WithPaceWait(wait func(ctx context.Context, effect string, start time.Time) error) Option {
	return func(o *options) { o.paceWait = wait }
}

// WithCrashHook is for the generated crash-simulation tests only.
func WithCrashHook(h CrashHook) Option { return func(o *options) { o.hook = h } }

// WithJobEdit is for the generated crash-simulation tests only.
func WithJobEdit[U any](edit func(*Job[U])) Option { return func(o *options) { o.defEdit = edit } }

// NewEngine is what every generated job constructor calls. It refuses
// options that mean nothing for the job's source, rather than ignore them.
func NewEngine[U any](def *Job[U], st Store, opts []Option) (*Engine[U], error) {
	var given options // what the caller set, before defaults
	for _, opt := range opts {
		opt(&given)
	}
	switch {
	case !given.start.IsZero() && def.MarkOf == nil:
		return nil, errors.New("WithStart sets where a watermark job's first window begins; this job has no watermark")
	case given.maxPages != 0 && def.CheckSeen:
		return nil, errors.New("WithMaxPages bounds the pages a run fetches; this job's units are handed in")
	}
	o := newOptions(opts)
	if edit, ok := o.defEdit.(func(*Job[U])); ok {
		edit(def)
	}
	// Write-ahead is for a job without effects (one with effects overlaps
	// its calls with the next batch instead, endBatch), on a store that
	// writes concurrently.
	if cw, ok := st.(concurrentWriter); ok {
		o.writeAheadDepth = cw.ConcurrentWrites()
	}
	o.writeAhead = o.writeAhead && len(def.Effects) == 0 && o.writeAheadDepth >= 2
	o.waitBound = jobWaitBound(def, o.waitBound)
	e := &Engine[U]{def: def, st: st, opt: o, slots: make(chan struct{}, o.effectConcurrency), limits: newFleetLimits(def)}
	if o.observer != nil {
		o.observer.Watch(def.Name, e.backlog)
	}
	return e, nil
}

func newOptions(opts []Option) options {
	o := options{log: slog.Default(), now: time.Now, maxPages: 10000, batchSize: 1000, purgeBatch: DefaultPurgeBatch, purgeShare: DefaultPurgeShare, effectConcurrency: 16, writeAhead: true, dbClock: &dbClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	o.batchSize = max(o.batchSize, 1)
	o.purgeBatch = max(o.purgeBatch, 1)
	o.effectConcurrency = max(o.effectConcurrency, 1)
	if o.owner == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.owner = hex.EncodeToString(b[:])
	}
	return o
}

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

// Engine runs one job over one store.
type Engine[U any] struct {
	def *Job[U]
	st  Store
	opt options
	// slots bound the provider calls in flight across every call of the
	// engine at once (WithEffectConcurrency).
	slots chan struct{}
	// limits are the fleet-wide bounds of the effects that have any
	// (limits.go), by effect name.
	limits map[string]*fleetLimit
}

// Job returns the definition the engine runs.
func (e *Engine[U]) Job() *Job[U] { return e.def }

// Store returns the store the engine runs over.
func (e *Engine[U]) Store() Store { return e.st }

func (e *Engine[U]) hit(ctx context.Context, p CrashPoint, detail string) error {
	if e.opt.hook == nil {
		return nil
	}
	return e.opt.hook(ctx, p, detail)
}

func (e *Engine[U]) payload(u U) ([]byte, error) {
	b, err := json.Marshal(e.def.Canonical(u))
	if err != nil {
		return nil, fmt.Errorf("encode unit: %w", err)
	}
	return b, nil
}

// perform runs one reserved effect this worker has claimed until
// leaseUntil (claimAll): call the provider with the key, and hand the
// result to rec, which records it with others (recorded ends it). A call
// that did not succeed ends here, with no completion. It is safe to run
// concurrently for distinct keys.
func (e *Engine[U]) perform(ctx context.Context, fx Effect[U], key string, u U, leaseUntil time.Time, rec *recorder, log *slog.Logger) (er EffectResult, cp *completion) {
	er = EffectResult{Effect: fx.Name, Key: key}
	log = log.With(slog.String("effect", fx.Name), slog.String("effect_key", key))
	start := time.Now()
	if obs := e.opt.observer; obs != nil {
		ctx = obs.CallStart(ctx, e.def.Name, fx.Name, key, e.def.KeyOf(u))
		defer func() {
			if cp == nil {
				obs.CallEnd(ctx, e.def.Name, er, time.Since(start))
			}
		}()
	}
	if err := e.hit(ctx, PointEffectClaimed, key); err != nil {
		return e.release(ctx, fx, key, err, log), nil
	}
	// A canceled run (a shutdown) starts no new call. Nothing is released
	// (a release counts a failure, and could park an effect never called):
	// the lease lapses as a crashed worker's would, and the next run after
	// it performs the effect.
	if err := ctx.Err(); err != nil {
		er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: not called, the run was canceled: %w", fx.Name, key, ErrEffectFailed, err)
		log.Warn("idemgen: effect not called: the run was canceled; the next run after its lease performs it")
		return er, nil
	}
	// The effect's rate and concurrency across workers: wait for a slot
	// and a start (or give the claim back, not counted, when none comes
	// within the lease).
	free, gate, err := e.admit(ctx, fx, key, leaseUntil)
	if err != nil {
		if ctx.Err() != nil {
			er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: not called, the run was canceled: %w", fx.Name, key, ErrEffectFailed, ctx.Err())
			return er, nil
		}
		return e.release(ctx, fx, key, err, log), nil
	}
	defer free()
	// Fence: a worker that stalled past its lease may have been taken over;
	// the new holder performs the effect, this one must not call again.
	if now, err := e.leaseNow(ctx, nil); err != nil || !now.Before(leaseUntil) {
		er.Outcome, er.Err = EffectBusy, fmt.Errorf("effect %q key %q: %w: lease expired before the call", fx.Name, key, ErrBusy)
		log.Warn("idemgen: effect lease expired before the call; left to the worker that took it over")
		return er, nil
	}
	if err := e.hit(ctx, PointEffectBeforeCall, key); err != nil {
		return e.release(ctx, fx, key, err, log), nil
	}
	result, callErr := e.call(ctx, fx, key, u)
	if err := e.hit(ctx, PointEffectAfterCall, key); err != nil && callErr == nil {
		callErr = err
	}
	if callErr != nil {
		return e.release(ctx, fx, key, e.gateFailed(ctx, fx, gate, callErr, log), log), nil
	}
	e.gateSucceeded(ctx, gate, log)
	if !fx.KeepResult {
		result = nil
	}
	cp = rec.submit(ctx, key, result)
	cp.ctx, cp.start, cp.log = ctx, start, log
	return er, cp
}

// call calls the provider, within the effect's timeout when it has one. A
// call past it is canceled and fails with ErrCallTimeout once the provider
// returns: the lease is held until then, so the key is never in flight
// twice (timeout is shorter than lease).
func (e *Engine[U]) call(ctx context.Context, fx Effect[U], key string, u U) ([]byte, error) {
	if fx.Timeout <= 0 {
		return fx.Call(ctx, key, u)
	}
	callCtx, cancel := context.WithTimeout(ctx, fx.Timeout)
	defer cancel()
	result, err := fx.Call(callCtx, key, u)
	if err != nil && ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w after %s; its outcome is unknown and it is retried with the same key: %w", ErrCallTimeout, fx.Timeout, err)
	}
	return result, err
}

// recorded ends a performed effect once its completion is written.
func (e *Engine[U]) recorded(fx Effect[U], key string, cp *completion) (er EffectResult) {
	<-cp.done
	ctx, log := cp.ctx, cp.log
	if obs := e.opt.observer; obs != nil {
		defer func() { obs.CallEnd(ctx, e.def.Name, er, time.Since(cp.start)) }()
	}
	er = EffectResult{Effect: fx.Name, Key: key}
	switch {
	case cp.err != nil:
		er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: record done: %w", fx.Name, key, ErrEffectFailed, cp.err)
		log.Warn("idemgen: effect performed but not recorded; it will be retried with the same key", slog.Any("err", cp.err))
		return er
	case !cp.ok:
		// Another worker took the lease over: the ledger, not this late
		// call, says how the effect ended (done with its result, parked, or
		// still with the new owner).
		log.Warn("idemgen: effect lease was taken over before it was recorded; the provider saw the same key twice")
		return e.ledgerOutcome(ctx, fx, key)
	}
	if err := e.hit(ctx, PointEffectRecorded, key); err != nil {
		er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrEffectFailed, err)
		return er
	}
	log.Info("idemgen: effect done")
	er.Outcome, er.Result = EffectDone, cp.result
	return er
}

// ledgerOutcome reports an effect this worker does not hold as the ledger
// has it; no outcome when it is not reserved (the write did not decide it).
func (e *Engine[U]) ledgerOutcome(ctx context.Context, fx Effect[U], key string) EffectResult {
	row, found, err := e.st.Auto().Effect(ctx, key)
	switch {
	case err != nil:
		return EffectResult{Effect: fx.Name, Key: key, Outcome: EffectFailed,
			Err: fmt.Errorf("effect %q key %q: %w: read ledger: %w", fx.Name, key, ErrEffectFailed, err)}
	case !found:
		return EffectResult{Effect: fx.Name, Key: key}
	}
	now, err := e.leaseNow(ctx, nil)
	if err != nil {
		now = time.Time{} // unknown: a pending row is reported busy
	}
	return ledgerResult(fx, key, row, now)
}

// ledgerResult is the outcome of an effect whose ledger row is row, for a
// worker that does not hold it; now is the database's time, to tell a row
// waiting for its next attempt from one another worker holds.
func ledgerResult[U any](fx Effect[U], key string, row LedgerRow, now time.Time) EffectResult {
	er := EffectResult{Effect: fx.Name, Key: key}
	switch {
	case row.State == StateDone:
		er.Outcome, er.Result = EffectDeduped, row.Result
	case row.State == StateParked:
		er.Outcome, er.Err = EffectParked, parkedError(fx.Name, key, row)
	case !now.IsZero() && row.NextAttemptAt.After(now):
		er.Outcome, er.Err = EffectWaiting, fmt.Errorf("effect %q key %q: %w until %s: %s", fx.Name, key, ErrWaiting,
			row.NextAttemptAt.UTC().Format(time.RFC3339Nano), row.LastError)
	default:
		er.Outcome, er.Err = EffectBusy, fmt.Errorf("effect %q key %q: %w", fx.Name, key, ErrBusy)
	}
	return er
}

// remember records the outcome of an effect key this call attempted.
func (e *Engine[U]) remember(rep *runState, er EffectResult) {
	if rep.tried == nil {
		rep.tried = map[string]EffectResult{}
	}
	rep.tried[er.Key] = er
}

// parkedError is the error of an effect found parked in the ledger, worded
// as release worded it when the effect was parked; a permanent failure (see
// Permanent) still says so to errors.Is.
func parkedError(effect, key string, row LedgerRow) error {
	// Rows parked before the permanent and parked_reason columns existed
	// (no reason) said permanent only in their text.
	permanent := row.Permanent || row.ParkedReason == "" && strings.HasPrefix(row.LastError, permanentPrefix)
	return fmt.Errorf("effect %q key %q: %w: %w", effect, key, ErrEffectParked, storedFailure{row.LastError, permanent})
}

// storedFailure is a provider's failure read back from the ledger: its
// text as first answered, and whether the provider called it permanent
// (the ledger's permanent column).
type storedFailure struct {
	text      string
	permanent bool
}

func (f storedFailure) Error() string { return f.text }

func (f storedFailure) Is(target error) bool { return target == ErrPermanent && f.permanent }

func (e *Engine[U]) release(ctx context.Context, fx Effect[U], key string, cause error, log *slog.Logger) EffectResult {
	er := EffectResult{Effect: fx.Name, Key: key, Outcome: EffectFailed, Err: fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrEffectFailed, cause)}
	permanent := errors.Is(cause, ErrPermanent)
	wait, notNow := retryAfterOf(cause)
	rel := Release{Key: key, Owner: e.opt.owner, LastError: cause.Error(), MaxAttempts: fx.MaxAttempts,
		Permanent: permanent, NotCounted: notNow && !permanent, Now: e.opt.now()}
	if now, err := e.leaseNow(ctx, nil); err == nil {
		rel.NextAttempt = func(attempts int32) time.Time {
			backoff := fx.Retry.wait(attempts, jitter)
			if rel.NotCounted && wait > 0 {
				backoff = wait
			}
			return now.Add(backoff)
		}
	} else {
		log.Warn("idemgen: effect failed; without the database clock its retry is not delayed", slog.Any("err", err))
	}
	var state string
	err := e.st.InTx(ctx, func(q Querier) (err error) {
		state, err = q.Release(ctx, rel)
		return err
	})
	if err != nil {
		log.Warn("idemgen: effect failed; releasing its lease failed too", slog.Any("err", cause), slog.Any("release_err", err))
		return er
	}
	if rel.NotCounted && state == StatePending {
		er.Outcome, er.Err = EffectWaiting, fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrWaiting, cause)
		log.Info("idemgen: the provider asked to be called later; no attempt counted", slog.Any("err", cause))
		return er
	}
	if state == StateParked {
		er.Outcome, er.Err = EffectParked, fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrEffectParked, cause)
		if permanent {
			log.Error("idemgen: effect parked: the provider called the failure permanent", slog.Any("err", cause))
			return er
		}
		log.Error("idemgen: effect parked after max attempts", slog.Any("err", cause))
		return er
	}
	log.Warn("idemgen: effect failed; it will be retried", slog.Any("err", cause))
	return er
}

// drain performs every reservation of this job that is still pending and not
// leased: effects owed by earlier runs that crashed or failed.
func (e *Engine[U]) drain(ctx context.Context, decode func([]byte) (U, error), rep *runState) error {
	byName := map[string]Effect[U]{}
	for _, fx := range e.def.Effects {
		byName[fx.Name] = fx
	}
	after := ""
	for {
		now, err := e.leaseNow(ctx, nil)
		if err != nil {
			return fmt.Errorf("job %q: list pending effects: %w", e.def.Name, err)
		}
		rows, err := e.st.Auto().Pending(ctx, e.def.Name, now, after, int32(e.opt.batchSize))
		if err != nil {
			return fmt.Errorf("job %q: list pending effects: %w", e.def.Name, err)
		}
		if len(rows) == 0 {
			return nil
		}
		var calls []*call[U]
		for _, row := range rows {
			after = row.Key
			fx, ok := byName[row.Effect]
			log := e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", row.UnitKey))
			if !ok {
				log.Warn("idemgen: pending effect is no longer in the spec; left as is", slog.String("effect", row.Effect))
				continue
			}
			u, err := decode(row.Payload)
			if err != nil {
				log.Error("idemgen: pending effect payload unreadable", slog.Any("err", err))
				continue
			}
			calls = append(calls, &call[U]{fx: fx, key: row.Key, u: u, unitKey: row.UnitKey})
		}
		e.performAll(ctx, calls, rep)
	}
}

// runWindow fetches and applies one window page by page. With save, the
// watermark advances afterwards, and never past a failed unit.
func (e *Engine[U]) runWindow(ctx context.Context, w Window, save bool,
	fetch func(ctx context.Context, w Window, page string) ([]U, string, error),
	markOf func(U) time.Time, rep *runState) error {
	if e.def.Stage {
		return e.streamStaged(ctx, w, save, fetch, rep)
	}
	page := ""
	var res applied
	for n := 0; n < e.opt.maxPages; n++ {
		if err := e.hit(ctx, PointBatchStart, page); err != nil {
			return err
		}
		units, next, err := fetch(ctx, w, page)
		if err != nil {
			return fmt.Errorf("job %q: fetch window %s..%s: %w", e.def.Name, w.Since.Format(time.RFC3339), w.Until.Format(time.RFC3339), err)
		}
		if err := e.apply(ctx, units, rep, false, markOf, &res); err != nil {
			return err
		}
		if next == "" || next == page {
			break
		}
		page = next
	}
	rep.awaitInFlight() // every batch of the window has ended
	if !save {
		return nil
	}
	mark := w.Until
	if oldestFailed := res.oldestFailed; !oldestFailed.IsZero() && oldestFailed.Before(mark) {
		// Hold the mark at the oldest failure so the next window fetches it again.
		mark = oldestFailed
	}
	return e.saveMark(ctx, e.st.Auto(), mark)
}

func (e *Engine[U]) saveMark(ctx context.Context, q Querier, mark time.Time) error {
	if err := e.hit(ctx, PointProgressBefore, ""); err != nil {
		return err
	}
	if err := q.SaveWatermark(ctx, e.def.Name, mark, e.def.Version, e.opt.now()); err != nil {
		return fmt.Errorf("job %q: save watermark: %w", e.def.Name, err)
	}
	return e.hit(ctx, PointProgressAfter, "")
}

// nextWindow is the window a scheduled watermark run fetches.
func (e *Engine[U]) nextWindow(ctx context.Context, overlap time.Duration) (Window, error) {
	p, err := e.st.Auto().Progress(ctx, e.def.Name)
	if err != nil {
		return Window{}, fmt.Errorf("job %q: read progress: %w", e.def.Name, err)
	}
	since := e.opt.start
	if p.HasMark {
		since = p.Watermark.Add(-overlap)
	}
	return Window{Since: since, Until: e.opt.now()}, nil
}

// runCursor applies pages from the stored cursor on; the cursor advances
// after each whole page, and stops at a page with a failed unit.
func (e *Engine[U]) runCursor(ctx context.Context, fetch func(ctx context.Context, cursor string) ([]U, string, error), rep *runState) error {
	p, err := e.st.Auto().Progress(ctx, e.def.Name)
	if err != nil {
		return fmt.Errorf("job %q: read progress: %w", e.def.Name, err)
	}
	cur, pos := p.Cursor, p.Position
	for n := 0; n < e.opt.maxPages; n++ {
		if err := e.hit(ctx, PointBatchStart, cur); err != nil {
			return err
		}
		units, next, err := fetch(ctx, cur)
		if err != nil {
			return fmt.Errorf("job %q: fetch page after cursor %q: %w", e.def.Name, cur, err)
		}
		advance := next != "" && next != cur
		saveCursor := func(q Querier) error {
			if err := e.hit(ctx, PointProgressBefore, next); err != nil {
				return err
			}
			// position orders cursors: a slower overlapping run cannot move it back.
			if err := q.SaveCursor(ctx, e.def.Name, next, pos+1, e.def.Version, e.opt.now()); err != nil {
				return fmt.Errorf("job %q: save cursor: %w", e.def.Name, err)
			}
			return e.hit(ctx, PointProgressAfter, next)
		}
		var res applied
		if e.def.Stage {
			var save func(q Querier) error
			if advance {
				save = saveCursor
			}
			res, err = e.applyStaged(ctx, units, rep, false, save)
		} else {
			err = e.apply(ctx, units, rep, false, nil, &res)
			rep.awaitInFlight() // the cursor moves past whole pages only
			if err == nil && res.failed == 0 && advance {
				err = saveCursor(e.st.Auto())
			}
		}
		if err != nil || res.failed > 0 || !advance {
			return err
		}
		cur, pos = next, pos+1
		if len(units) == 0 {
			return nil
		}
	}
	return nil
}

// finish logs the report once per run.
func (e *Engine[U]) finish(ctx context.Context, rep *runState, err error) {
	if fe := (*FailuresError)(nil); errors.As(err, &fe) {
		e.opt.log.WarnContext(ctx, "idemgen: run done with failures", slog.Any("report", *rep), slog.Any("err", err))
		return
	}
	if err != nil {
		e.opt.log.ErrorContext(ctx, "idemgen: run stopped", slog.Any("report", *rep), slog.Any("err", err))
		return
	}
	e.opt.log.InfoContext(ctx, "idemgen: run done", slog.Any("report", *rep))
}

// Purge deletes done ledger rows older than each effect's retention, then,
// for handed-in units, the key records older than the job's longest
// retention whose ledger rows are all gone: a replay after that is
// processed as new. A job with an effect kept forever (no retention), or
// with no effects, keeps its key records.
//
// It deletes in batches of at most WithPurgeBatch rows (default 1000), each
// its own short statement, until a batch finds fewer, and paces them
// (WithPurgeShare: by default it waits three times as long as each batch
// took) so that jobs running beside it keep most of the database; it
// stops between batches when ctx is done, returning ctx's error and the rows deleted so
// far, so a purge can be cut short and run again. It returns the rows
// deleted in all. Run it on a timer (docs/operations.md) to purge
// continuously.
func (e *Engine[U]) Purge(ctx context.Context) (int64, error) {
	var total int64
	var longest time.Duration
	for _, fx := range e.def.Effects {
		if fx.Retention <= 0 {
			longest = -1
			continue
		}
		if longest >= 0 {
			longest = max(longest, fx.Retention)
		}
		before := e.opt.now().Add(-fx.Retention)
		n, err := purgeInBatches(ctx, e.opt.purgeBatch, e.opt.purgeShare, func(limit int32) (int64, error) {
			return e.st.Auto().Purge(ctx, e.def.Name, fx.Name, before, limit)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("job %q effect %q: purge: %w", e.def.Name, fx.Name, err)
		}
	}
	if e.def.CheckSeen && longest > 0 {
		before := e.opt.now().Add(-longest)
		n, err := purgeInBatches(ctx, e.opt.purgeBatch, e.opt.purgeShare, func(limit int32) (int64, error) {
			return e.st.Auto().PurgeSeen(ctx, e.def.Name, before, limit)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("job %q: purge key records: %w", e.def.Name, err)
		}
	}
	return total, nil
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

// run wraps one scheduled run or call: report, logging, run-start point.
// A call that ran to its end returns a *FailuresError when some unit or
// effect did not end applied or deduped (busy effects count for Process).
func (e *Engine[U]) run(ctx context.Context, op string, busyFails bool, body func(ctx context.Context, rep *runState) error) (Report, error) {
	rep := runState{Report: Report{Job: e.def.Name}}
	ctx = withWaitBound(ctx, e.opt.waitBound)
	obs := e.opt.observer
	if obs != nil {
		ctx = obs.RunStart(ctx, e.def.Name, op)
	}
	err := e.hit(ctx, PointRunStart, "")
	if err == nil {
		err = body(ctx, &rep)
	}
	rep.awaitInFlight()
	if err == nil {
		err = rep.failed.err(e.def.Name, busyFails)
	} else if ferr := rep.failed.err(e.def.Name, busyFails); ferr != nil {
		// The run stopped at err (its database gone, say) after units or
		// effects had already failed, most likely for the same cause: say
		// both, the step it stopped at first. Only err is wrapped.
		err = fmt.Errorf("%w (before that, %v)", err, ferr)
	}
	if fe := (*FailuresError)(nil); backlogOps[op] && (err == nil || errors.As(err, &fe)) {
		if b, berr := e.backlog(ctx); berr != nil {
			e.opt.log.WarnContext(ctx, "idemgen: the report has no backlog", slog.Any("err", berr))
		} else {
			rep.Backlog = &b
		}
	}
	e.finish(ctx, &rep, err)
	if obs != nil {
		obs.RunEnd(ctx, rep.Report, err)
	}
	return rep.Report, err
}

func decodeUnit[U any](b []byte) (U, error) {
	var u U
	err := json.Unmarshal(b, &u)
	return u, err
}

// RunWatermark is a scheduled watermark run: owed effects first, then the
// window since the stored mark minus overlap.
func (e *Engine[U]) RunWatermark(ctx context.Context, overlap time.Duration,
	fetch func(context.Context, Window, string) ([]U, string, error), markOf func(U) time.Time) (Report, error) {
	return e.run(ctx, "run", false, func(ctx context.Context, rep *runState) error {
		if err := e.drain(ctx, decodeUnit[U], rep); err != nil {
			return err
		}
		if err := e.retryUnits(ctx, rep); err != nil {
			return err
		}
		w, err := e.nextWindow(ctx, overlap)
		if err != nil {
			return err
		}
		return e.runWindow(ctx, w, true, fetch, markOf, rep)
	})
}

// backfill re-runs a past window through the same keys and ledger; it never moves progress.
func (e *Engine[U]) Backfill(ctx context.Context, w Window,
	fetch func(context.Context, Window, string) ([]U, string, error), markOf func(U) time.Time) (Report, error) {
	return e.run(ctx, "backfill", false, func(ctx context.Context, rep *runState) error {
		return e.runWindow(ctx, w, false, fetch, markOf, rep)
	})
}

// RunCursor is a scheduled cursor run: owed effects first, then pages from the stored cursor.
func (e *Engine[U]) RunCursor(ctx context.Context, fetch func(context.Context, string) ([]U, string, error)) (Report, error) {
	return e.run(ctx, "run", false, func(ctx context.Context, rep *runState) error {
		if err := e.drain(ctx, decodeUnit[U], rep); err != nil {
			return err
		}
		if err := e.retryUnits(ctx, rep); err != nil {
			return err
		}
		return e.runCursor(ctx, fetch, rep)
	})
}

// process applies handed-in units and reports each one.
func (e *Engine[U]) Process(ctx context.Context, units []U) (Report, error) {
	return e.run(ctx, "process", true, func(ctx context.Context, rep *runState) error {
		var err error
		if e.def.Stage {
			_, err = e.applyStaged(ctx, units, rep, true, nil)
		} else {
			err = e.apply(ctx, units, rep, true, nil, &applied{})
		}
		return err
	})
}

// Drain performs every owed effect of the job; for handed-in units
// (CheckSeen: source none, which has no Run) it then writes the units a
// person put back for retry.
func (e *Engine[U]) Drain(ctx context.Context) (Report, error) {
	return e.run(ctx, "drain", false, func(ctx context.Context, rep *runState) error {
		if err := e.drain(ctx, decodeUnit[U], rep); err != nil || !e.def.CheckSeen {
			return err
		}
		return e.retryUnits(ctx, rep)
	})
}
