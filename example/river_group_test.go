package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
)

// lockedBuffer is a log a worker's goroutines write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A worker writes the River jobs it has in hand together, in groups; a group
// with a unit at fault is rolled back and each of its jobs worked alone. Here
// 24 payments already processed come again with other amounts, queued in one
// InsertManyTx before the worker starts, so its 8 River workers take them
// together: every one is cancelled once (a mismatch, no retry), nothing new
// is written or receipted. Then 24 good payments, queued the same way, are
// each written and receipted once in groups.
func TestRiverGroupsFallBackToOneJob(t *testing.T) {
	db := newRiverDB(t)
	ctx := context.Background()
	prov := newKeyedProvider()
	var log lockedBuffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	hook, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	payment := func(prefix string, i int) billing.Payment {
		return billing.Payment{EventID: fmt.Sprint(prefix, i), InvoiceID: "inv-1", AmountCents: 100, PaidAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
	const n = 24
	var changed, good []billing.Payment
	for i := range n {
		p := payment("evt-changed-", i)
		if _, err := hook.Process(ctx, p); err != nil {
			t.Fatal(err)
		}
		p.AmountCents++
		changed = append(changed, p)
		good = append(good, payment("evt-good-", i))
	}

	c, _ := db.worker(t, "worker-1", prov, idem.WithLogger(logger))
	queue := func(units []billing.Payment) {
		t.Helper()
		tx, err := db.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := hook.InsertManyTx(ctx, c, tx, units...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	queue(changed)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	states := waitRiver(t, db, 30*time.Second)
	if states["cancelled"] != n || len(states) != 1 {
		t.Fatalf("River jobs %v; want the %d mismatches cancelled", states, n)
	}
	var retried, rows int
	if err := db.pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE attempt <> 1), (SELECT count(*) FROM payments) FROM river_job WHERE kind = $1",
		billing.PaymentWebhookArgs{}.Kind()).Scan(&retried, &rows); err != nil {
		t.Fatal(err)
	}
	if retried != 0 || rows != n {
		t.Fatalf("%d River jobs tried more than once, %d payments; want none retried, the %d first payments only", retried, rows, n)
	}
	if !strings.Contains(log.String(), "a group of River jobs was not written; each is worked alone") {
		t.Fatalf("no group of mismatches was rolled back and worked alone; the worker's log:\n%s", log.String())
	}

	queue(good)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		states = waitRiver(t, db, 30*time.Second)
		if states["completed"] == n && ledgerCount(t, db, idem.StatePending) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("River jobs %v, %d receipts owed; want %d completed, none owed", states, ledgerCount(t, db, idem.StatePending), n)
		}
	}
	for _, p := range append(changed, good...) {
		if calls, applied := prov.counts(billing.SendReceiptKey(p)); calls != 1 || applied != 1 {
			t.Errorf("payment %s: %d receipt calls, %d applied; want 1 each", p.EventID, calls, applied)
		}
	}
}
