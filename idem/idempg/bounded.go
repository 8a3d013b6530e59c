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

// LockBound is the statement a boundedStatement pipelines before the one
// it runs: its lock wait bound, for its transaction only.
const LockBound = "SELECT set_config('lock_timeout', $1, true)"

// boundedStatement runs one statement as its own transaction, in one
// round trip: the statement is pipelined behind LockBound with one Sync,
// so the two run in one implicit transaction that commits at the Sync.
// Every wait is bounded, as a transaction's are (idemrt.PgBegin): the
// connection is taken from the pool within the wait bound, and a lock
// wait past it fails with a *idem.WaitError (ErrBusy); the bound is ctx's
// (idemrt.WaitBound). The connection goes back once the statement's
// results are read.
//
// Store.InStatement runs its one write this way, and Store.Auto every
// statement outside a transaction: a purge's delete, a watermark's save or
// a call slot's update that meets a row another transaction holds (a
// person's forget, a stalled worker's batch) answers busy within the
// bound instead of waiting as long as the holder holds.
type boundedStatement struct{ pool *pgxpool.Pool }

// send pipelines the lock bound and sql; the caller reads sql's result
// from the batch, then closes it and releases the connection.
func (b boundedStatement) send(ctx context.Context, bound time.Duration, sql string, args []any) (*pgxpool.Conn, pgx.BatchResults, error) {
	c, err := idemrt.PgAcquire(ctx, b.pool)
	if err != nil {
		return nil, nil, err
	}
	br, err := sendBehindLockBound(ctx, c, false, bound, sql, args)
	if err != nil {
		c.Release()
		return nil, nil, err
	}
	return c, br, nil
}

// sendBehindLockBound sends sql on c behind its lock bound (LockBound),
// and behind a BEGIN first when begin is set (a transaction's first
// statement, lazyTx), all pipelined with one Sync: one round trip. It
// reads the results before sql's; the caller reads sql's, then closes the
// batch.
func sendBehindLockBound(ctx context.Context, c *pgxpool.Conn, begin bool, bound time.Duration, sql string, args []any) (pgx.BatchResults, error) {
	batch := &pgx.Batch{}
	if begin {
		batch.Queue("BEGIN")
	}
	batch.Queue(LockBound, fmt.Sprint(bound.Milliseconds()))
	batch.Queue(sql, args...)
	br := c.SendBatch(ctx, batch)
	for range batch.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (b boundedStatement) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	bound := idemrt.WaitBound(ctx)
	c, br, err := b.send(ctx, bound, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, idemrt.PgWaitError(err, bound)
}

func (b boundedStatement) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	bound := idemrt.WaitBound(ctx)
	c, br, err := b.send(ctx, bound, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		c.Release()
		return nil, idemrt.PgWaitError(err, bound)
	}
	return &batchRows{Rows: rows, br: br, bound: bound, done: c.Release}, nil
}

func (b boundedStatement) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := b.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return firstRow{rows}
}

// batchRows are the rows of a batch's last statement. Once they are
// closed (or read to their end) the batch is ended, its Sync read, which
// commits a one-statement transaction; then done runs (nil: nothing): a
// boundedStatement gives its connection back. An error there is the rows'
// Err, a lock wait past bound a *idem.WaitError.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	bound  time.Duration
	done   func()
	closed bool
	err    error // the rows' and the batch's, once closed
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	r.Rows.Close()
	if r.closed {
		return
	}
	r.closed = true
	r.err = r.Rows.Err()
	if err := r.br.Close(); r.err == nil {
		r.err = err
	}
	r.err = idemrt.PgWaitError(r.err, r.bound)
	if r.done != nil {
		r.done()
	}
}

func (r *batchRows) Err() error {
	if r.closed {
		return r.err
	}
	return idemrt.PgWaitError(r.Rows.Err(), r.bound)
}

// firstRow is the first of rows, as pgx's QueryRow answers it:
// pgx.ErrNoRows when there is none.
type firstRow struct{ rows pgx.Rows }

func (r firstRow) Scan(dest ...any) error {
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
