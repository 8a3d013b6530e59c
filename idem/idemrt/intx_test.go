package idemrt_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// callerDB is the test's own handle on the store's database, as a web
// handler would hold it: it opens transactions and runs its own SQL.
type callerDB struct {
	store *billing.Store
	// begin opens a caller transaction.
	begin func(t *testing.T) callerTx
	// count runs a SELECT count(*) outside any transaction.
	count func(t *testing.T, query string) int
	// open returns another store on the same database, as another process would.
	open func(t *testing.T) *billing.Store
}

// callerTx is one caller transaction in either dialect.
type callerTx struct {
	exec     func(query string) error
	process  func(hook *billing.PaymentWebhook, units ...billing.Payment) (idem.Report, error)
	commit   func() error
	rollback func()
}

// eachCallerDB runs fn on SQLite and, with IDEMGEN_TEST_POSTGRES, on
// PostgreSQL in a schema of its own.
func eachCallerDB(t *testing.T, fn func(t *testing.T, db callerDB)) {
	ctx := context.Background()
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "test.db")
		st, closeDB, err := billingtest.OpenSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeDB)
		// _txlock=immediate: the caller's transactions take the write lock
		// up front, as the store's own do, so concurrent writers queue.
		raw, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		fn(t, callerDB{
			store: st,
			begin: func(t *testing.T) callerTx {
				tx, err := raw.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				return callerTx{
					exec: func(q string) error { _, err := tx.ExecContext(ctx, q); return err },
					process: func(h *billing.PaymentWebhook, units ...billing.Payment) (idem.Report, error) {
						return h.ProcessSQLTx(ctx, tx, units...)
					},
					commit:   tx.Commit,
					rollback: func() { _ = tx.Rollback() },
				}
			},
			count: func(t *testing.T, q string) int {
				var n int
				if err := raw.QueryRowContext(ctx, q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			},
			open: func(t *testing.T) *billing.Store {
				st, closeDB, err := billingtest.OpenSQLite(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(closeDB)
				return st
			},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := idemtest.OpenPostgres(t)
		schema := pg.NewSchema(t)
		st, pool, err := billingtest.OpenPostgres(ctx, pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		fn(t, callerDB{
			store: st,
			begin: func(t *testing.T) callerTx {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return callerTx{
					exec: func(q string) error { _, err := tx.Exec(ctx, q); return err },
					process: func(h *billing.PaymentWebhook, units ...billing.Payment) (idem.Report, error) {
						return h.ProcessTx(ctx, tx, units...)
					},
					commit:   func() error { return tx.Commit(ctx) },
					rollback: func() { _ = tx.Rollback(ctx) },
				}
			},
			count: func(t *testing.T, q string) int {
				var n int
				if err := pool.QueryRow(ctx, q).Scan(&n); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
				return n
			},
			open: func(t *testing.T) *billing.Store {
				st, p, err := billingtest.OpenPostgres(ctx, pg.Config(schema))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(p.Close)
				return st
			},
		})
	})
}

// The outbox: a handler writes its own row and hands a unit in, in one
// transaction it owns. Rolled back, nothing of either remains and nothing
// is owed; committed, both are there and Drain sends the receipt once.
func TestProcessTxCommitsOrRollsBackWithTheCaller(t *testing.T) {
	eachCallerDB(t, func(t *testing.T, db callerDB) {
		f, ctx := billingtest.NewFixture(), context.Background()
		rc := billingtest.NewReceipts()
		hook := f.Hook(t, db.store, rc)
		setup := db.begin(t)
		if err := setup.exec("CREATE TABLE orders (id TEXT PRIMARY KEY)"); err != nil {
			t.Fatal(err)
		}
		if err := setup.commit(); err != nil {
			t.Fatal(err)
		}
		owed := func() int {
			return db.count(t, "SELECT count(*) FROM billing_idem_ledger WHERE state = 'pending'")
		}

		// Rolled back: the caller's row, the unit and its reservation all go.
		lost := f.Payment("evt_rb", 100)
		tx := db.begin(t)
		if err := tx.exec("INSERT INTO orders (id) VALUES ('ord-rb')"); err != nil {
			t.Fatal(err)
		}
		rep, err := tx.process(hook, lost)
		if err != nil || rep.Inserted != 1 || rep.EffectsDone != 0 {
			t.Fatalf("process in tx: %s, %v; want inserted, nothing performed", rep, err)
		}
		tx.rollback()
		if n := db.count(t, "SELECT count(*) FROM orders"); n != 0 {
			t.Fatalf("rolled back: %d orders", n)
		}
		if n := db.count(t, "SELECT count(*) FROM payments"); n != 0 {
			t.Fatalf("rolled back: %d payments", n)
		}
		if n := owed(); n != 0 {
			t.Fatalf("rolled back: %d effects owed", n)
		}
		if rep, err := hook.Drain(ctx); err != nil || rep.EffectsDone != 0 || len(rc.Calls) != 0 {
			t.Fatalf("drain after rollback: %s, %v, calls %v", rep, err, rc.Calls)
		}

		// Committed: both rows, one owed receipt, which Drain sends once.
		kept := f.Payment("evt_ok", 200)
		tx = db.begin(t)
		if err := tx.exec("INSERT INTO orders (id) VALUES ('ord-ok')"); err != nil {
			t.Fatal(err)
		}
		if rep, err := tx.process(hook, kept); err != nil || rep.Inserted != 1 {
			t.Fatalf("process in tx: %s, %v", rep, err)
		}
		if len(rc.Calls) != 0 {
			t.Fatalf("provider called before the caller committed: %v", rc.Calls)
		}
		if err := tx.commit(); err != nil {
			t.Fatal(err)
		}
		if n := db.count(t, "SELECT count(*) FROM orders"); n != 1 {
			t.Fatalf("committed: %d orders", n)
		}
		if n := owed(); n != 1 {
			t.Fatalf("committed: %d effects owed, want 1", n)
		}
		for range 2 {
			if _, err := hook.Drain(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := rc.Calls[billing.SendReceiptKey(kept)]; n != 1 || len(rc.Calls) != 1 {
			t.Fatalf("receipts after two drains: %v; want one for %s", rc.Calls, kept.EventID)
		}
		if n := owed(); n != 0 {
			t.Fatalf("after drain: %d effects owed", n)
		}

		// The same unit again in a new transaction is a dedupe; a changed
		// payload is a loud mismatch, and the caller rolls back.
		tx = db.begin(t)
		if rep, err := tx.process(hook, kept); err != nil || rep.Deduped != 1 {
			t.Fatalf("replay in tx: %s, %v", rep, err)
		}
		tx.rollback()
		changed := kept
		changed.AmountCents++
		tx = db.begin(t)
		rep, err = tx.process(hook, changed)
		tx.rollback()
		if fe := failures(t, err); len(fe.Failures) != 1 || rep.Mismatched != 1 {
			t.Fatalf("changed payload in tx: %s, %v", rep, err)
		}
	})
}
