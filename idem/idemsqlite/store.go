// Package idemsqlite runs the idem runtime on SQLite through database/sql
// (any driver): a Store over a handle, and the ledger's queries (compiled
// by sqlc in internal/ledgerdb) on a generated package's tables. Times
// travel as fixed-width UTC text (idemrt.SQLiteTime), so text order is time
// order.
//
// A generated package builds its store with NewStore, passing its table
// names and a function that adds its destinations' queries to the ledger's (Querier):
//
//	st := idemsqlite.NewStore(db, billingTables, func(l idemsqlite.Querier) idemrt.Querier {
//		return sqliteQuerier{l, sqlitedb.New(l.DB())}
//	})
package idemsqlite

import (
	"cmp"
	"context"
	"database/sql"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemsqlite/internal/ledgerdb"
)

// DBTX is what the queries run on: a connection, or a transaction (sqlc's DBTX).
type DBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Store runs a package's queries on SQLite. It is an idem.Store; it also
// runs them in a caller's transaction (SQLTx, for ProcessSQLTx).
type Store struct {
	db      *sql.DB
	names   *idemrt.TableNames
	querier func(Querier) idemrt.Querier
}

// NewStore returns a store over db for the package whose tables t names.
// querier makes the package's querier from the ledger's (a package with no
// destination passes nil: the ledger's is all it needs).
func NewStore(db *sql.DB, t idemrt.Tables, querier func(Querier) idemrt.Querier) Store {
	if querier == nil {
		querier = func(l Querier) idemrt.Querier { return l }
	}
	return Store{db: db, names: idemrt.NewTableNames(t), querier: querier}
}

func (s Store) on(db DBTX) idemrt.Querier {
	return s.querier(Querier{q: ledgerdb.New(renamed{db, s.names}), db: db})
}

// InTx runs fn in a BEGIN IMMEDIATE transaction (idemrt.SQLiteInTx).
func (s Store) InTx(ctx context.Context, fn func(q idemrt.Querier) error) error {
	return idemrt.SQLiteInTx(ctx, s.db, func(tx *idemrt.SQLiteStatements) error { return fn(s.on(tx)) })
}

// InReadTx runs fn, which only reads, in a deferred transaction that
// takes no write lock (idemrt.SQLiteInReadTx).
func (s Store) InReadTx(ctx context.Context, fn func(q idemrt.Querier) error) error {
	return idemrt.SQLiteInReadTx(ctx, s.db, func(tx *idemrt.SQLiteStatements) error { return fn(s.on(tx)) })
}

// Auto runs each query on its own.
func (s Store) Auto() idemrt.Querier { return s.on(idemrt.SQLiteAuto{DB: s.db}) }

// DBNow reads the database's clock, which leases are compared on: on SQLite
// the clock of the machine that holds the file, whatever a job's WithClock says.
// Inside a transaction the engine reads it on the transaction's own
// connection (Querier.DBNow).
// Its connection is taken within the job's wait bound (idemrt.SQLiteAuto),
// as every other.
func (s Store) DBNow(ctx context.Context) (time.Time, error) {
	return dbNow(ctx, idemrt.SQLiteAuto{DB: s.db})
}

// dbNow reads the clock on db. It queries rows, not a row: a Row loses
// the error of a connection not taken in time (a *idemrt.WaitError) to a
// bare "context canceled".
func dbNow(ctx context.Context, db DBTX) (time.Time, error) {
	rows, err := db.QueryContext(ctx, "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')")
	if err != nil {
		return time.Time{}, err
	}
	defer rows.Close()
	var now string
	if !rows.Next() {
		return time.Time{}, cmp.Or(rows.Err(), sql.ErrNoRows)
	}
	if err := rows.Scan(&now); err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, now)
}

// SQLTx runs the queries in a transaction the caller owns (ProcessSQLTx);
// the statements it prepares close when that transaction ends.
func (s Store) SQLTx(tx *sql.Tx) idemrt.Querier { return s.on(idemrt.NewSQLiteStatements(tx)) }

// renamed runs the runtime's ledger queries on a package's own tables.
type renamed struct {
	db    DBTX
	names *idemrt.TableNames
}

func (r renamed) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	q, err := r.names.SQL(query)
	if err != nil {
		return nil, err
	}
	return r.db.ExecContext(ctx, q, args...)
}

func (r renamed) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	q, err := r.names.SQL(query)
	if err != nil {
		return nil, err
	}
	return r.db.PrepareContext(ctx, q)
}

func (r renamed) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	q, err := r.names.SQL(query)
	if err != nil {
		return nil, err
	}
	return r.db.QueryContext(ctx, q, args...)
}

// QueryRowContext cannot return an error of its own (a *sql.Row has no
// constructor): a bad table name reaches the caller as SQLite's error for
// a table named after it, "no such table: idem: the ledger table's name …".
func (r renamed) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	q, err := r.names.SQL(query)
	if err != nil {
		return r.db.QueryRowContext(ctx, `SELECT 1 FROM "`+strings.ReplaceAll(err.Error(), `"`, `""`)+`"`)
	}
	return r.db.QueryRowContext(ctx, q, args...)
}

// Querier runs the ledger's queries; it implements idemrt.Querier. A generated
// package embeds it in its own querier, which adds its destinations'
// queries run on DB.
type Querier struct {
	q  *ledgerdb.Queries
	db DBTX
}

// DB is what the ledger's queries run on (a connection or the
// transaction), for the package's own queries.
func (q Querier) DB() DBTX { return q.db }

// DBNow reads the database's clock on what the queries run on.
func (q Querier) DBNow(ctx context.Context) (time.Time, error) { return dbNow(ctx, q.db) }

func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

func nullTime(t time.Time) sql.NullString { return nullText(idemrt.SQLiteTime(t)) }

func (q Querier) Progress(ctx context.Context, job string) (idemrt.ProgressRow, error) {
	r, err := q.q.GetProgress(ctx, job)
	if idemrt.SQLiteNoRows(err) {
		return idemrt.ProgressRow{}, nil
	}
	if err != nil {
		return idemrt.ProgressRow{}, err
	}
	p := idemrt.ProgressRow{Found: true, Position: r.CursorPosition, Cursor: r.CursorToken.String}
	if r.Watermark.Valid {
		if p.Watermark, err = idemrt.ParseSQLiteTime(r.Watermark.String); err != nil {
			return idemrt.ProgressRow{}, err
		}
		p.HasMark = true
	}
	return p, nil
}

func (q Querier) SaveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error {
	return q.q.SaveWatermark(ctx, ledgerdb.SaveWatermarkParams{Job: job, Watermark: nullTime(mark), JobVersion: int64(jobVersion), UpdatedAt: idemrt.SQLiteTime(now)})
}

func (q Querier) SaveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error {
	return q.q.SaveCursor(ctx, ledgerdb.SaveCursorParams{Job: job, CursorToken: nullText(cursor), CursorPosition: position, JobVersion: int64(jobVersion), UpdatedAt: idemrt.SQLiteTime(now)})
}

// The batch methods run the single queries one by one: SQLite is in
// process, so a statement costs no round trip, only its execution.

func (q Querier) See(ctx context.Context, job string, unitKeys []string, hashes [][]byte, jobVersion int32, now time.Time) (map[string][]byte, error) {
	var seen map[string][]byte
	for i, k := range unitKeys {
		_, err := q.q.SeeUnit(ctx, ledgerdb.SeeUnitParams{Job: job, UnitKey: k, PayloadHash: hashes[i], JobVersion: int64(jobVersion), FirstSeen: idemrt.SQLiteTime(now)})
		if err == nil {
			continue
		}
		if !idemrt.SQLiteNoRows(err) {
			return nil, idemrt.SQLiteLockWait(ctx, err)
		}
		prev, err := q.q.SeenHash(ctx, ledgerdb.SeenHashParams{Job: job, UnitKey: k})
		if err != nil {
			return nil, err
		}
		if seen == nil {
			seen = map[string][]byte{}
		}
		seen[k] = prev
	}
	return seen, nil
}

func (q Querier) Reserve(ctx context.Context, r idemrt.Reservations, now time.Time) error {
	for i, k := range r.Keys {
		err := q.q.ReserveEffect(ctx, ledgerdb.ReserveEffectParams{
			EffectKey: k, Job: r.Job, Effect: r.Effect, EffectVersion: int64(r.EffectVersion), JobVersion: int64(r.JobVersion),
			UnitKey: r.UnitKeys[i], Payload: r.Payloads[i], CreatedAt: idemrt.SQLiteTime(now), UpdatedAt: idemrt.SQLiteTime(now),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (q Querier) ReserveLeased(ctx context.Context, r idemrt.Reservations, now time.Time, owner string, leaseUntil time.Time) (map[string]bool, error) {
	leased := make(map[string]bool, len(r.Keys))
	for i, k := range r.Keys {
		n, err := q.q.ReserveLeasedEffect(ctx, ledgerdb.ReserveLeasedEffectParams{
			EffectKey: k, Job: r.Job, Effect: r.Effect, EffectVersion: int64(r.EffectVersion), JobVersion: int64(r.JobVersion),
			UnitKey: r.UnitKeys[i], Payload: r.Payloads[i], LeaseOwner: nullText(owner), LeaseUntil: nullTime(leaseUntil),
			CreatedAt: idemrt.SQLiteTime(now), UpdatedAt: idemrt.SQLiteTime(now),
		})
		if err != nil {
			return nil, err
		}
		if n == 1 {
			leased[k] = true
		}
	}
	return leased, nil
}

func (q Querier) Decided(ctx context.Context, job, effect string, unitKeys []string, version int32) (map[string]bool, error) {
	var decided map[string]bool
	for _, k := range unitKeys {
		n, err := q.q.CountDecided(ctx, ledgerdb.CountDecidedParams{Job: job, Effect: effect, UnitKey: k, EffectVersion: int64(version)})
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if decided == nil {
				decided = map[string]bool{}
			}
			decided[k] = true
		}
	}
	return decided, nil
}

func (q Querier) claim(ctx context.Context, key, owner string, now, until time.Time) (bool, error) {
	n, err := q.q.ClaimEffect(ctx, ledgerdb.ClaimEffectParams{Owner: nullText(owner), LeaseUntil: nullTime(until), UpdatedAt: idemrt.SQLiteTime(now), EffectKey: key, Now: nullTime(now)})
	return n == 1, err
}

func (q Querier) complete(ctx context.Context, key, owner string, result []byte, now time.Time) (bool, error) {
	n, err := q.q.CompleteEffect(ctx, ledgerdb.CompleteEffectParams{Result: result, DoneAt: nullTime(now), UpdatedAt: idemrt.SQLiteTime(now), EffectKey: key, Owner: nullText(owner)})
	return n == 1, err
}

func (q Querier) ClaimMany(ctx context.Context, keys []string, owner string, now, until time.Time) (map[string]bool, error) {
	claimed := make(map[string]bool, len(keys))
	for _, k := range keys {
		ok, err := q.claim(ctx, k, owner, now, until)
		if err != nil {
			return nil, err
		}
		claimed[k] = ok
	}
	return claimed, nil
}

func (q Querier) CompleteMany(ctx context.Context, keys []string, results [][]byte, owner string, now time.Time) (map[string]bool, error) {
	done := make(map[string]bool, len(keys))
	for i, k := range keys {
		ok, err := q.complete(ctx, k, owner, results[i], now)
		if err != nil {
			return nil, err
		}
		done[k] = ok
	}
	return done, nil
}

func (q Querier) Release(ctx context.Context, r idemrt.Release) (string, error) {
	row, err := q.q.ReleaseEffect(ctx, ledgerdb.ReleaseEffectParams{MaxAttempts: int64(r.MaxAttempts), NotCounted: r.NotCounted, Permanent: r.Permanent,
		LastError: nullText(r.LastError), UpdatedAt: idemrt.SQLiteTime(r.Now), EffectKey: r.Key, Owner: nullText(r.Owner)})
	if idemrt.SQLiteNoRows(err) {
		return idem.StatePending, nil // the lease was taken over; the new holder decides
	}
	if state := idemrt.LedgerState(row.State); err != nil || state != idem.StatePending || r.NextAttempt == nil {
		return state, idemrt.SQLiteLockWait(ctx, err)
	}
	return idem.StatePending, q.q.DeferEffect(ctx, ledgerdb.DeferEffectParams{NextAttemptAt: nullTime(r.NextAttempt(int32(row.Attempts))), EffectKey: r.Key})
}

func (q Querier) Effect(ctx context.Context, key string) (idemrt.LedgerRow, bool, error) {
	r, err := q.q.GetEffect(ctx, key)
	if idemrt.SQLiteNoRows(err) {
		return idemrt.LedgerRow{}, false, nil
	}
	if err != nil {
		return idemrt.LedgerRow{}, false, err
	}
	row := idemrt.LedgerRow{Key: key, State: idemrt.LedgerState(r.State), Result: r.Result, LastError: r.LastError.String, Permanent: r.Permanent, ParkedReason: r.ParkedReason.String}
	if r.NextAttemptAt.Valid {
		row.NextAttemptAt = idemrt.ReadTime(r.NextAttemptAt.String, &err)
	}
	return row, err == nil, err
}

func (q Querier) Effects(ctx context.Context, keys []string) (map[string]idemrt.LedgerRow, error) {
	var found map[string]idemrt.LedgerRow
	for _, k := range keys {
		row, ok, err := q.Effect(ctx, k)
		if err != nil {
			return nil, err
		}
		if ok {
			if found == nil {
				found = map[string]idemrt.LedgerRow{}
			}
			found[k] = row
		}
	}
	return found, nil
}

func (q Querier) Pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]idemrt.LedgerRow, error) {
	rs, err := q.q.PendingEffects(ctx, ledgerdb.PendingEffectsParams{Job: job, Now: nullTime(now), After: after, RowLimit: int64(limit)})
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
	return q.q.PurgeEffects(ctx, ledgerdb.PurgeEffectsParams{Job: job, Effect: effect, Before: nullTime(before), RowLimit: int64(limit)})
}

func (q Querier) PurgeSeen(ctx context.Context, job string, before time.Time, limit int32) (int64, error) {
	return q.q.PurgeSeen(ctx, ledgerdb.PurgeSeenParams{Job: job, Before: idemrt.SQLiteTime(before), RowLimit: int64(limit)})
}

func (q Querier) Ledger(ctx context.Context) ([]idem.LedgerEntry, error) {
	return idemrt.ReadWholeLedger(ctx, q.LedgerPage)
}

func (q Querier) LedgerPage(ctx context.Context, after string, limit int32) ([]idem.LedgerEntry, error) {
	rs, err := q.q.LedgerPage(ctx, ledgerdb.LedgerPageParams{After: after, RowLimit: int64(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]idem.LedgerEntry, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.LedgerEntry{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, EffectVersion: int(r.EffectVersion),
			UnitKey: r.UnitKey, State: idemrt.LedgerState(r.State), Attempts: int(r.Attempts), Result: r.Result,
			LeaseOwner: r.LeaseOwner.String, LastError: r.LastError.String, Permanent: r.Permanent, ParkedReason: r.ParkedReason.String,
			NextAttemptAt: idemrt.ValueOr(idemrt.ReadNullTime(r.NextAttemptAt, &err))})
	}
	return out, err
}

func (q Querier) LookupUnitFailure(ctx context.Context, job, unitKey string) (string, []byte, bool, error) {
	r, err := q.q.GetUnitFailure(ctx, ledgerdb.GetUnitFailureParams{Job: job, UnitKey: unitKey})
	if idemrt.SQLiteNoRows(err) {
		return "", nil, false, nil
	}
	return r.State, r.PayloadHash, err == nil, err
}

func (q Querier) LookupUnitFailures(ctx context.Context, job string, unitKeys []string) (map[string]idemrt.UnitFailureState, error) {
	if some, err := q.q.HasUnitFailures(ctx, job); err != nil || !some {
		return nil, err
	}
	var found map[string]idemrt.UnitFailureState
	for _, k := range unitKeys {
		state, hash, ok, err := q.LookupUnitFailure(ctx, job, k)
		if err != nil {
			return nil, err
		}
		if ok {
			if found == nil {
				found = map[string]idemrt.UnitFailureState{}
			}
			found[k] = idemrt.UnitFailureState{State: state, Hash: hash}
		}
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
		Mark: idemrt.SQLNullTime(f.Mark), JobVersion: int64(f.JobVersion), FirstFailedAt: idemrt.SQLiteTime(now), UpdatedAt: idemrt.SQLiteTime(now),
	})
}

func (q Querier) SettleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (string, int32, error) {
	r, err := q.q.SettleUnitFailure(ctx, ledgerdb.SettleUnitFailureParams{MaxAttempts: int64(maxAttempts), Job: job, UnitKey: unitKey})
	return r.State, int32(r.Attempts), idemrt.SQLiteLockWait(ctx, err)
}

func (q Querier) RetryingUnits(ctx context.Context, job, after string, limit int32) ([]idemrt.UnitFailure, error) {
	rs, err := q.q.RetryingUnits(ctx, ledgerdb.RetryingUnitsParams{Job: job, After: after, RowLimit: int64(limit)})
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
	rs, err := q.q.ParkedPage(ctx, ledgerdb.ParkedPageParams{Job: job, After: after, RowLimit: int64(limit)})
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
			LastError: r.LastError, State: r.State, Mark: idemrt.ReadNullTime(r.Mark, &err), JobVersion: int(r.JobVersion),
			FirstFailedAt: idemrt.ReadTime(r.FirstFailedAt, &err), UpdatedAt: idemrt.ReadTime(r.UpdatedAt, &err)})
	}
	return out, err
}

func (q Querier) RetryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error) {
	n, err := q.q.RetryUnit(ctx, ledgerdb.RetryUnitParams{UpdatedAt: idemrt.SQLiteTime(now), Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q Querier) RetryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error) {
	return q.q.RetryParkedUnits(ctx, ledgerdb.RetryParkedUnitsParams{UpdatedAt: idemrt.SQLiteTime(now), Job: job})
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
		e, err := heldEffect(r)
		if err != nil {
			return h, err
		}
		h.Effects = append(h.Effects, e)
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
		e, err := heldEffect(ledgerdb.LockEffectRow(r))
		if err != nil {
			return h, err
		}
		h.Effects = append(h.Effects, e)
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

func heldEffect(r ledgerdb.LockEffectRow) (idemrt.HeldEffect, error) {
	var err error
	until := idemrt.ValueOr(idemrt.ReadNullTime(r.LeaseUntil, &err))
	return idemrt.HeldEffect{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, State: idemrt.LedgerState(r.State), Attempts: int(r.Attempts),
		LeaseOwner: r.LeaseOwner.String, LeaseUntil: until}, err
}

func (q Querier) RetryEffect(ctx context.Context, key string, now time.Time) (bool, error) {
	n, err := q.q.RetryEffect(ctx, ledgerdb.RetryEffectParams{UpdatedAt: idemrt.SQLiteTime(now), EffectKey: key})
	return n == 1, err
}

func (q Querier) ForgetEffect(ctx context.Context, key string, leaseNow time.Time) (bool, error) {
	n, err := q.q.ForgetEffect(ctx, ledgerdb.ForgetEffectParams{EffectKey: key, LeaseNow: nullTime(leaseNow)})
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

// EnsureLimitRows adds the rows one statement each: SQLite has no arrays,
// and its statements cost no round trip.
func (q Querier) EnsureLimitRows(ctx context.Context, job, effect string, slots []int32) error {
	for _, slot := range slots {
		var until sql.NullString
		if slot == idemrt.PaceSlot {
			until = nullTime(time.Unix(0, 0).UTC()) // the pacing row: the first call may start at once
		}
		if err := q.q.EnsureLimitSlot(ctx, ledgerdb.EnsureLimitSlotParams{Job: job, Effect: effect, Slot: int64(slot), HeldUntil: until}); err != nil {
			return err
		}
	}
	return nil
}

func (q Querier) TakeSlot(ctx context.Context, job, effect string, slots int32, owner string, now, until time.Time) (int32, bool, error) {
	got, err := q.q.TakeSlot(ctx, ledgerdb.TakeSlotParams{Owner: nullText(owner), HeldUntil: nullTime(until), Job: job, Effect: effect, Slots: int64(slots), Now: nullTime(now)})
	if err != nil || len(got) == 0 {
		return 0, false, idemrt.SQLiteLockWait(ctx, err)
	}
	return int32(got[0]), true, nil
}

func (q Querier) FreeSlot(ctx context.Context, job, effect string, slot int32, owner string) error {
	return q.q.FreeSlot(ctx, ledgerdb.FreeSlotParams{Job: job, Effect: effect, Slot: int64(slot), Owner: nullText(owner)})
}

func (q Querier) Pace(ctx context.Context, job, effect string) (time.Time, error) {
	s, err := q.q.GetPace(ctx, ledgerdb.GetPaceParams{Job: job, Effect: effect})
	if err != nil {
		return time.Time{}, err
	}
	return idemrt.ValueOr(idemrt.ReadNullTime(s, &err)), err
}

func (q Querier) MovePace(ctx context.Context, job, effect string, seen, next time.Time) (bool, error) {
	n, err := q.q.MovePace(ctx, ledgerdb.MovePaceParams{Next: nullTime(next), Job: job, Effect: effect, Seen: nullTime(seen)})
	return n == 1, err
}

// The queries of the effect's gate (idemrt.GateQuerier).

func (q Querier) Gate(ctx context.Context, job, effect string) (idemrt.EffectGate, bool, error) {
	r, err := q.q.GetGate(ctx, ledgerdb.GetGateParams{Job: job, Effect: effect})
	if idemrt.SQLiteNoRows(err) {
		return idemrt.EffectGate{}, false, nil
	}
	if err != nil {
		return idemrt.EffectGate{}, false, err
	}
	g := idemrt.EffectGate{State: r.Gate.String, Owner: r.Owner.String, Failures: int32(r.Failures), Opens: int32(r.Opens), Reason: r.Reason.String}
	g.Until = idemrt.ValueOr(idemrt.ReadNullTime(r.HeldUntil, &err))
	g.Since = idemrt.ValueOr(idemrt.ReadNullTime(r.Since, &err))
	return g, true, err
}

func (q Querier) PauseGate(ctx context.Context, job, effect string, now, until time.Time, reason string) error {
	return q.q.PauseGate(ctx, ledgerdb.PauseGateParams{Now: nullTime(now), Until: nullTime(until), Reason: nullText(reason), Job: job, Effect: effect})
}

func (q Querier) FailGate(ctx context.Context, job, effect string, threshold int32, now, openUntil time.Time, reason string) (string, time.Time, error) {
	r, err := q.q.FailGate(ctx, ledgerdb.FailGateParams{Threshold: int64(threshold), Now: nullTime(now), OpenUntil: nullTime(openUntil), Reason: nullText(reason), Job: job, Effect: effect})
	if idemrt.SQLiteNoRows(err) {
		return idemrt.GateClosed, time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, idemrt.SQLiteLockWait(ctx, err)
	}
	until := idemrt.ValueOr(idemrt.ReadNullTime(r.HeldUntil, &err))
	return r.Gate.String, until, err
}

func (q Querier) TakeProbe(ctx context.Context, job, effect, owner string, now, until time.Time) (bool, error) {
	n, err := q.q.TakeProbe(ctx, ledgerdb.TakeProbeParams{Owner: nullText(owner), HeldUntil: nullTime(until), Job: job, Effect: effect, Now: nullTime(now)})
	return n == 1, err
}

func (q Querier) CloseGate(ctx context.Context, job, effect, owner string) (bool, error) {
	n, err := q.q.CloseGate(ctx, ledgerdb.CloseGateParams{Job: job, Effect: effect, Owner: nullText(owner)})
	return n == 1, err
}

func (q Querier) ReopenGate(ctx context.Context, job, effect, owner string, until time.Time, reason string) (bool, error) {
	n, err := q.q.ReopenGate(ctx, ledgerdb.ReopenGateParams{HeldUntil: nullTime(until), Reason: nullText(reason), Job: job, Effect: effect, Owner: nullText(owner)})
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
	var per sql.NullString
	if o.Rate.N > 0 {
		per = nullText(o.Rate.Per.String())
	}
	return q.q.SetLimitOverride(ctx, ledgerdb.SetLimitOverrideParams{Job: job, Effect: effect, SetBy: nullText(o.By), Now: nullTime(o.Since),
		RateN: int64(o.Rate.N), Concurrency: int64(o.Concurrency), RatePer: per})
}

func (q Querier) ClearLimitOverride(ctx context.Context, job, effect string) (bool, error) {
	n, err := q.q.ClearLimitOverride(ctx, ledgerdb.ClearLimitOverrideParams{Job: job, Effect: effect})
	return n == 1, err
}

func (q Querier) PauseGateByHand(ctx context.Context, job, effect string, now, until time.Time, by, reason string) error {
	return q.q.PauseGateByHand(ctx, ledgerdb.PauseGateByHandParams{Job: job, Effect: effect, SetBy: nullText(by), Until: nullTime(until), Now: nullTime(now), Reason: nullText(reason)})
}

func (q Querier) JobSteering(ctx context.Context, job string) (map[string]idemrt.Steering, error) {
	rows, err := q.q.ListSteering(ctx, job)
	if err != nil {
		return nil, err
	}
	out := map[string]idemrt.Steering{}
	for _, r := range rows {
		s := out[r.Effect]
		since := idemrt.ValueOr(idemrt.ReadNullTime(r.Since, &err))
		if r.Slot == idemrt.SteerSlotOverride {
			o, oerr := idemrt.ReadOverride(int32(r.Failures), r.Reason.String, int32(r.Opens), r.Owner.String, since)
			if oerr != nil {
				return nil, oerr
			}
			s.Override = &o
		} else {
			s.Gate = &idemrt.EffectGate{State: r.Gate.String, Until: idemrt.ValueOr(idemrt.ReadNullTime(r.HeldUntil, &err)), Owner: r.Owner.String,
				Failures: int32(r.Failures), Opens: int32(r.Opens), Since: since, Reason: r.Reason.String}
		}
		if err != nil {
			return nil, err
		}
		out[r.Effect] = s
	}
	return out, nil
}

func (q Querier) ReleaseGateWaits(ctx context.Context, job, effect string, from, to time.Time) (int64, error) {
	return q.q.ReleaseGateWaits(ctx, ledgerdb.ReleaseGateWaitsParams{Job: job, Effect: effect, WaitFrom: nullTime(from), WaitTo: nullTime(to)})
}
