package idemrt_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// The handed-in API as a payment endpoint meets it: everything that did not
// end applied or deduped comes back through err, not only the report.

// failures returns err's *idem.FailuresError, failing the test without one.
func failures(t *testing.T, err error) *idem.FailuresError {
	t.Helper()
	var fe *idem.FailuresError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v, want a *idem.FailuresError", err)
	}
	return fe
}

func TestProcessReturnsMismatchThroughErr(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, rc, ctx := billingtest.NewFixture(), billingtest.NewReceipts(), context.Background()
		hook := f.Hook(t, st, rc)
		p := f.Payment("evt_1", 500)
		if _, err := hook.Process(ctx, p); err != nil {
			t.Fatalf("first delivery: %v", err)
		}
		changed := p
		changed.AmountCents = 501
		rep, err := hook.Process(ctx, changed)
		billingtest.CheckFailures(t, "changed payload", rep, err, true)
		if !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("err = %v, want ErrPayloadMismatch", err)
		}
		if fe := failures(t, err); fe.Count != 1 || fe.Failures[0].Key != p.Key() || fe.Failures[0].Effect != "" {
			t.Fatalf("failures %+v, want the unit %q alone", fe.Failures, p.Key())
		}
	})
}

func TestProcessReturnsFailedAndParkedEffectsThroughErr(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, ctx := billingtest.NewFixture(), context.Background()
		flaky := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
			return nil, errors.New("mail server down")
		})
		p := f.Payment("evt_2", 700)
		rep, err := f.Hook(t, st, flaky).Process(ctx, p)
		billingtest.CheckFailures(t, "failing provider", rep, err, true)
		if !errors.Is(err, idem.ErrEffectFailed) || errors.Is(err, idem.ErrEffectParked) {
			t.Fatalf("err = %v, want ErrEffectFailed (retried later), not parked", err)
		}
		if fe := failures(t, err); fe.Failures[0].Effect != "send_receipt" || fe.Failures[0].Key != billing.SendReceiptKey(p) {
			t.Fatalf("failure %+v, want the send_receipt effect key", fe.Failures[0])
		}

		rc := billingtest.NewReceipts()
		rc.Decline = true
		q := f.Payment("evt_3", 800)
		rep, err = f.Hook(t, st, rc).Process(ctx, q)
		billingtest.CheckFailures(t, "declined", rep, err, true)
		if !errors.Is(err, idem.ErrEffectParked) || !errors.Is(err, idem.ErrPermanent) || !errors.Is(err, billingtest.ErrDeclined) {
			t.Fatalf("err = %v, want a parked, permanent decline", err)
		}
		// A replay reports the parked effect again without calling the provider.
		rep, err = f.Hook(t, st, rc).Process(ctx, q)
		billingtest.CheckFailures(t, "declined replay", rep, err, true)
		if !errors.Is(err, idem.ErrEffectParked) || !errors.Is(err, idem.ErrPermanent) || rc.Calls[billing.SendReceiptKey(q)] != 1 {
			t.Fatalf("replay: %v, %d calls; want parked, permanent, one call", err, rc.Calls[billing.SendReceiptKey(q)])
		}
	})
}

// An effect another worker holds is not a success: Process says busy.
func TestProcessReturnsBusyThroughErr(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, ctx := billingtest.NewFixture(), context.Background()
		entered, release := make(chan struct{}), make(chan struct{})
		slow := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
			close(entered)
			<-release
			return []byte("slow"), nil
		})
		p := f.Payment("evt_4", 900)
		a, b := f.Hook(t, st, slow, idem.WithOwner("worker-a")), f.Hook(t, st, billingtest.NewReceipts(), idem.WithOwner("worker-b"))
		done := make(chan error, 1)
		go func() {
			_, err := a.Process(ctx, p)
			done <- err
		}()
		<-entered
		rep, err := b.Process(ctx, p)
		close(release)
		billingtest.CheckFailures(t, "while another worker calls the provider", rep, err, true)
		if !errors.Is(err, idem.ErrBusy) || rep.Deduped != 1 || rep.EffectsBusy != 1 {
			t.Fatalf("%s, %v; want the unit deduped and its effect busy", rep, err)
		}
		if err := <-done; err != nil {
			t.Fatalf("worker a: %v", err)
		}
	})
}

// A unit whose key placeholder is empty is refused before anything is
// written or charged: "payments:event:" would be every such payment's key.
func TestProcessRefusesAnEmptyKey(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, rc, ctx := billingtest.NewFixture(), billingtest.NewReceipts(), context.Background()
		hook := f.Hook(t, st, rc)
		rep, err := hook.Process(ctx, f.Payment("", 100), f.Payment("evt_5", 200))
		billingtest.CheckFailures(t, "empty key", rep, err, true)
		if !errors.Is(err, idem.ErrEmptyKey) || rep.Inserted != 1 || rep.Failed != 1 {
			t.Fatalf("%s, %v; want the empty key refused and its neighbour inserted", rep, err)
		}
		if fe := failures(t, err); fe.Count != 1 || fe.Failures[0].Key != "payments:event:" {
			t.Fatalf("failures %+v", fe.Failures)
		}
		rows, err := hook.Rows(ctx)
		if err != nil || len(rows) != 1 || rows[0].EventID != "evt_5" {
			t.Fatalf("rows %+v, %v; want evt_5 alone", rows, err)
		}
		if len(rc.Calls) != 1 {
			t.Fatalf("provider calls %v, want evt_5's alone", rc.Calls)
		}
	})
}

// Every copy of a key returns the kept result, also a repeat in one call.
func TestDuplicateInOneCallReturnsTheKeptResult(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, rc, ctx := billingtest.NewFixture(), billingtest.NewReceipts(), context.Background()
		p := f.Payment("evt_6", 300)
		rep, err := f.Hook(t, st, rc).Process(ctx, p, p)
		if err != nil || rep.Inserted != 1 || rep.Deduped != 1 || len(rep.Units) != 2 {
			t.Fatalf("%s, %v", rep, err)
		}
		for i, ur := range rep.Units {
			if len(ur.Effects) != 1 || string(ur.Effects[0].Result) != "rcpt-evt_6" {
				t.Fatalf("copy %d: effects %+v, want the kept receipt", i, ur.Effects)
			}
		}
		if rc.Calls[billing.SendReceiptKey(p)] != 1 {
			t.Fatalf("provider calls %v, want one", rc.Calls)
		}
	})
}

// A worker whose lease ran out while it called the provider reports what
// the ledger kept (the result of the worker that took over), not its own.
func TestLateWorkerReportsTheLedgersOutcome(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, ctx := billingtest.NewFixture(), context.Background()
		entered, release := make(chan struct{}), make(chan struct{})
		stalled := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
			close(entered)
			<-release
			return []byte("late"), nil
		})
		p := f.Payment("evt_7", 400)
		type result struct {
			rep idem.Report
			err error
		}
		done := make(chan result, 1)
		late := f.Hook(t, st, stalled, idem.WithOwner("stalled"))
		go func() {
			rep, err := late.Process(ctx, p)
			done <- result{rep, err}
		}()
		<-entered
		f.Clock.Advance(3 * time.Minute) // past send_receipt's 2m lease
		taker := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
			return []byte("taken-over"), nil
		})
		if rep, err := f.Hook(t, st, taker, idem.WithOwner("taker")).Drain(ctx); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("take over: %s, %v", rep, err)
		}
		close(release)
		r := <-done
		if r.err != nil || len(r.rep.Units) != 1 || len(r.rep.Units[0].Effects) != 1 {
			t.Fatalf("late worker: %s, %v", r.rep, r.err)
		}
		if er := r.rep.Units[0].Effects[0]; er.Outcome != idem.EffectDeduped || string(er.Result) != "taken-over" {
			t.Fatalf("late worker reported %+v; want the ledger's deduped result \"taken-over\"", er)
		}
	})
}

// A SQLite handle whose DSN sets no busy timeout (busy_timeout 0: other
// drivers' default; this one waits 60 s unless told) still serves 8
// concurrent callers: the store sets what it needs on each connection.
func TestSQLiteWithoutBusyTimeoutServesConcurrentCallers(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "plain.db")
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := billing.NewSQLiteStore(db)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, rc := billingtest.NewFixture(), billingtest.NewReceipts()
	const callers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc},
				idem.WithClock(f.Clock.Now), idem.WithLogger(quiet), idem.WithOwner(fmt.Sprintf("caller-%d", c)))
			if err != nil {
				errs <- err
				return
			}
			for i := range each {
				// Callers overlap on half their keys, as redelivered webhooks do.
				if _, err := hook.Process(ctx, f.Payment(fmt.Sprintf("evt_%d", (c%2)*each+i), 100)); err != nil && !errors.Is(err, idem.ErrBusy) {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent caller: %v", err)
	}
	hook := f.Hook(t, st, rc)
	if _, err := hook.Drain(ctx); err != nil {
		t.Fatalf("drain: %v", err)
	}
	rows, err := hook.Rows(ctx)
	if err != nil || len(rows) != 2*each {
		t.Fatalf("%d rows, %v; want %d", len(rows), err, 2*each)
	}
	for key, n := range rc.Calls {
		if n != 1 {
			t.Fatalf("%s sent %d times", key, n)
		}
	}
}

// Reads through the store wait for another writer's lock as its writes do,
// on a handle whose DSN set no busy timeout: every read runs on a
// connection the store gave one, however many callers read at once and
// however many connections the pool keeps idle (none: each query opens one).
func TestSQLiteReadsWaitForAWriterWithoutBusyTimeout(t *testing.T) {
	for _, idle := range []int{0, 2} {
		t.Run(fmt.Sprintf("idle=%d", idle), func(t *testing.T) { readsWaitForAWriter(t, idle) })
	}
}

func readsWaitForAWriter(t *testing.T, idle int) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "plain.db")
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxIdleConns(idle)
	st := billing.NewSQLiteStore(db)
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, rc := billingtest.NewFixture(), billingtest.NewReceipts()
	hook := f.Hook(t, st, rc)
	if _, err := hook.Process(ctx, f.Payment("evt_read", 100)); err != nil {
		t.Fatal(err)
	}
	// Another process's writer holds the database exclusively for a while
	// (rollback journal: readers must wait for it).
	other, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	writer, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(ctx, "BEGIN EXCLUSIVE"); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := writer.ExecContext(ctx, "COMMIT")
		writer.Close()
		released <- err
	}()
	const readers, each = 8, 3
	var wg sync.WaitGroup
	errs := make(chan error, 2*readers*each)
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				if rows, err := hook.Rows(ctx); err != nil || len(rows) != 1 {
					errs <- fmt.Errorf("Rows: %d rows, %w", len(rows), err)
				}
				if entries, err := st.Ledger(ctx); err != nil || len(entries) != 1 {
					errs <- fmt.Errorf("Ledger: %d entries, %w", len(entries), err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-released; err != nil {
		t.Fatalf("writer: %v", err)
	}
	for err := range errs {
		t.Errorf("a read under the writer's lock: %v", err)
	}
}

// The effects' ledger read runs in the store's read transaction, which on
// SQLite takes no write lock: in WAL mode it goes through while another
// writer holds the lock, where a write transaction waits for it.
func TestSQLiteReadTransactionTakesNoWriteLock(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "wal.db")
	open := func() *sql.DB {
		db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	st := billing.NewSQLiteStore(open())
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f, rc := billingtest.NewFixture(), billingtest.NewReceipts()
	p := f.Payment("evt_wal", 100)
	if _, err := f.Hook(t, st, rc).Process(ctx, p); err != nil {
		t.Fatal(err)
	}
	writer, err := open().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = writer.ExecContext(ctx, "ROLLBACK") }() // the lock is all this test wanted
	rt, ok := st.Runtime().(interface {
		InReadTx(context.Context, func(idemrt.Querier) error) error
	})
	if !ok {
		t.Fatal("the SQLite store has no read transaction")
	}
	key := billing.SendReceiptKey(p)
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var rows map[string]idemrt.LedgerRow
	if err := rt.InReadTx(short, func(q idemrt.Querier) (err error) {
		rows, err = q.Effects(short, []string{key})
		return err
	}); err != nil || rows[key].State != idem.StateDone {
		t.Fatalf("read beside a writer: %v, %+v; want the done row at once", err, rows[key])
	}
	short, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := st.Runtime().InTx(short, func(idemrt.Querier) error { return nil }); err == nil {
		t.Fatal("a write transaction went through while another writer held the lock: the check above proves nothing")
	}
}

// Within retention every replay returns the kept result; after it (and
// Purge) the key is forgotten, ledger row and key record alike, and a
// replay is processed as new, as Powertools and Stripe do: the receipt is
// sent again for the payment the row holds. A replay with other data is a
// mismatch even then, since its insert_once row is still there: the answer,
// the receipt and the row never disagree.
func TestReplayAfterRetentionIsProcessedAsNew(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, rc, ctx := billingtest.NewFixture(), billingtest.NewReceipts(), context.Background()
		hook := f.Hook(t, st, rc)
		p := f.Payment("evt_8", 600)
		if _, err := hook.Process(ctx, p); err != nil {
			t.Fatal(err)
		}
		f.Clock.Advance(719 * time.Hour) // inside send_receipt's 720h
		if n, err := hook.Purge(ctx); err != nil || n != 0 {
			t.Fatalf("purge inside retention removed %d, %v", n, err)
		}
		rep, err := hook.Process(ctx, p)
		if err != nil || rep.Deduped != 1 || string(rep.Units[0].Effects[0].Result) != "rcpt-evt_8" {
			t.Fatalf("replay inside retention: %s %+v, %v", rep, rep.Units, err)
		}
		f.Clock.Advance(2 * time.Hour)
		if n, err := hook.Purge(ctx); err != nil || n != 2 {
			t.Fatalf("purge after retention removed %d, %v; want the ledger row and the key record", n, err)
		}
		receipts := func() int { return rc.Calls[billing.SendReceiptKey(p)] }
		// Forgotten, but the row is there: other data is a mismatch, every time.
		changed := p
		changed.AmountCents = 601
		for range 2 {
			rep, err = hook.Process(ctx, changed)
			if !errors.Is(err, idem.ErrPayloadMismatch) || rep.Mismatched != 1 || receipts() != 1 {
				t.Fatalf("changed replay after retention: %s, %v, %d receipts; want a mismatch and no receipt", rep, err, receipts())
			}
		}
		// The same payment is processed as new: its receipt is owed again.
		rep, err = hook.Process(ctx, p)
		if err != nil || rep.EffectsDone != 1 || receipts() != 2 {
			t.Fatalf("replay after retention: %s, %v, %d receipts; want it processed as new", rep, err, receipts())
		}
		if rep, err = hook.Process(ctx, p); err != nil || rep.Deduped != 1 || receipts() != 2 {
			t.Fatalf("and replayed again: %s, %v; want deduped", rep, err)
		}
		if rows, err := hook.Rows(ctx); err != nil || len(rows) != 1 || rows[0].AmountCents != 600 {
			t.Fatalf("rows %+v, %v; want the first payment's row, untouched", rows, err)
		}
	})
}

// Options that mean nothing for a job's source are refused, not ignored.
func TestOptionsThatMeanNothingAreRefused(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		_, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: billingtest.NewReceipts()}, idem.WithStart(f.Base))
		if err == nil {
			t.Fatal("WithStart on a job of handed-in units was accepted")
		}
		_, err = billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: billingtest.NewReceipts()}, idem.WithMaxPages(3))
		if err == nil {
			t.Fatal("WithMaxPages on a job of handed-in units was accepted")
		}
	})
}

// TestEffectConcurrencyBoundsEveryCallOfAJob: WithEffectConcurrency bounds
// the provider calls in flight across every call of one job value at once
// (a web handler's concurrent requests, River workers sharing the job),
// not per call.
func TestEffectConcurrencyBoundsEveryCallOfAJob(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f, ctx := billingtest.NewFixture(), context.Background()
		var (
			mu            sync.Mutex
			inFlight, top int
		)
		slow := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
			mu.Lock()
			inFlight++
			top = max(top, inFlight)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
			return []byte("ok"), nil
		})
		const bound = 2
		hook := f.Hook(t, st, slow, idem.WithEffectConcurrency(bound))
		var wg sync.WaitGroup
		for c := range 4 {
			wg.Go(func() {
				var batch []billing.Payment
				for i := range 4 {
					batch = append(batch, f.Payment(fmt.Sprintf("evt_%d_%d", c, i), 100))
				}
				if _, err := hook.Process(ctx, batch...); err != nil {
					t.Errorf("call %d: %v", c, err)
				}
			})
		}
		wg.Wait()
		if top > bound {
			t.Fatalf("%d provider calls in flight at once across four calls; the bound is %d", top, bound)
		}
		if top < bound {
			t.Fatalf("at most %d provider call in flight: the calls did not overlap, the test shows nothing", top)
		}
	})
}
