package idempg

import (
	"context"

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

// releasingRows gives its connection back once the rows are closed (or
// read to their end).
type releasingRows struct {
	pgx.Rows
	c *pgxpool.Conn
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
	if r.c != nil {
		r.c.Release()
		r.c = nil
	}
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
