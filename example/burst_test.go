package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// A burst of one key: a client that retries a payment eight times in a
// second, a webhook provider that redelivers in a burst. Every caller must
// be answered within a bound, whatever the pool's size against the
// callers' count, and the provider is called once. These run on the
// database's own clock (no WithLeaseClock), where the pool deadlock lived:
// a transaction that read the clock on a second connection of its own
// pool while holding the key's row lock.

// burstBound is how long a whole burst may take; a hang fails the test
// here, with every caller's state, not at go test's timeout.
const burstBound = 30 * time.Second

// burstStores opens the store a burst runs on: SQLite, and PostgreSQL at
// each pool size (pool is nil on SQLite).
func burstStores(t *testing.T, fn func(t *testing.T, st *billing.Store, pool *pgxpool.Pool)) {
	t.Run("sqlite", func(t *testing.T) {
		st, closeDB, err := openSQLite(context.Background(), filepath.Join(t.TempDir(), "test.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeDB)
		fn(t, st, nil)
	})
	for _, conns := range []int32{1, 2, 4} {
		t.Run(fmt.Sprintf("postgres/pool=%d", conns), func(t *testing.T) {
			pg := idemtest.OpenPostgres(t)
			cfg := pg.Config(pg.NewSchema(t))
			cfg.MaxConns = conns
			st, pool, err := openPostgresConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			fn(t, st, pool)
		})
	}
}

// slowReceipts is a provider whose every call takes a while, so the burst's
// callers overlap the one that calls; it counts calls per key.
type slowReceipts struct {
	*receipts
	hold time.Duration
}

func (s slowReceipts) SendReceipt(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
	time.Sleep(s.hold)
	return s.receipts.SendReceipt(ctx, key, p)
}

// burst runs call n times at once and returns each caller's error; a
// caller still running after burstBound fails the test.
func burst(t *testing.T, n int, call func(ctx context.Context, i int) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), burstBound)
	defer cancel()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = call(ctx, i)
		})
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(burstBound + 5*time.Second):
		t.Fatalf("a burst of %d callers did not end within %s", n, burstBound)
	}
	for i, err := range errs {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("caller %d of %d waited out the burst's bound: %v", i, n, err)
		}
	}
	return errs
}

func TestBurstOfOneKeyProcess(t *testing.T) {
	for _, n := range []int{2, 8, 32} {
		t.Run(fmt.Sprintf("callers=%d", n), func(t *testing.T) {
			burstStores(t, func(t *testing.T, st *billing.Store, _ *pgxpool.Pool) {
				rc := slowReceipts{newReceipts(), 20 * time.Millisecond}
				hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				p := billing.Payment{EventID: "evt_burst", InvoiceID: "inv-burst", AmountCents: 1200, PaidAt: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)}
				errs := burst(t, n, func(ctx context.Context, _ int) error {
					_, err := hook.Process(ctx, p)
					return err
				})
				busy := 0
				for i, err := range errs {
					switch {
					case err == nil:
					case errors.Is(err, idem.ErrBusy):
						busy++
					default:
						t.Errorf("caller %d: %v; want applied, deduped or busy", i, err)
					}
				}
				if calls := rc.calls[billing.SendReceiptKey(p)]; calls != 1 {
					t.Fatalf("%d provider calls for one key, want 1 (%d callers, %d answered busy)", calls, n, busy)
				}
				if busy == n {
					t.Fatalf("every caller answered busy; one must have applied the effect")
				}
			})
		})
	}
}

// burstPayments are the keys a Drain burst owes effects for.
func burstPayments(n int) []billing.Payment {
	ps := make([]billing.Payment, n)
	for i := range ps {
		id := fmt.Sprintf("evt_owed_%d", i)
		ps[i] = billing.Payment{EventID: id, InvoiceID: "inv-" + id, AmountCents: int64(100 + i), PaidAt: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)}
	}
	return ps
}

// checkBurstAnswers fails on any caller's answer but done or busy.
func checkBurstAnswers(t *testing.T, errs []error) {
	t.Helper()
	for i, err := range errs {
		if err != nil && !errors.Is(err, idem.ErrBusy) {
			t.Errorf("caller %d: %v; want done or busy", i, err)
		}
	}
}

// A burst of Drain calls over the same owed effects: each is performed
// once, and every caller is answered within the bound.
func TestBurstOfDrains(t *testing.T) {
	for _, n := range []int{2, 8, 32} {
		t.Run(fmt.Sprintf("callers=%d", n), func(t *testing.T) {
			burstStores(t, func(t *testing.T, st *billing.Store, _ *pgxpool.Pool) {
				ctx := context.Background()
				ps := burstPayments(3)
				// A provider down at first leaves the effects owed, not
				// before the database's clock passes their backoff.
				down := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
					return nil, idem.RetryAfter(time.Millisecond, errors.New("provider: 503"))
				})
				first, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: down}, idem.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := first.Process(ctx, ps...); !errors.Is(err, idem.ErrWaiting) {
					t.Fatalf("first delivery with the provider down: %v; want the effects waiting", err)
				}
				time.Sleep(20 * time.Millisecond) // past the Retry-After
				rc := slowReceipts{newReceipts(), 20 * time.Millisecond}
				hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				checkBurstAnswers(t, burst(t, n, func(ctx context.Context, _ int) error {
					_, err := hook.Drain(ctx)
					return err
				}))
				for _, p := range ps {
					if calls := rc.calls[billing.SendReceiptKey(p)]; calls != 1 {
						t.Errorf("%s: %d provider calls after %d drains at once, want 1", p.EventID, calls, n)
					}
				}
			})
		})
	}
}

// A burst of one key handed in through the caller's own transactions, each
// holding one of the pool's connections while the job writes in it: the
// job must take no second connection of that pool.
func TestBurstOfOneKeyInCallersTransactions(t *testing.T) {
	for _, n := range []int{2, 8, 32} {
		t.Run(fmt.Sprintf("callers=%d", n), func(t *testing.T) {
			burstStores(t, func(t *testing.T, st *billing.Store, pool *pgxpool.Pool) {
				if pool == nil {
					t.Skip("the caller's transaction on SQLite is one writer at a time (ProcessSQLTx); the pool is PostgreSQL's")
				}
				rc := slowReceipts{newReceipts(), 20 * time.Millisecond}
				hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				p := burstPayments(1)[0]
				checkBurstAnswers(t, burst(t, n, func(ctx context.Context, _ int) error {
					tx, err := pool.Begin(ctx)
					if err != nil {
						return err
					}
					defer tx.Rollback(context.WithoutCancel(ctx))
					if _, err := hook.ProcessTx(ctx, tx, p); err != nil {
						return err
					}
					return tx.Commit(ctx)
				}))
				ctx, cancel := context.WithTimeout(context.Background(), burstBound)
				defer cancel()
				if _, err := hook.Drain(ctx); err != nil {
					t.Fatalf("drain after the burst: %v", err)
				}
				if calls := rc.calls[billing.SendReceiptKey(p)]; calls != 1 {
					t.Fatalf("%d provider calls for one key, want 1", calls)
				}
			})
		})
	}
}

// A burst of one key on River: eight producers enqueue the same payment at
// once, each in its own transaction on the worker's small pool (the
// generated InsertTx, unique by key), while that client works: every
// producer is answered within the bound, River keeps one job, the receipt
// is called once, and one payment row is written.
func TestBurstOfOneKeyOnRiver(t *testing.T) {
	for _, conns := range []int32{3, 4} {
		t.Run(fmt.Sprintf("pool=%d", conns), func(t *testing.T) {
			db := newRiverDB(t)
			ctx := context.Background()
			prov := newKeyedProvider()
			c, pool := db.workerConns(t, "burst-worker", prov, groupRiver("burst-worker"), conns)
			hook, err := billing.NewPaymentWebhook(billing.NewPostgresStore(pool), billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Stop(context.Background()) })
			p := groupPayment("evt-burst", 1200)
			checkBurstAnswers(t, burst(t, 8, func(ctx context.Context, _ int) error {
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				defer tx.Rollback(context.WithoutCancel(ctx))
				if err := hook.InsertTx(ctx, c, tx, p); err != nil {
					return err
				}
				return tx.Commit(ctx)
			}))
			states := waitRiver(t, db, burstBound)
			waitPerformed(t, db, burstBound)
			if states["completed"] != 1 || len(states) != 1 {
				t.Errorf("River jobs %v; want the one job, completed", states)
			}
			if calls, applied := prov.counts(billing.SendReceiptKey(p)); calls != 1 || applied != 1 {
				t.Errorf("%d receipt calls, %d applied; want 1 each", calls, applied)
			}
			var rows int
			if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != 1 {
				t.Errorf("%d payment rows; want 1", rows)
			}
		})
	}
}
