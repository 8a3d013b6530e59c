package idemrt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"
)

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
