package idempg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// inTx runs fn in a READ COMMITTED transaction (lazyTx) on a connection
// of pool taken within ctx's wait bound: the unique constraints and ON
// CONFLICT clauses, not isolation, are what keep writes idempotent. A row
// lock waited for past the bound fails with a *idem.WaitError (ErrBusy).
// The connection goes back to the pool once the transaction ends.
func inTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx *lazyTx) error) error {
	bound := idemrt.WaitBound(ctx)
	c, err := idemrt.PgAcquire(ctx, pool)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer c.Release() // a connection still in a transaction is closed, not pooled
	tx := &lazyTx{c: c, bound: bound}
	if err := fn(tx); err != nil {
		tx.rollback(context.WithoutCancel(ctx))
		return idemrt.PgWaitError(err, bound)
	}
	if err := tx.commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lazyTx is a transaction whose BEGIN waits for its first statement and
// goes in that statement's round trip: BEGIN, the lock bound
// (LockBound, local to the transaction) and the statement are pipelined
// with one Sync. The Sync does not end the transaction, as it ends a
// boundedStatement's: the BEGIN opened a block that lasts until the
// COMMIT. A transaction whose work runs no statement costs no round trip
// at all. Every transaction of Store.InTx is one: the BEGIN used to be a
// round trip of its own (spec-space seed 38, spec 7's PostgreSQL matrix:
// 12,813 of about 213,000, and 2,745 transactions that ran nothing).
//
//	BEGIN
//	SELECT set_config('lock_timeout', '500', true)
//	<first statement>            -- Sync: the three in one round trip
//	<the other statements>       -- one round trip each, as before
//	commit
type lazyTx struct {
	c     *pgxpool.Conn
	bound time.Duration
	begun bool // BEGIN was sent
}

// Conn is the transaction's connection (preparedExec prepares on it).
func (t *lazyTx) Conn() *pgx.Conn { return t.c.Conn() }

// begin sends BEGIN and the lock bound ahead of sql, and reads their
// results; the caller reads sql's, then closes the batch.
func (t *lazyTx) begin(ctx context.Context, sql string, args []any) (pgx.BatchResults, error) {
	t.begun = true
	return sendBehindLockBound(ctx, t.c, true, t.bound, sql, args)
}

func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.begun {
		return t.c.Exec(ctx, sql, args...)
	}
	br, err := t.begin(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		return t.c.Query(ctx, sql, args...)
	}
	br, err := t.begin(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br, bound: t.bound}, nil
}

func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if t.begun {
		return t.c.QueryRow(ctx, sql, args...)
	}
	rows, err := t.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return firstRow{rows}
}

// commit commits what the transaction ran, as pgx's Tx.Commit does: a
// transaction an error aborted answers ROLLBACK, pgx.ErrTxCommitRollback.
func (t *lazyTx) commit(ctx context.Context) error {
	if !t.begun {
		return nil
	}
	tag, err := t.c.Exec(ctx, "commit")
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// rollback rolls back what the transaction ran. Its error is not the
// caller's: a connection left inside the transaction is closed when it
// is released.
func (t *lazyTx) rollback(ctx context.Context) {
	if t.begun {
		_, _ = t.c.Exec(ctx, "rollback")
	}
}
