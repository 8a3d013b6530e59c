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

// PgBegin begins a transaction on a connection of pool taken within ctx's
// wait bound (WaitBound; a *WaitError past it), whose every lock wait is
// bounded by it too (lock_timeout, set in the BEGIN's own round trip), for
// a caller that hands the pgx.Tx on (a River worker's group). The store's
// own transactions begin with their first statement (idempg's InTx).
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

// PgWaitError makes a lock wait that ran out of lock_timeout (bound) a
// *WaitError; any other error, a *WaitError already made included (a
// statement outside the transaction, idempg's Auto, makes its own), is
// returned as it is.
func PgWaitError(err error, bound time.Duration) error {
	if we := (*WaitError)(nil); errors.As(err, &we) {
		return err
	}
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
//
// The try costs three round trips more than the upsert alone, and a key
// already there two more: when the job's last batch met a key already
// there (a rerun, an overlapping window), the engine says so through ctx
// (skipInsertNew) and PgInsertNew returns nil, nil at once.
func PgInsertNew(ctx context.Context, db PgExecer, n int, insert func(ctx context.Context) error) ([]Outcome, error) {
	if skipInsertNew(ctx) {
		return nil, nil
	}
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

// skipInsertNewKey marks a batch write's context when the job's last
// batch met a row already there (Engine.write): PgInsertNew goes straight
// to the caller's upsert, whose outcomes say whether the next may try.
type skipInsertNewKey struct{}

func withSkipInsertNew(ctx context.Context, skip bool) context.Context {
	if !skip {
		return ctx
	}
	return context.WithValue(ctx, skipInsertNewKey{}, true)
}

func skipInsertNew(ctx context.Context) bool {
	skip, _ := ctx.Value(skipInsertNewKey{}).(bool)
	return skip
}
