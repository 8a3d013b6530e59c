package idemrt

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem/internal/hooks"
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
	observer        Observer
	dbClock         *dbClock
	// waitBound bounds each wait for a connection or a lock (WithWaitBound).
	waitBound time.Duration
	// hooks are the tests' (idem/idemtest): a crash hook, a definition
	// edit, a simulated lease clock and waits; production's are zero.
	hooks hooks.State
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
