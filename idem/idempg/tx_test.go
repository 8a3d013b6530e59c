package idempg

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The store's transactions (lazyTx) on a real PostgreSQL: the BEGIN goes
// with the first statement, and everything a transaction runs, that first
// statement included, commits or rolls back together, its lock waits
// bounded.

// txFixture is a schema with a table t(id, v) holding the row (1, 0), a
// pool whose statements are counted, and a second pool for what happens
// outside the transactions under test.
type txFixture struct {
	pool, outside *pgxpool.Pool
	sent          *atomic.Int64 // statements and batches the pool sent
}

func newTxFixture(t *testing.T) txFixture {
	t.Helper()
	ctx := context.Background()
	pg := idemtest.OpenPostgres(t)
	schema := pg.NewSchema(t)
	cfg := pg.Config(schema)
	sent := &atomic.Int64{}
	cfg.ConnConfig.Tracer = countingTracer{sent}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	outside, err := pgxpool.NewWithConfig(ctx, pg.Config(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(outside.Close)
	if _, err := outside.Exec(ctx, "CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL); INSERT INTO t VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	return txFixture{pool: pool, outside: outside, sent: sent}
}

// countingTracer counts the statements and batches a pool sends.
type countingTracer struct{ n *atomic.Int64 }

func (c countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (countingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (countingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (f txFixture) ids(t *testing.T) []int32 {
	t.Helper()
	rows, err := f.outside.Query(context.Background(), "SELECT id FROM t ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestATransactionThatRunsNothingSendsNothing(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	boom := errors.New("boom")
	if err := inTx(ctx, f.pool, func(*lazyTx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := inTx(ctx, f.pool, func(*lazyTx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("inTx returned %v, want the function's error", err)
	}
	if n := f.sent.Load(); n != 0 {
		t.Errorf("two transactions that ran no statement sent %d statements or batches, want none", n)
	}
}

// Each way a transaction's first statement can run (Exec, Query,
// QueryRow), followed by a second statement: both commit with the
// transaction, and neither is left when it rolls back. The first
// statement and its BEGIN are one round trip.
func TestTheFirstStatementCommitsAndRollsBackWithTheRest(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	boom := errors.New("boom")
	first := map[string]func(tx *lazyTx, id int32) error{
		"Exec": func(tx *lazyTx, id int32) error {
			_, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1, 0)", id)
			return err
		},
		"Query": func(tx *lazyTx, id int32) error {
			rows, err := tx.Query(ctx, "INSERT INTO t VALUES ($1, 0) RETURNING id", id)
			if err != nil {
				return err
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[int32])
			if err == nil && (len(got) != 1 || got[0] != id) {
				err = errors.New("the insert returned other rows")
			}
			return err
		},
		"QueryRow": func(tx *lazyTx, id int32) error {
			var got int32
			return tx.QueryRow(ctx, "INSERT INTO t VALUES ($1, 0) RETURNING id", id).Scan(&got)
		},
	}
	id := int32(10)
	for name, run := range first {
		for _, commit := range []bool{true, false} {
			id += 2
			before := f.sent.Load()
			err := inTx(ctx, f.pool, func(tx *lazyTx) error {
				if err := run(tx, id); err != nil {
					return err
				}
				if _, err := tx.Exec(ctx, "INSERT INTO t VALUES ($1, 0)", id+1); err != nil {
					return err
				}
				if !commit {
					return boom
				}
				return nil
			})
			if commit && err != nil || !commit && !errors.Is(err, boom) {
				t.Fatalf("%s, commit %v: inTx returned %v", name, commit, err)
			}
			const wantSent = 3 // the first statement's batch, the second, COMMIT or ROLLBACK
			if n := f.sent.Load() - before; n != wantSent {
				t.Errorf("%s, commit %v: %d round trips, want %d", name, commit, n, wantSent)
			}
			ids := f.ids(t)
			for _, want := range []int32{id, id + 1} {
				there := false
				for _, got := range ids {
					there = there || got == want
				}
				if there != commit {
					t.Errorf("%s, commit %v: row %d there: %v", name, commit, want, there)
				}
			}
		}
	}
}

// A first statement that waits on a row lock another transaction holds
// waits no longer than the transaction's bound (55P03, lock_timeout).
func TestTheFirstStatementsLockWaitIsBounded(t *testing.T) {
	f := newTxFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second) // a wait without the bound fails here
	defer cancel()
	holder, err := f.outside.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(context.Background()) }()
	if _, err := holder.Exec(ctx, "UPDATE t SET v = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	c, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	const bound = 200 * time.Millisecond
	tx := &lazyTx{c: c, bound: bound}
	began := time.Now()
	_, err = tx.Exec(ctx, "UPDATE t SET v = 2 WHERE id = 1")
	took := time.Since(began)
	tx.rollback(ctx)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("the first statement, on a row another transaction holds: %v, want a lock timeout (55P03)", err)
	}
	if took > 10*bound {
		t.Errorf("the first statement waited %s under a bound of %s", took, bound)
	}
}

// A transaction whose statement failed and whose function went on as if
// it had not commits nothing, and says so: pgx.ErrTxCommitRollback, as a
// pgx transaction would. Its connection goes back to the pool idle.
func TestACommitAfterAFailedStatementSaysItRolledBack(t *testing.T) {
	f := newTxFixture(t)
	ctx := context.Background()
	err := inTx(ctx, f.pool, func(tx *lazyTx) error {
		_, _ = tx.Exec(ctx, "INSERT INTO t VALUES (50, 0)")
		_, _ = tx.Exec(ctx, "INSERT INTO t VALUES (1, 0)") // there already: the transaction is aborted
		return nil
	})
	if !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("inTx after a failed statement returned %v, want pgx.ErrTxCommitRollback", err)
	}
	for _, got := range f.ids(t) {
		if got == 50 {
			t.Error("a transaction that rolled back left its first row")
		}
	}
	if err := inTx(ctx, f.pool, func(tx *lazyTx) error {
		_, err := tx.Exec(ctx, "INSERT INTO t VALUES (51, 0)")
		return err
	}); err != nil {
		t.Fatalf("the next transaction: %v", err)
	}
}
