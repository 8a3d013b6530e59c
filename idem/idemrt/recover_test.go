package idemrt_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// Recovery from code: a parked effect put back with Store.Retry is
// performed once by the next Drain, with its attempts counted afresh; a
// done or leased row refuses Retry; Forget refuses a leased row and
// removes the rest, after which a redelivery is processed as new. The CLI
// runs the same code (cmd/idemgen's ledger tests).
func TestStoreRetriesAndForgetsFromCode(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		f.Mailer.Bounce = true
		j := f.Job(t, st)
		if rep := billingtest.RunChecked(t, j); rep.EffectsParked != 1 {
			t.Fatalf("first run: %s; want the notice parked", rep)
		}
		key := ledgerKey(t, st)

		f.Mailer.Bounce = false
		changes, err := st.Retry(ctx, "", key)
		if err != nil || len(changes) != 1 || changes[0] != (idem.Change{Kind: idem.KindEffect, Job: "invoice_sync", Effect: "notify_new_invoice", Key: key, State: idem.StateParked, Attempts: 1}) {
			t.Fatalf("Retry: %+v, %v; want the parked effect put back", changes, err)
		}
		row := ledgerRow(t, st, key)
		if row.State != idem.StatePending || row.Attempts != 0 || row.Permanent || row.ParkedReason != "" || !row.NextAttemptAt.IsZero() {
			t.Fatalf("after Retry: %+v; want pending as a fresh reservation (no attempts, reason or wait)", row)
		}
		if rep, err := j.Drain(ctx); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("drain after Retry: %s, %v", rep, err)
		}
		if rep, err := j.Drain(ctx); err != nil || rep.EffectsDone != 0 {
			t.Fatalf("second drain: %s, %v", rep, err)
		}
		if calls, applied := f.Mailer.Totals(); calls != 2 || applied != 1 {
			t.Fatalf("provider: %d calls, %d applied; want the bounce and one notice", calls, applied)
		}
		if _, err := st.Retry(ctx, "invoice_sync", key); !isRefused(err, "not parked but done") {
			t.Fatalf("Retry of a done effect: %v; want refused", err)
		}
		if _, err := st.Retry(ctx, "", "billing:nothing"); !errors.Is(err, idem.ErrNothingUnderKey) {
			t.Fatalf("Retry of an unknown key: %v", err)
		}
		if _, err := st.Forget(ctx, "other_job", key); !errors.Is(err, idem.ErrNothingUnderKey) {
			t.Fatalf("Forget in another job: %v; want nothing under the key there", err)
		}

		// A worker's live lease refuses both, and nothing changes.
		now, err := idemrt.StoreNow(ctx, st.Runtime())
		if err != nil {
			t.Fatal(err)
		}
		leaseRow(t, st, key, now)
		if _, err := st.Forget(ctx, "", key); !isRefused(err, "is leased by worker w-1") {
			t.Fatalf("Forget of a leased effect: %v; want refused", err)
		}
		if _, err := st.Retry(ctx, "", key); !isRefused(err, "is leased by worker w-1") {
			t.Fatalf("Retry of a leased effect: %v; want refused", err)
		}
		if row := ledgerRow(t, st, key); row.LeaseOwner != "w-1" {
			t.Fatalf("a refused call changed the row: %+v", row)
		}
	})
}

// Forget of a done effect removes its row, and only its row: the effect is
// owed again only when a write decides it again, which a backfill of the
// unchanged unit does not (the notice is sent on insert).
func TestStoreForgetRemovesOnlyTheRow(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		j := f.Job(t, st)
		if rep := billingtest.RunChecked(t, j); rep.EffectsDone != 1 {
			t.Fatalf("first run: %s", rep)
		}
		key := ledgerKey(t, st)
		changes, err := st.Forget(ctx, "", key)
		if err != nil || len(changes) != 1 || changes[0].Kind != idem.KindEffect || changes[0].State != idem.StateDone {
			t.Fatalf("Forget: %+v, %v; want the done row removed", changes, err)
		}
		if entries, err := st.Ledger(ctx); err != nil || len(entries) != 0 {
			t.Fatalf("ledger after Forget: %+v, %v", entries, err)
		}
		if _, err := j.Backfill(ctx, idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Base}); err != nil {
			t.Fatalf("backfill: %v", err)
		}
		if calls, applied := f.Mailer.Totals(); calls != 1 || applied != 1 {
			t.Fatalf("provider: %d calls, %d applied; want no notice again: nothing decided it", calls, applied)
		}
		if entries, err := st.Ledger(ctx); err != nil || len(entries) != 0 {
			t.Fatalf("ledger after the backfill: %+v, %v; want still empty", entries, err)
		}
	})
}

func ledgerKey(t *testing.T, st *billing.Store) string {
	t.Helper()
	entries, err := st.Ledger(context.Background())
	if err != nil || len(entries) != 1 {
		t.Fatalf("ledger: %+v, %v; want one row", entries, err)
	}
	return entries[0].Key
}

func ledgerRow(t *testing.T, st *billing.Store, key string) idem.LedgerEntry {
	t.Helper()
	entries, err := st.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Key == key {
			return e
		}
	}
	t.Fatalf("no ledger row %s in %+v", key, entries)
	return idem.LedgerEntry{}
}

// leaseRow makes key's done row a pending one that worker w-1 holds for an
// hour from now, as a worker's claim leaves it.
func leaseRow(t *testing.T, st *billing.Store, key string, now time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.Forget(ctx, "", key); err != nil {
		t.Fatal(err)
	}
	q := st.Runtime().Auto()
	err := q.Reserve(ctx, idemrt.Reservations{Job: "invoice_sync", Effect: "notify_new_invoice", EffectVersion: 2, JobVersion: 1,
		Keys: []string{key}, UnitKeys: []string{"billing:invoice:inv-1"}, Payloads: [][]byte{[]byte(`{}`)}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := q.ClaimMany(ctx, []string{key}, "w-1", now, now.Add(time.Hour)); err != nil || !got[key] {
		t.Fatalf("claim: %v, %v", got, err)
	}
}

func isRefused(err error, reason string) bool {
	var refused *idem.RefusedError
	return errors.As(err, &refused) && len(refused.Reasons) == 1 && strings.Contains(refused.Reasons[0], reason)
}
