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

// boundedPool runs statements outside a transaction (Store.Auto) on a
// connection taken from the pool within the job's wait bound
// (idemrt.WaitBound): a wait past it is an *idem.WaitError, not a hang.
// The connection goes back to the pool when the statement (its rows, its
// row's Scan) is done, as the pool's own Query and QueryRow do.
type boundedPool struct{ pool *pgxpool.Pool }

func (b boundedPool) conn(ctx context.Context) (*pgxpool.Conn, error) {
	return idemrt.PgAcquire(ctx, b.pool)
}

func (b boundedPool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, err := b.conn(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	return c.Exec(ctx, sql, args...)
}

func (b boundedPool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, err := b.conn(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &releasingRows{Rows: rows, c: c}, nil
}

func (b boundedPool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c, err := b.conn(ctx)
	if err != nil {
		return errRow{err}
	}
	return releasingRow{row: c.QueryRow(ctx, sql, args...), c: c}
}

// LockBound is the statement a boundedStatement pipelines before the one
// it runs: its lock wait bound, for its transaction only.
const LockBound = "SELECT set_config('lock_timeout', $1, true)"

// boundedStatement runs one statement as its own transaction
// (Store.InStatement), in one round trip: the statement is pipelined
// behind LockBound with one Sync, so the two run in one implicit
// transaction that commits at the Sync, its lock waits bounded by bound as
// a transaction's BEGIN bounds them (idemrt.PgBegin). The connection,
// taken within the wait bound, goes back once the statement's results are
// read.
type boundedStatement struct {
	pool  *pgxpool.Pool
	bound time.Duration
}

// send pipelines the lock bound and sql; the caller reads sql's result
// from the batch, then closes it and releases the connection.
func (b boundedStatement) send(ctx context.Context, sql string, args []any) (*pgxpool.Conn, pgx.BatchResults, error) {
	c, err := idemrt.PgAcquire(ctx, b.pool)
	if err != nil {
		return nil, nil, err
	}
	batch := &pgx.Batch{}
	batch.Queue(LockBound, fmt.Sprint(b.bound.Milliseconds()))
	batch.Queue(sql, args...)
	br := c.SendBatch(ctx, batch)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		c.Release()
		return nil, nil, err
	}
	return c, br, nil
}

func (b boundedStatement) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c, br, err := b.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

func (b boundedStatement) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c, br, err := b.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		c.Release()
		return nil, err
	}
	return &releasingRows{Rows: rows, c: c, br: br}, nil
}

func (b boundedStatement) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := b.Query(ctx, sql, args...)
	if err != nil {
		return errRow{err}
	}
	return firstRow{rows}
}

// releasingRows gives its connection back once the rows are closed (or
// read to their end); a batch's rows (boundedStatement) first end the
// batch, reading its Sync, which commits, and an error there is the rows'
// Err.
type releasingRows struct {
	pgx.Rows
	c   *pgxpool.Conn
	br  pgx.BatchResults // nil outside a batch
	err error            // the rows' and the batch's, once closed
}

func (r *releasingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *releasingRows) Close() {
	r.Rows.Close()
	if r.c == nil {
		return
	}
	r.err = r.Rows.Err()
	if r.br != nil {
		if err := r.br.Close(); r.err == nil {
			r.err = err
		}
	}
	r.c.Release()
	r.c = nil
}

func (r *releasingRows) Err() error {
	if r.c == nil {
		return r.err
	}
	return r.Rows.Err()
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

// releasingRow gives its connection back once scanned.
type releasingRow struct {
	row pgx.Row
	c   *pgxpool.Conn
}

func (r releasingRow) Scan(dest ...any) error {
	defer r.c.Release()
	return r.row.Scan(dest...)
}
