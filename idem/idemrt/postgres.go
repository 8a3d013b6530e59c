package idemrt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PgInTx runs fn in a READ COMMITTED transaction: the unique constraints
// and ON CONFLICT clauses, not isolation, are what keep writes idempotent.
// Its waits are bounded as PgBegin's are; a row lock waited for past the
// bound fails with a *WaitError (ErrBusy).
func PgInTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	tx, err := PgBegin(ctx, pool)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return pgWaitError(err, WaitBound(ctx))
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// PgBegin begins a transaction on a connection of pool taken within ctx's
// wait bound (WaitBound; a *WaitError past it), whose every lock wait is
// bounded by it too (lock_timeout, set in the BEGIN's own round trip).
// The connection goes back to the pool when the transaction commits or
// rolls back.
func PgBegin(ctx context.Context, pool *pgxpool.Pool) (pgx.Tx, error) {
	bound := WaitBound(ctx)
	conn, err := PgAcquire(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: fmt.Sprintf("BEGIN; SET LOCAL lock_timeout = %d", bound.Milliseconds())})
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("begin: %w", err)
	}
	return &pgPoolTx{Tx: tx, conn: conn}, nil
}

// PgAcquire takes a connection of pool within ctx's wait bound
// (WaitBound): a wait past it is a *WaitError naming the pool.
func PgAcquire(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Conn, error) {
	return boundedAcquire(ctx, fmt.Sprintf("the pool (all %d in use)", pool.Config().MaxConns), pool.Acquire)
}

// pgPoolTx is a transaction that gives its connection back to the pool
// once it ends.
type pgPoolTx struct {
	pgx.Tx
	conn *pgxpool.Conn
}

func (t *pgPoolTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.release()
	return err
}

func (t *pgPoolTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.release()
	return err
}

func (t *pgPoolTx) release() {
	if t.conn != nil {
		t.conn.Release()
		t.conn = nil
	}
}

// pgWaitError makes a lock wait that ran out of lock_timeout a *WaitError.
func pgWaitError(err error, bound time.Duration) error {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgLockNotAvailable {
		return &WaitError{What: "a row lock another transaction holds", Bound: bound, Err: err}
	}
	return err
}

// pgLockNotAvailable is PostgreSQL's SQLSTATE for a lock_timeout.
const pgLockNotAvailable = "55P03"

// PgExecer runs a statement: a pgx transaction, connection or pool.
type PgExecer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PgInsertNew is a batch write's first try, for the common case of keys
// all new (a first run, fresh data): insert runs a plain insert of the
// batch, with no conflict check and nothing returned, which costs the
// server a good deal less than the guarded upsert. It runs under a
// savepoint: when a key is there already (a unique violation), the insert
// is rolled back and PgInsertNew returns nil, nil, and the caller runs its
// upsert. When every row went in, the n outcomes are all inserted.
func PgInsertNew(ctx context.Context, db PgExecer, n int, insert func(ctx context.Context) error) ([]Outcome, error) {
	if _, err := db.Exec(ctx, "SAVEPOINT idemgen_insert_new"); err != nil {
		return nil, err
	}
	err := insert(ctx)
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == pgUniqueViolation {
		_, err = db.Exec(ctx, "ROLLBACK TO SAVEPOINT idemgen_insert_new")
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, "RELEASE SAVEPOINT idemgen_insert_new"); err != nil {
		return nil, err
	}
	out := make([]Outcome, n)
	for i := range out {
		out[i] = OutcomeInserted
	}
	return out, nil
}

// pgUniqueViolation is PostgreSQL's SQLSTATE for a duplicate key.
const pgUniqueViolation = "23505"

// PgNoRows reports the "no row" result of a :one query, which for an upsert
// means "nothing written", not an error.
func PgNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// ValueOr is *p, or T's zero value for nil: the element a batch write puts
// in a column's array where the parallel NULL array says true.
func ValueOr[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// BatchOutcomes maps what a batch write returned (key to "inserted",
// "updated" or "unchanged") back onto its keys, in order; a key with no row
// back was left alone by the conflict clause, which is nothing.
func BatchOutcomes(keys []string, written map[string]string, nothing Outcome) []Outcome {
	out := make([]Outcome, len(keys))
	for i, k := range keys {
		out[i] = nothing
		if w, ok := written[k]; ok {
			out[i] = Outcome(w)
		}
	}
	return out
}

// PgInStatement runs fn, which runs exactly one statement on the
// PgStatement it is given, as that statement's own transaction, in one
// round trip: the statement is pipelined behind its lock bound
// (set_config of lock_timeout, local to the transaction) with one Sync,
// so the two run in one implicit transaction that commits at the Sync.
// Its waits are bounded as PgBegin's are; a row lock waited for past the
// bound fails with a *WaitError (ErrBusy). A BEGIN and a COMMIT of their
// own (PgInTx) would cost two more round trips for the same guarantee.
func PgInStatement(ctx context.Context, pool *pgxpool.Pool, fn func(db PgStatement) error) error {
	bound := WaitBound(ctx)
	return pgWaitError(fn(PgStatement{pool: pool, bound: bound}), bound)
}

// PgStatement runs one statement as its own bounded transaction
// (PgInStatement), on a connection of the pool taken within the wait
// bound; the connection goes back once the statement's results are read.
type PgStatement struct {
	pool  *pgxpool.Pool
	bound time.Duration
}

// PgLockBound is the statement pipelined before the one a PgStatement
// runs: its lock wait bound, for its transaction only.
const PgLockBound = "SELECT set_config('lock_timeout', $1, true)"

// send pipelines the lock bound and sql; the caller reads sql's result
// from the batch, then closes it and releases the connection.
func (s PgStatement) send(ctx context.Context, sql string, args []any) (*pgxpool.Conn, pgx.BatchResults, error) {
	conn, err := PgAcquire(ctx, s.pool)
	if err != nil {
		return nil, nil, err
	}
	b := &pgx.Batch{}
	b.Queue(PgLockBound, fmt.Sprint(s.bound.Milliseconds()))
	b.Queue(sql, args...)
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		conn.Release()
		return nil, nil, err
	}
	return conn, br, nil
}

func (s PgStatement) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	conn, br, err := s.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer conn.Release()
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (s PgStatement) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	conn, br, err := s.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		conn.Release()
		return nil, err
	}
	return &pgStatementRows{Rows: rows, br: br, conn: conn}, nil
}

func (s PgStatement) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := s.Query(ctx, sql, args...)
	if err != nil {
		return pgErrRow{err}
	}
	return pgStatementRow{rows}
}

// pgStatementRows ends the batch (reading its Sync, which commits) and
// gives the connection back once the rows are closed or read to their
// end; an error the commit reports is the rows' Err.
type pgStatementRows struct {
	pgx.Rows
	br   pgx.BatchResults
	conn *pgxpool.Conn
	err  error
}

func (r *pgStatementRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *pgStatementRows) Close() {
	r.Rows.Close()
	if r.conn == nil {
		return
	}
	r.err = r.Rows.Err()
	if err := r.br.Close(); r.err == nil {
		r.err = err
	}
	r.conn.Release()
	r.conn = nil
}

func (r *pgStatementRows) Err() error {
	if r.conn == nil {
		return r.err
	}
	return r.Rows.Err()
}

// pgStatementRow is the first row of a PgStatement's query, as pgx's
// QueryRow: pgx.ErrNoRows when there is none.
type pgStatementRow struct{ rows pgx.Rows }

func (r pgStatementRow) Scan(dest ...any) error {
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// pgErrRow is a row whose Scan fails with err.
type pgErrRow struct{ err error }

func (r pgErrRow) Scan(...any) error { return r.err }
