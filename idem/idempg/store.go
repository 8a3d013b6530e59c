// Package idempg runs the idem runtime on PostgreSQL through pgx: a Store
// over a pool, and the ledger's queries (compiled by sqlc in
// internal/ledgerdb) on a generated package's tables.
//
// A generated package builds its store with NewStore, passing its table
// names and a function that adds its destinations' queries to the ledger's (Querier):
//
//	st := idempg.NewStore(pool, billingTables, func(l idempg.Querier) idemrt.Querier {
//		return pgQuerier{l, pgdb.New(l.DB())}
//	})
package idempg

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idempg/internal/ledgerdb"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// DBTX is what the queries run on: the pool, or a transaction (sqlc's DBTX).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store runs a package's queries on PostgreSQL. It is an idem.Store; it
// also lets River workers and ProcessPgTx run them in a caller's
// transaction (Pool, PgTx).
type Store struct {
	pool    *pgxpool.Pool
	names   *idemrt.TableNames
	querier func(Querier) idemrt.Querier
	// prepares: the pool's connections cache their statements (pgx's
	// default mode), so a transaction's Exec may prepare by text
	// (preparedExec); a pool set to another mode (a pooler that keeps no
	// prepared statements) is left to it.
	prepares bool
}

// NewStore returns a store over pool for the package whose tables t names.
// querier makes the package's querier from the ledger's (a package with no
// destination passes nil: the ledger's is all it needs).
func NewStore(pool *pgxpool.Pool, t idemrt.Tables, querier func(Querier) idemrt.Querier) Store {
	if querier == nil {
		querier = func(l Querier) idemrt.Querier { return l }
	}
	prepares := pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement
	return Store{pool: pool, names: idemrt.NewTableNames(t), querier: querier, prepares: prepares}
}

func (s Store) on(db DBTX) idemrt.Querier {
	pkg := db
	if tx, ok := db.(interface{ Conn() *pgx.Conn }); ok && s.prepares {
		pkg = preparedExec{db, tx.Conn()}
	}
	return s.querier(Querier{q: ledgerdb.New(renamed{db, s.names}), db: pkg})
}

// preparedExec is a transaction on which the package's statements run by
// Exec with arguments (the plain insert of idemrt.PgInsertNew, the only
// ones) are prepared by their text on the transaction's connection (pgx's
// Prepare(sql, sql)), not taken from pgx's statement cache. pgx drops a
// cached statement from its connection at any error, and that insert
// fails whenever one of its keys is there already (a re-run over the
// overlap, a retry): the next batch prepared it again, a round trip, a
// parse and a plan more. A statement prepared by its text stays.
type preparedExec struct {
	DBTX
	conn *pgx.Conn
}

func (p preparedExec) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if len(args) > 0 { // without arguments pgx sends the simple protocol, nothing cached
		if _, err := p.conn.Prepare(ctx, sql, sql); err != nil {
			return pgconn.CommandTag{}, err
		}
	}
	return p.DBTX.Exec(ctx, sql, args...)
}

// InTx runs fn in a READ COMMITTED transaction whose BEGIN goes in its
// first statement's round trip (lazyTx), every wait bounded by the job's
// wait bound.
func (s Store) InTx(ctx context.Context, fn func(q idemrt.Querier) error) error {
	return inTx(ctx, s.pool, func(tx *lazyTx) error { return fn(s.on(tx)) })
}

// InStatement runs fn, which runs exactly one query, as that query's own
// transaction, in one round trip: a single write is atomic without a
// BEGIN and a COMMIT, and its lock waits are bounded as InTx's are; one
// past the bound fails with a *WaitError (ErrBusy). A BEGIN and a COMMIT
// of their own would cost two more round trips for the same guarantee.
// Every statement Auto runs is such a transaction (boundedStatement).
func (s Store) InStatement(ctx context.Context, fn func(q idemrt.Querier) error) error {
	return fn(s.Auto())
}

// Auto runs each query as its own transaction, every wait bounded by the
// job's wait bound: the pool's, and the locks' (boundedStatement).
func (s Store) Auto() idemrt.Querier { return s.on(boundedStatement{s.pool}) }

// ConcurrentWrites is how many batch transactions of one job the engine
// may keep open at once (idem.WithWriteAhead): the pool's connections but
// one, from two to maxConcurrentWrites.
func (s Store) ConcurrentWrites() int {
	return min(max(int(s.pool.Config().MaxConns)-1, 2), maxConcurrentWrites)
}

// maxConcurrentWrites bounds write-ahead: on a two-core machine, copy_job
// (example/bench, batches of 1,000) wrote 251k–303k rows/s with two batch
// transactions open at once, 303k–347k with five, and no more with eight.
const maxConcurrentWrites = 5

// DBNow reads the database's clock, which leases are compared on, on a
// connection of the pool taken within the wait bound. The read takes no
// lock, so it goes alone, without the lock bound the statements outside
// a transaction carry (boundedStatement): one statement fewer for the
// server each time (in the example's invoice_sync, one in six of those
// statements was this read). Inside a transaction the engine reads it on
// the transaction's own connection (Querier.DBNow).
func (s Store) DBNow(ctx context.Context) (time.Time, error) {
	c, err := idemrt.PgAcquire(ctx, s.pool)
	if err != nil {
		return time.Time{}, err
	}
	defer c.Release()
	return dbNow(ctx, c)
}

// dbNow reads the clock on db: clock_timestamp, not now, which inside a
// transaction stands still at its start.
func dbNow(ctx context.Context, db DBTX) (time.Time, error) {
	var now time.Time
	err := db.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now)
	return now, err
}

// Pool returns the pool the store runs on (River workers open their transactions on it).
func (s Store) Pool() *pgxpool.Pool { return s.pool }

// PgTx runs the queries in a transaction the caller owns (ProcessPgTx, a River worker).
func (s Store) PgTx(tx pgx.Tx) idemrt.Querier { return s.on(tx) }

// renamed runs the runtime's ledger queries on a package's own tables.
type renamed struct {
	db    DBTX
	names *idemrt.TableNames
}

func (r renamed) Exec(ctx context.Context, query string, args ...any) (pgconn.CommandTag, error) {
	q, err := r.names.SQL(query)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	return r.db.Exec(ctx, q, args...)
}

func (r renamed) Query(ctx context.Context, query string, args ...any) (pgx.Rows, error) {
	q, err := r.names.SQL(query)
	if err != nil {
		return nil, err
	}
	return r.db.Query(ctx, q, args...)
}

func (r renamed) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	q, err := r.names.SQL(query)
	if err != nil {
		return errRow{err}
	}
	return r.db.QueryRow(ctx, q, args...)
}

// errRow is a row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// Querier runs the ledger's queries; it implements idemrt.Querier. A generated
// package embeds it in its own querier, which adds its destinations'
// queries run on DB.
type Querier struct {
	q  *ledgerdb.Queries
	db DBTX
}

// DB is what the ledger's queries run on (the pool, or the transaction),
// for the package's own queries.
func (q Querier) DB() DBTX { return q.db }

// DBNow reads the database's clock on what the queries run on.
func (q Querier) DBNow(ctx context.Context) (time.Time, error) { return dbNow(ctx, q.db) }

func (q Querier) Progress(ctx context.Context, job string) (idemrt.ProgressRow, error) {
	r, err := q.q.GetProgress(ctx, job)
	if idemrt.PgNoRows(err) {
		return idemrt.ProgressRow{}, nil
	}
	if err != nil {
		return idemrt.ProgressRow{}, err
	}
	p := idemrt.ProgressRow{Found: true, Position: r.CursorPosition}
	if r.Watermark != nil {
		p.Watermark, p.HasMark = *r.Watermark, true
	}
	if r.CursorToken != nil {
		p.Cursor = *r.CursorToken
	}
	return p, nil
}

func (q Querier) SaveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error {
	return q.q.SaveWatermark(ctx, ledgerdb.SaveWatermarkParams{Job: job, Watermark: &mark, JobVersion: jobVersion, UpdatedAt: now})
}

func (q Querier) SaveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error {
	return q.q.SaveCursor(ctx, ledgerdb.SaveCursorParams{Job: job, CursorToken: &cursor, CursorPosition: position, JobVersion: jobVersion, UpdatedAt: now})
}

func (q Querier) See(ctx context.Context, job string, unitKeys []string, hashes [][]byte, jobVersion int32, now time.Time) (map[string][]byte, error) {
	fresh, err := q.q.SeeUnits(ctx, ledgerdb.SeeUnitsParams{Job: job, UnitKeys: unitKeys, PayloadHashes: hashes, JobVersion: jobVersion, FirstSeen: now})
	if err != nil || len(fresh) == len(unitKeys) {
		return nil, err
	}
	rs, err := q.q.SeenHashes(ctx, ledgerdb.SeenHashesParams{Job: job, UnitKeys: unitKeys})
	if err != nil {
		return nil, err
	}
	seen := make(map[string][]byte, len(rs))
	for _, r := range rs {
		seen[r.UnitKey] = r.PayloadHash
	}
	for _, k := range fresh {
		delete(seen, k)
	}
	return seen, nil
}

func (q Querier) Reserve(ctx context.Context, r idemrt.Reservations, now time.Time) error {
	return q.q.ReserveEffects(ctx, ledgerdb.ReserveEffectsParams{
		EffectKeys: r.Keys, Job: r.Job, Effect: r.Effect, EffectVersion: r.EffectVersion, JobVersion: r.JobVersion,
		UnitKeys: r.UnitKeys, Payloads: r.Payloads, Now: now,
	})
}

func (q Querier) ReserveLeased(ctx context.Context, r idemrt.Reservations, now time.Time, owner string, leaseUntil time.Time) (map[string]bool, error) {
	ks, err := q.q.ReserveLeasedEffects(ctx, ledgerdb.ReserveLeasedEffectsParams{
		EffectKeys: r.Keys, Job: r.Job, Effect: r.Effect, EffectVersion: r.EffectVersion, JobVersion: r.JobVersion,
		UnitKeys: r.UnitKeys, Payloads: r.Payloads, LeaseOwner: owner, LeaseUntil: leaseUntil, Now: now,
	})
	return keySet(ks), err
}

func (q Querier) Decided(ctx context.Context, job, effect string, unitKeys []string, version int32) (map[string]bool, error) {
	ks, err := q.q.DecidedUnits(ctx, ledgerdb.DecidedUnitsParams{Job: job, Effect: effect, EffectVersion: version, UnitKeys: unitKeys})
	if err != nil || len(ks) == 0 {
		return nil, err
	}
	decided := make(map[string]bool, len(ks))
	for _, k := range ks {
		decided[k] = true
	}
	return decided, nil
}

func (q Querier) ClaimMany(ctx context.Context, keys []string, owner string, now, until time.Time) (map[string]bool, error) {
	ks, err := q.q.ClaimEffects(ctx, ledgerdb.ClaimEffectsParams{Owner: &owner, LeaseUntil: &until, Now: now, EffectKeys: keys})
	return keySet(ks), err
}

func (q Querier) CompleteMany(ctx context.Context, keys []string, results [][]byte, owner string, now time.Time) (map[string]bool, error) {
	ks, err := q.q.CompleteEffects(ctx, ledgerdb.CompleteEffectsParams{Now: &now, EffectKeys: keys, Results: results, Owner: &owner})
	return keySet(ks), err
}

func keySet(keys []string) map[string]bool {
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set
}

func (q Querier) Release(ctx context.Context, r idemrt.Release) (string, error) {
	row, err := q.q.ReleaseEffect(ctx, ledgerdb.ReleaseEffectParams{MaxAttempts: r.MaxAttempts, NotCounted: r.NotCounted, Permanent: r.Permanent,
		LastError: &r.LastError, UpdatedAt: r.Now, EffectKey: r.Key, Owner: &r.Owner})
	if idemrt.PgNoRows(err) {
		return idem.StatePending, nil // the lease was taken over; the new holder decides
	}
	if state := idemrt.LedgerState(row.State); err != nil || state != idem.StatePending || r.NextAttempt == nil {
		return state, err
	}
	next := r.NextAttempt(row.Attempts)
	return idem.StatePending, q.q.DeferEffect(ctx, ledgerdb.DeferEffectParams{NextAttemptAt: &next, EffectKey: r.Key})
}

func (q Querier) Effect(ctx context.Context, key string) (idemrt.LedgerRow, bool, error) {
	r, err := q.q.GetEffect(ctx, key)
	if idemrt.PgNoRows(err) {
		return idemrt.LedgerRow{}, false, nil
	}
	if err != nil {
		return idemrt.LedgerRow{}, false, err
	}
	row := idemrt.LedgerRow{Key: key, State: idemrt.LedgerState(r.State), Result: r.Result, Permanent: r.Permanent}
	if r.LastError != nil {
		row.LastError = *r.LastError
	}
	if r.ParkedReason != nil {
		row.ParkedReason = *r.ParkedReason
	}
	if r.NextAttemptAt != nil {
		row.NextAttemptAt = *r.NextAttemptAt
	}
	return row, true, nil
}

func (q Querier) Effects(ctx context.Context, keys []string) (map[string]idemrt.LedgerRow, error) {
	rs, err := q.q.GetEffects(ctx, keys)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	found := make(map[string]idemrt.LedgerRow, len(rs))
	for _, r := range rs {
		row := idemrt.LedgerRow{Key: r.EffectKey, State: idemrt.LedgerState(r.State), Result: r.Result, Permanent: r.Permanent}
		if r.LastError != nil {
			row.LastError = *r.LastError
		}
		if r.ParkedReason != nil {
			row.ParkedReason = *r.ParkedReason
		}
		if r.NextAttemptAt != nil {
			row.NextAttemptAt = *r.NextAttemptAt
		}
		found[r.EffectKey] = row
	}
	return found, nil
}

func (q Querier) Pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]idemrt.LedgerRow, error) {
	rs, err := q.q.PendingEffects(ctx, ledgerdb.PendingEffectsParams{Job: job, Now: &now, After: after, RowLimit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]idemrt.LedgerRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, idemrt.LedgerRow{Key: r.EffectKey, Job: job, Effect: r.Effect, UnitKey: r.UnitKey, Payload: r.Payload, State: idem.StatePending})
	}
	return out, nil
}

func (q Querier) Purge(ctx context.Context, job, effect string, before time.Time, limit int32) (int64, error) {
	return q.q.PurgeEffects(ctx, ledgerdb.PurgeEffectsParams{Job: job, Effect: effect, Before: &before, RowLimit: limit})
}

func (q Querier) PurgeSeen(ctx context.Context, job string, before time.Time, limit int32) (int64, error) {
	return q.q.PurgeSeen(ctx, ledgerdb.PurgeSeenParams{Job: job, Before: before, RowLimit: limit})
}

func (q Querier) Ledger(ctx context.Context) ([]idem.LedgerEntry, error) {
	return idemrt.ReadWholeLedger(ctx, q.LedgerPage)
}

func (q Querier) LedgerPage(ctx context.Context, after string, limit int32) ([]idem.LedgerEntry, error) {
	rs, err := q.q.LedgerPage(ctx, ledgerdb.LedgerPageParams{After: after, RowLimit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]idem.LedgerEntry, 0, len(rs))
	for _, r := range rs {
		e := idem.LedgerEntry{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, EffectVersion: int(r.EffectVersion),
			UnitKey: r.UnitKey, State: idemrt.LedgerState(r.State), Attempts: int(r.Attempts), Result: r.Result, Permanent: r.Permanent}
		if r.ParkedReason != nil {
			e.ParkedReason = *r.ParkedReason
		}
		if r.NextAttemptAt != nil {
			e.NextAttemptAt = *r.NextAttemptAt
		}
		if r.LeaseOwner != nil {
			e.LeaseOwner = *r.LeaseOwner
		}
		if r.LastError != nil {
			e.LastError = *r.LastError
		}
		out = append(out, e)
	}
	return out, nil
}

func (q Querier) LookupUnitFailure(ctx context.Context, job, unitKey string) (string, []byte, bool, error) {
	r, err := q.q.GetUnitFailure(ctx, ledgerdb.GetUnitFailureParams{Job: job, UnitKey: unitKey})
	if idemrt.PgNoRows(err) {
		return "", nil, false, nil
	}
	return r.State, r.PayloadHash, err == nil, err
}

func (q Querier) LookupUnitFailures(ctx context.Context, job string, unitKeys []string) (map[string]idemrt.UnitFailureState, error) {
	if some, err := q.q.HasUnitFailures(ctx, job); err != nil || !some {
		return nil, err
	}
	rs, err := q.q.LookupUnitFailures(ctx, ledgerdb.LookupUnitFailuresParams{Job: job, UnitKeys: unitKeys})
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	found := make(map[string]idemrt.UnitFailureState, len(rs))
	for _, r := range rs {
		found[r.UnitKey] = idemrt.UnitFailureState{State: r.State, Hash: r.PayloadHash}
	}
	return found, nil
}

func (q Querier) ClearUnitFailure(ctx context.Context, job, unitKey string) error {
	_, err := q.ForgetUnit(ctx, job, unitKey)
	return err
}

func (q Querier) RecordUnitFailure(ctx context.Context, f idemrt.UnitFailure, now time.Time) error {
	return q.q.RecordUnitFailure(ctx, ledgerdb.RecordUnitFailureParams{
		Job: f.Job, UnitKey: f.UnitKey, Payload: f.Payload, PayloadHash: f.Hash, LastError: f.LastError,
		Mark: f.Mark, JobVersion: f.JobVersion, FirstFailedAt: now, UpdatedAt: now,
	})
}

func (q Querier) SettleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (string, int32, error) {
	r, err := q.q.SettleUnitFailure(ctx, ledgerdb.SettleUnitFailureParams{MaxAttempts: maxAttempts, Job: job, UnitKey: unitKey})
	return r.State, r.Attempts, err
}

func (q Querier) RetryingUnits(ctx context.Context, job, after string, limit int32) ([]idemrt.UnitFailure, error) {
	rs, err := q.q.RetryingUnits(ctx, ledgerdb.RetryingUnitsParams{Job: job, After: after, RowLimit: limit})
	out := make([]idemrt.UnitFailure, 0, len(rs))
	for _, r := range rs {
		out = append(out, idemrt.UnitFailure{Job: job, UnitKey: r.UnitKey, Payload: r.Payload})
	}
	return out, err
}

func (q Querier) UnitFailures(ctx context.Context) ([]idem.ParkedUnit, error) {
	rs, err := q.q.ListUnitFailures(ctx)
	if err != nil {
		return nil, err
	}
	return parkedUnits(rs)
}

func (q Querier) ParkedPage(ctx context.Context, job, after string, limit int32) ([]idem.ParkedUnit, error) {
	rs, err := q.q.ParkedPage(ctx, ledgerdb.ParkedPageParams{Job: job, After: after, RowLimit: limit})
	if err != nil {
		return nil, err
	}
	return parkedUnits(rs)
}

// parkedUnits converts parked-table rows, read by ListUnitFailures or ParkedPage.
func parkedUnits[R ledgerdb.ListUnitFailuresRow | ledgerdb.ParkedPageRow](rs []R) (out []idem.ParkedUnit, err error) {
	out = make([]idem.ParkedUnit, 0, len(rs))
	for _, row := range rs {
		r := ledgerdb.ListUnitFailuresRow(row)
		out = append(out, idem.ParkedUnit{Job: r.Job, Key: r.UnitKey, Payload: r.Payload, Attempts: int(r.Attempts),
			LastError: r.LastError, State: r.State, Mark: r.Mark, JobVersion: int(r.JobVersion),
			FirstFailedAt: r.FirstFailedAt, UpdatedAt: r.UpdatedAt})
	}
	return out, err
}

func (q Querier) RetryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error) {
	n, err := q.q.RetryUnit(ctx, ledgerdb.RetryUnitParams{UpdatedAt: now, Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q Querier) RetryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error) {
	return q.q.RetryParkedUnits(ctx, ledgerdb.RetryParkedUnitsParams{UpdatedAt: now, Job: job})
}

// Backlog counts job's owed effects, parked effects and parked units, for
// an observer's gauge (idem.WithObserver).
func (q Querier) Backlog(ctx context.Context, job string) (owedEffects, parkedEffects, parkedUnits int64, err error) {
	r, err := q.q.CountBacklog(ctx, job)
	return r.OwedEffects, r.ParkedEffects, r.ParkedUnits, err
}

// The queries of recovery (idem.Retry, idem.RetryParked, idem.Forget).

func (q Querier) LockUnderKey(ctx context.Context, key string) (idemrt.Held, error) {
	var h idemrt.Held
	effects, err := q.q.LockEffect(ctx, key)
	if err != nil {
		return h, err
	}
	for _, r := range effects {
		h.Effects = append(h.Effects, heldEffect(r))
	}
	units, err := q.q.LockUnitFailures(ctx, key)
	if err != nil {
		return h, err
	}
	for _, r := range units {
		h.Units = append(h.Units, heldUnit(r))
	}
	seen, err := q.q.LockSeen(ctx, key)
	if err != nil {
		return h, err
	}
	for _, r := range seen {
		h.HandedIn = append(h.HandedIn, idemrt.HeldUnit{Job: r.Job, Key: r.UnitKey})
	}
	return h, nil
}

func (q Querier) LockParked(ctx context.Context, job string) (idemrt.Held, error) {
	var h idemrt.Held
	effects, err := q.q.LockParkedEffects(ctx, job)
	if err != nil {
		return h, err
	}
	for _, r := range effects {
		h.Effects = append(h.Effects, heldEffect(ledgerdb.LockEffectRow(r)))
	}
	units, err := q.q.LockParkedUnits(ctx, job)
	if err != nil {
		return h, err
	}
	for _, r := range units {
		h.Units = append(h.Units, heldUnit(ledgerdb.LockUnitFailuresRow(r)))
	}
	return h, nil
}

func heldUnit(r ledgerdb.LockUnitFailuresRow) idemrt.HeldUnit {
	return idemrt.HeldUnit{Job: r.Job, Key: r.UnitKey, State: r.State, Attempts: int(r.Attempts)}
}

func heldEffect(r ledgerdb.LockEffectRow) idemrt.HeldEffect {
	return idemrt.HeldEffect{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, State: idemrt.LedgerState(r.State), Attempts: int(r.Attempts),
		LeaseOwner: idemrt.ValueOr(r.LeaseOwner), LeaseUntil: idemrt.ValueOr(r.LeaseUntil)}
}

func (q Querier) RetryEffect(ctx context.Context, key string, now time.Time) (bool, error) {
	n, err := q.q.RetryEffect(ctx, ledgerdb.RetryEffectParams{UpdatedAt: now, EffectKey: key})
	return n == 1, err
}

func (q Querier) ForgetEffect(ctx context.Context, key string, leaseNow time.Time) (bool, error) {
	n, err := q.q.ForgetEffect(ctx, ledgerdb.ForgetEffectParams{EffectKey: key, LeaseNow: &leaseNow})
	return n == 1, err
}

func (q Querier) ForgetUnit(ctx context.Context, job, unitKey string) (bool, error) {
	n, err := q.q.ClearUnitFailure(ctx, ledgerdb.ClearUnitFailureParams{Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q Querier) ForgetHandedIn(ctx context.Context, job, unitKey string) (bool, error) {
	n, err := q.q.ForgetSeen(ctx, ledgerdb.ForgetSeenParams{Job: job, UnitKey: unitKey})
	return n == 1, err
}

// The queries of the fleet-wide limits (idemrt.LimitQuerier).

func (q Querier) EnsureLimitRows(ctx context.Context, job, effect string, slots []int32) error {
	return q.q.EnsureLimitRows(ctx, ledgerdb.EnsureLimitRowsParams{Job: job, Effect: effect, Slots: slots})
}

func (q Querier) TakeSlot(ctx context.Context, job, effect string, slots int32, owner string, now, until time.Time) (int32, bool, error) {
	got, err := q.q.TakeSlot(ctx, ledgerdb.TakeSlotParams{Owner: &owner, HeldUntil: &until, Job: job, Effect: effect, Slots: slots, Now: &now})
	if err != nil || len(got) == 0 {
		return 0, false, err
	}
	return got[0], true, nil
}

func (q Querier) FreeSlot(ctx context.Context, job, effect string, slot int32, owner string) error {
	return q.q.FreeSlot(ctx, ledgerdb.FreeSlotParams{Job: job, Effect: effect, Slot: slot, Owner: &owner})
}

func (q Querier) Pace(ctx context.Context, job, effect string) (time.Time, error) {
	t, err := q.q.GetPace(ctx, ledgerdb.GetPaceParams{Job: job, Effect: effect})
	return idemrt.ValueOr(t), err
}

func (q Querier) MovePace(ctx context.Context, job, effect string, seen, next time.Time) (bool, error) {
	n, err := q.q.MovePace(ctx, ledgerdb.MovePaceParams{Next: &next, Job: job, Effect: effect, Seen: &seen})
	return n == 1, err
}

// The queries of the effect's gate (idemrt.GateQuerier).

func (q Querier) Gate(ctx context.Context, job, effect string) (idemrt.EffectGate, bool, error) {
	r, err := q.q.GetGate(ctx, ledgerdb.GetGateParams{Job: job, Effect: effect})
	if idemrt.PgNoRows(err) {
		return idemrt.EffectGate{}, false, nil
	}
	if err != nil {
		return idemrt.EffectGate{}, false, err
	}
	return idemrt.EffectGate{State: idemrt.ValueOr(r.Gate), Until: idemrt.ValueOr(r.HeldUntil), Owner: idemrt.ValueOr(r.Owner),
		Failures: r.Failures, Opens: r.Opens, Since: idemrt.ValueOr(r.Since), Reason: idemrt.ValueOr(r.Reason)}, true, nil
}

func (q Querier) PauseGate(ctx context.Context, job, effect string, now, until time.Time, reason string) error {
	return q.q.PauseGate(ctx, ledgerdb.PauseGateParams{Now: &now, Until: &until, Reason: &reason, Job: job, Effect: effect})
}

func (q Querier) FailGate(ctx context.Context, job, effect string, threshold int32, now, openUntil time.Time, reason string) (string, time.Time, error) {
	r, err := q.q.FailGate(ctx, ledgerdb.FailGateParams{Threshold: threshold, Now: &now, OpenUntil: &openUntil, Reason: &reason, Job: job, Effect: effect})
	if idemrt.PgNoRows(err) {
		return idemrt.GateClosed, time.Time{}, nil
	}
	return idemrt.ValueOr(r.Gate), idemrt.ValueOr(r.HeldUntil), err
}

func (q Querier) TakeProbe(ctx context.Context, job, effect, owner string, now, until time.Time) (bool, error) {
	n, err := q.q.TakeProbe(ctx, ledgerdb.TakeProbeParams{Owner: &owner, HeldUntil: &until, Job: job, Effect: effect, Now: &now})
	return n == 1, err
}

func (q Querier) CloseGate(ctx context.Context, job, effect, owner string) (bool, error) {
	n, err := q.q.CloseGate(ctx, ledgerdb.CloseGateParams{Job: job, Effect: effect, Owner: &owner})
	return n == 1, err
}

func (q Querier) ReopenGate(ctx context.Context, job, effect, owner string, until time.Time, reason string) (bool, error) {
	n, err := q.q.ReopenGate(ctx, ledgerdb.ReopenGateParams{HeldUntil: &until, Reason: &reason, Job: job, Effect: effect, Owner: &owner})
	return n == 1, err
}

func (q Querier) ResetGateFailures(ctx context.Context, job, effect string) error {
	return q.q.ResetGateFailures(ctx, ledgerdb.ResetGateFailuresParams{Job: job, Effect: effect})
}

func (q Querier) LiftGate(ctx context.Context, job, effect string) (bool, error) {
	n, err := q.q.LiftGate(ctx, ledgerdb.LiftGateParams{Job: job, Effect: effect})
	return n == 1, err
}

// The queries of steering by hand (idemrt.SteerQuerier).

func (q Querier) SetLimitOverride(ctx context.Context, job, effect string, o idemrt.LimitOverride) error {
	var per *string
	if o.Rate.N > 0 {
		s := o.Rate.Per.String()
		per = &s
	}
	return q.q.SetLimitOverride(ctx, ledgerdb.SetLimitOverrideParams{Job: job, Effect: effect, SetBy: &o.By, Now: &o.Since,
		RateN: o.Rate.N, Concurrency: o.Concurrency, RatePer: per})
}

func (q Querier) ClearLimitOverride(ctx context.Context, job, effect string) (bool, error) {
	n, err := q.q.ClearLimitOverride(ctx, ledgerdb.ClearLimitOverrideParams{Job: job, Effect: effect})
	return n == 1, err
}

func (q Querier) PauseGateByHand(ctx context.Context, job, effect string, now, until time.Time, by, reason string) error {
	return q.q.PauseGateByHand(ctx, ledgerdb.PauseGateByHandParams{Job: job, Effect: effect, SetBy: &by, Until: &until, Now: &now, Reason: &reason})
}

func (q Querier) JobSteering(ctx context.Context, job string) (map[string]idemrt.Steering, error) {
	rows, err := q.q.ListSteering(ctx, job)
	if err != nil {
		return nil, err
	}
	out := map[string]idemrt.Steering{}
	for _, r := range rows {
		s := out[r.Effect]
		if r.Slot == idemrt.SteerSlotOverride {
			o, err := idemrt.ReadOverride(r.Failures, idemrt.ValueOr(r.Reason), r.Opens, idemrt.ValueOr(r.Owner), idemrt.ValueOr(r.Since))
			if err != nil {
				return nil, err
			}
			s.Override = &o
		} else {
			s.Gate = &idemrt.EffectGate{State: idemrt.ValueOr(r.Gate), Until: idemrt.ValueOr(r.HeldUntil), Owner: idemrt.ValueOr(r.Owner),
				Failures: r.Failures, Opens: r.Opens, Since: idemrt.ValueOr(r.Since), Reason: idemrt.ValueOr(r.Reason)}
		}
		out[r.Effect] = s
	}
	return out, nil
}

func (q Querier) ReleaseGateWaits(ctx context.Context, job, effect string, from, to time.Time) (int64, error) {
	return q.q.ReleaseGateWaits(ctx, ledgerdb.ReleaseGateWaitsParams{Job: job, Effect: effect, WaitFrom: &from, WaitTo: &to})
}
