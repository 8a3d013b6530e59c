package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The River worker's transaction under crashes: worker A parks for good at
// a crash point around the transaction that writes the unit and reserves
// its receipt, and its sessions are killed on the server (as if the process
// died); worker B, a new process, recovers. The River job is never
// completed in that transaction, so either way it is left running and River
// rescues it for B: before the commit nothing is durable and B writes the
// unit; after it, B's redelivery finds the unit written (nothing written
// again) and the receipt owed, and sends it. Either way: one payment row,
// one completed River job, the receipt applied once at the provider (a
// repeat only after the call, with the same key), nothing owed.
func TestRiverWorkerCrash(t *testing.T) {
	for _, tc := range []struct {
		point     idemtest.CrashPoint
		committed bool // the unit's transaction committed before the crash
		calls     int  // provider calls expected in all
	}{
		{idemtest.PointUnitStart, false, 1},
		{idemtest.PointUnitBeforeCommit, false, 1},
		{idemtest.PointUnitAfterCommit, true, 1},
		{idemtest.PointEffectClaimed, true, 1},
		{idemtest.PointEffectBeforeCall, true, 1},
		{idemtest.PointEffectAfterCall, true, 2},
		{idemtest.PointEffectRecorded, true, 1},
	} {
		t.Run(string(tc.point), func(t *testing.T) {
			t.Parallel()
			db := newRiverDB(t)
			ctx := context.Background()
			prov := newKeyedProvider()
			crashed := make(chan struct{})
			var once sync.Once
			hook := func(_ context.Context, p idemtest.CrashPoint, _ string) error {
				if p != tc.point {
					return nil
				}
				hit := false
				once.Do(func() { hit = true })
				if hit {
					close(crashed)
					select {} // parked for good: a dead process runs nothing more
				}
				return nil
			}
			nameA := "crash-a-" + db.schema
			a, _ := db.workerTimed(t, nameA, prov, dying(fastRiver(nameA, quiet)), idemtest.WithCrashHook(hook))
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			p := billing.Payment{EventID: "evt-crash", InvoiceID: "inv-1", AmountCents: 100, PaidAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			tx, err := db.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			hookB, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
			if err != nil {
				t.Fatal(err)
			}
			if err := hookB.InsertTx(ctx, a, tx, p); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-crashed:
			case <-time.After(20 * time.Second):
				t.Fatal("worker A never reached the crash point")
			}
			// The process is gone: River stops fetching for it, and the
			// server drops its sessions (open transactions abort).
			stop, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			_ = a.Stop(stop)
			cancel()
			if _, err := db.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", nameA); err != nil {
				t.Fatal(err)
			}
			var rows, ledger int
			if err := db.pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM payments), (SELECT count(*) FROM billing_idem_ledger)").Scan(&rows, &ledger); err != nil {
				t.Fatal(err)
			}
			states, err := riverJobStates(ctx, db.pool, billing.PaymentWebhookArgs{}.Kind())
			if err != nil {
				t.Fatal(err)
			}
			// Committed or not, A never returned from Work: the River job
			// is running, to be rescued.
			if rows != ledger || tc.committed != (rows == 1) || states["running"] != 1 {
				t.Fatalf("after the crash: %d payments, %d ledger rows, River %v; committed=%v", rows, ledger, states, tc.committed)
			}
			// B: a new process, once River would call A's job stuck. Its
			// lease clock is three minutes on, past A's 2m lease: the
			// database's time as it will be when B's drain finds it.
			time.Sleep(fastRiver("", nil).RescueAfter + 200*time.Millisecond)
			b, _ := db.worker(t, "crash-b-"+db.schema, prov, idemtest.WithLeaseClock(func() time.Time { return time.Now().Add(3 * time.Minute) }))
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = b.Stop(context.Background()) })
			deadline := time.Now().Add(40 * time.Second)
			for {
				states = waitRiver(t, db, 40*time.Second)
				if ledgerCount(t, db, idem.StatePending) == 0 && ledgerCount(t, db, idem.StateDone) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("receipt still owed: pending %d", ledgerCount(t, db, idem.StatePending))
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM payments").Scan(&rows); err != nil || rows != 1 {
				t.Fatalf("payments %d, %v; want 1", rows, err)
			}
			if states["completed"] != 1 || len(states) != 1 {
				t.Fatalf("River jobs %v; want one completed", states)
			}
			calls, applied := prov.counts(billing.SendReceiptKey(p))
			if calls != tc.calls || applied != 1 {
				t.Fatalf("provider: %d calls, %d applied; want %d calls, applied once", calls, applied, tc.calls)
			}
		})
	}
}
