package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// riverDB is a PostgreSQL schema of its own with the billing and River
// migrations applied; each worker opens its own pool on it.
type riverDB struct {
	pg     *idemtest.Postgres
	schema string
	pool   *pgxpool.Pool // the test's own handle
	store  *billing.Store
}

func newRiverDB(t *testing.T) riverDB {
	t.Helper()
	pg := idemtest.OpenPostgres(t)
	schema := pg.NewSchema(t)
	ctx := context.Background()
	st, pool, err := openPostgresConfig(ctx, pg.Config(schema))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := migrateRiver(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return riverDB{pg: pg, schema: schema, pool: pool, store: st}
}

// worker opens a pool of its own (application_name names it, so a test can
// kill its sessions) and a River client working the payment webhook.
func (db riverDB) worker(t *testing.T, name string, provider billing.SendReceipt, opts ...idem.Option) (*river.Client[pgxTx], *pgxpool.Pool) {
	t.Helper()
	return db.workerTimed(t, name, provider, fastRiver(name, quiet), opts...)
}

// dying is River's timing tm for a worker that a test parks at a crash
// point and then stops, as if its process died: its jobs do not time out
// before the test has stopped it (a dead process retries nothing itself,
// however long the test takes under load); the next worker rescues them on
// its own timing.
func dying(tm riverTiming) riverTiming {
	tm.JobTimeout, tm.RescueAfter = time.Minute, time.Minute
	return tm
}

// workerTimed is worker with River's timing tm (more workers, say).
func (db riverDB) workerTimed(t *testing.T, name string, provider billing.SendReceipt, tm riverTiming, opts ...idem.Option) (*river.Client[pgxTx], *pgxpool.Pool) {
	t.Helper()
	return db.workerConns(t, name, provider, tm, 0, opts...)
}

// workerConns is workerTimed on a pool of conns connections (0: pgxpool's
// default).
func (db riverDB) workerConns(t *testing.T, name string, provider billing.SendReceipt, tm riverTiming, conns int32, opts ...idem.Option) (*river.Client[pgxTx], *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	cfg := db.pg.Config(db.schema)
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	if conns > 0 {
		cfg.MaxConns = conns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// After the client's Stop (cleanups run last first). A worker
		// parked for good at a crash point never gives its connection
		// back, and Close waits for every one: bounded.
		closed := make(chan struct{})
		go func() { pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(2 * time.Second):
		}
	})
	hook, err := billing.NewPaymentWebhook(billing.NewPostgresStore(pool), billing.PaymentWebhookEffects{SendReceipt: provider},
		append([]idem.Option{idem.WithLogger(quiet), idem.WithOwner(name)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	client, err := newRiverClient(pool, billing.RiverJobs{PaymentWebhook: hook}, tm)
	if err != nil {
		t.Fatal(err)
	}
	return client, pool
}

// keyedProvider is the outside receipt service: it honours the idempotency
// key (a repeat returns the first answer and applies nothing) and counts
// every call and every application per key, and which worker made it.
type keyedProvider struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
	decline map[string]bool // refuse these event ids for good
}

func newKeyedProvider() *keyedProvider {
	return &keyedProvider{calls: map[string]int{}, applied: map[string]int{}, decline: map[string]bool{}}
}

func (p *keyedProvider) SendReceipt(_ context.Context, key string, u billing.Payment) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[key]++
	if p.decline[u.EventID] {
		return nil, idem.Permanent(errDeclined)
	}
	if p.applied[key] == 0 {
		p.applied[key] = 1
	}
	return []byte("rcpt-" + u.EventID), nil
}

func (p *keyedProvider) counts(key string) (calls, applied int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key], p.applied[key]
}

// waitRiver waits until no billing.payment_webhook job is left to work.
func waitRiver(t *testing.T, db riverDB, within time.Duration) map[string]int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		states, err := riverJobStates(context.Background(), db.pool, billing.PaymentWebhookArgs{}.Kind())
		if err != nil {
			t.Fatal(err)
		}
		if states["available"]+states["running"]+states["retryable"]+states["scheduled"]+states["pending"] == 0 {
			return states
		}
		if time.Now().After(deadline) {
			t.Fatalf("River jobs still open after %s: %v", within, states)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitPerformed waits until no effect is owed.
func waitPerformed(t *testing.T, db riverDB, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ledgerCount(t, db, idem.StatePending) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("effects still owed after %s", within)
		}
	}
}

// ledgerCount counts the billing ledger's rows stored in state (idemrt.StoredParked for parked rows).
func ledgerCount(t *testing.T, db riverDB, state string) int {
	t.Helper()
	var n int
	if err := db.pool.QueryRow(context.Background(), "SELECT count(*) FROM billing_idem_ledger WHERE state = $1", state).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Two workers share handed-in payments enqueued in the caller's
// transactions; every payment is written once and receipted once, every
// River job completes; a rolled-back enqueue leaves nothing; a copy is
// skipped, a changed copy is refused, an empty key is refused, a declined
// receipt is parked without River retrying it.
func TestRiverWorkersShareTheLoad(t *testing.T) {
	db := newRiverDB(t)
	ctx := context.Background()
	prov := newKeyedProvider()
	prov.decline["evt-declined"] = true
	var clients []*river.Client[pgxTx]
	for _, name := range []string{"worker-1", "worker-2"} {
		c, _ := db.worker(t, name, prov)
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	t.Cleanup(func() {
		for _, c := range clients {
			stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = c.Stop(stop)
			cancel()
		}
	})
	hook, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	pay := func(id string, cents int64) billing.Payment {
		return billing.Payment{EventID: id, InvoiceID: "inv-" + id, AmountCents: cents, PaidAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
	enqueue := func(commit bool, ps ...billing.Payment) error {
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		for _, p := range ps {
			if _, err := tx.Exec(ctx, "INSERT INTO orders (id) VALUES ($1) ON CONFLICT DO NOTHING", p.EventID); err != nil {
				t.Fatal(err)
			}
		}
		if err := hook.InsertTx(ctx, clients[0], tx, ps...); err != nil {
			return err
		}
		if commit {
			return tx.Commit(ctx)
		}
		return nil
	}
	var all []billing.Payment
	for i := range 30 {
		all = append(all, pay(fmt.Sprintf("evt-%02d", i), int64(100+i)))
	}
	all = append(all, pay("evt-declined", 1))
	if err := enqueue(false, pay("evt-rolled-back", 1)); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(true, all...); err != nil {
		t.Fatal(err)
	}
	if err := enqueue(true, all[0]); err != nil { // a copy: skipped by River's uniqueness
		t.Fatalf("same unit again: %v", err)
	}
	changed := all[1]
	changed.AmountCents++
	if err := enqueue(true, changed); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("changed copy: %v, want ErrPayloadMismatch", err)
	}
	if err := enqueue(true, pay("", 1)); !errors.Is(err, idem.ErrEmptyKey) {
		t.Fatalf("empty key: %v, want ErrEmptyKey", err)
	}
	states := waitRiver(t, db, 30*time.Second)
	if states["completed"] != len(all) || len(states) != 1 {
		t.Fatalf("River jobs %v, want %d completed", states, len(all))
	}
	waitPerformed(t, db, 30*time.Second)
	for _, p := range all {
		calls, applied := prov.counts(billing.SendReceiptKey(p))
		want := 1
		if p.EventID == "evt-declined" {
			want = 0
		}
		if calls != 1 || applied != want {
			t.Errorf("%s: %d calls, %d applied; want one call", p.EventID, calls, applied)
		}
	}
	var rows, orders int
	if err := db.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT event_id) FROM payments").Scan(&rows, &orders); err != nil || rows != len(all) || orders != rows {
		t.Fatalf("payments: %d rows, %d keys, %v; want %d", rows, orders, err, len(all))
	}
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&orders); err != nil || orders != len(all) {
		t.Fatalf("orders: %d, %v; want %d (the rolled-back one gone)", orders, err, len(all))
	}
	if n := ledgerCount(t, db, idem.StatePending); n != 0 {
		t.Errorf("%d effects still owed", n)
	}
	if n := ledgerCount(t, db, idemrt.StoredParked); n != 1 {
		t.Errorf("%d parked effects, want the declined one", n)
	}
	var byWorker = map[string]int{}
	r, err := db.pool.Query(ctx, "SELECT attempted_by[array_length(attempted_by, 1)], count(*) FROM river_job WHERE kind = $1 GROUP BY 1", billing.PaymentWebhookArgs{}.Kind())
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var w string
		var n int
		if err := r.Scan(&w, &n); err != nil {
			t.Fatal(err)
		}
		byWorker[w] = n
	}
	t.Logf("River jobs by worker: %v", byWorker)
}

// A unit River hands a worker whose key was already processed with another
// payload (here by a direct Process) is a mismatch: the River job is
// cancelled, not retried.
func TestRiverCancelsAMismatch(t *testing.T) {
	db := newRiverDB(t)
	ctx := context.Background()
	prov := newKeyedProvider()
	c, _ := db.worker(t, "worker-1", prov)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	hook, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	p := billing.Payment{EventID: "evt-1", InvoiceID: "inv-1", AmountCents: 100, PaidAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	if _, err := hook.Process(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.AmountCents++
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := hook.InsertTx(ctx, c, tx, p); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	states := waitRiver(t, db, 20*time.Second)
	if states["cancelled"] != 1 || len(states) != 1 {
		t.Fatalf("River jobs %v, want the mismatch cancelled", states)
	}
	var attempts int
	if err := db.pool.QueryRow(ctx, "SELECT attempt FROM river_job WHERE kind = $1", billing.PaymentWebhookArgs{}.Kind()).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("attempts %d, %v; want 1 (no retry)", attempts, err)
	}
}

type pgxTx = pgx.Tx

// The example's River mode, as docs/example.md shows it.
func TestExampleRiverMode(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; River runs on PostgreSQL only")
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-postgres", url, "-river"}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		"River payment jobs: map[completed:20]",
		"receipts: 20 of 20 payments sent, 20 of them exactly once",
		"invoice_sync (periodic): 4 invoices, notifier 4 calls, 4 emails sent",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := run(context.Background(), []string{"-river"}, &out); err == nil {
		t.Error("-river without -postgres was accepted")
	}
}
