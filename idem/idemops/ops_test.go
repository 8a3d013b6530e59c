package idemops_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// effectStatus is job's status of effect.
func effectStatus(t *testing.T, s *idemops.Status, job, effect string) idemops.EffectStatus {
	t.Helper()
	for _, j := range s.Jobs {
		if j.Job != job {
			continue
		}
		for _, e := range j.Effects {
			if e.Effect == effect {
				return e
			}
		}
	}
	t.Fatalf("status has no %s.%s: %+v", job, effect, s.Jobs)
	return idemops.EffectStatus{}
}

// Status counts the scenario's rows as the runs left them, and calls the
// package unhealthy while something is parked.
func TestStatusCountsWhatTheRunsLeft(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		s, err := db.Ops.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		e := effectStatus(t, s, "invoice_sync", "notify_new_invoice")
		if e.Owed != 1 || e.Leased != 1 || e.Parked != 1 || e.Done != 1 || e.Version != 2 {
			t.Errorf("notify_new_invoice: owed %d, leased %d, parked %d, done %d, version %d; want 1, 1, 1, 1, 2",
				e.Owed, e.Leased, e.Parked, e.Done, e.Version)
		}
		if r := effectStatus(t, s, "payment_webhook", "send_receipt"); r.Owed+r.Parked+r.Done != 0 {
			t.Errorf("send_receipt counts rows no run wrote: %+v", r)
		}
		if s.Healthy || len(s.Problems) != 1 || !strings.Contains(s.Problems[0], "invoice_sync") {
			t.Errorf("healthy %v, problems %q; want unhealthy, one problem of invoice_sync", s.Healthy, s.Problems)
		}
		for _, j := range s.Jobs {
			switch j.Job {
			case "invoice_sync":
				if j.Source != idemops.SourceWatermark || j.Progress == nil || j.Progress.Watermark == nil {
					t.Errorf("invoice_sync: source %q, progress %+v; want a saved watermark", j.Source, j.Progress)
				}
			case "payment_webhook":
				if j.Progress != nil {
					t.Errorf("payment_webhook, a handed-in job, has progress %+v", j.Progress)
				}
			}
		}
		// Counting up to a limit of one shows each count as a lower bound.
		limited, err := db.Ops.StatusUpTo(t.Context(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if e := effectStatus(t, limited, "invoice_sync", "notify_new_invoice"); e.Parked != 1 || e.Done != 1 {
			t.Errorf("StatusUpTo(1): parked %d, done %d; want 1 and 1", e.Parked, e.Done)
		}
	})
}

// List selects by state and key prefix, and pages with a cursor that
// neither repeats nor skips a row.
func TestListFiltersAndPages(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		ctx := t.Context()
		parked, err := db.Ops.List(ctx, idemops.Filter{State: idem.StateParked})
		if err != nil {
			t.Fatal(err)
		}
		if len(parked.Effects) != 1 || parked.Effects[0].Key != billingtest.ParkedKey || len(parked.Units) != 0 {
			t.Fatalf("parked: %+v", parked)
		}
		var keys []string
		pages := 0
		for f := (idemops.Filter{Prefix: "notify:new-invoice:v2:", Limit: 1}); ; pages++ {
			rows, err := db.Ops.List(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range rows.Effects {
				keys = append(keys, e.Key)
			}
			if rows.Next == "" || pages > 5 {
				break
			}
			f.After = rows.Next
		}
		if want := []string{billingtest.ParkedKey, billingtest.DoneKey, billingtest.LeasedKey}; !slices.Equal(keys, want) {
			t.Fatalf("paged keys %q, want %q", keys, want)
		}
		none, err := db.Ops.List(ctx, idemops.Filter{Job: "payment_webhook"})
		if err != nil || !none.Empty() {
			t.Fatalf("payment_webhook's rows: %+v, %v; want none", none, err)
		}
	})
}

// Show finds the row under an effect key with its payload and why it is
// parked; History finds a unit's effects from its unit key.
func TestShowAndHistory(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		ctx := t.Context()
		rows, err := db.Ops.Show(ctx, billingtest.ParkedKey, "")
		if err != nil || len(rows.Effects) != 1 {
			t.Fatalf("show %s: %+v, %v", billingtest.ParkedKey, rows, err)
		}
		e := rows.Effects[0]
		if e.State != idem.StateParked || e.Attempts != 1 || e.ParkedReason == nil || *e.ParkedReason != "permanent" ||
			e.LastError == nil || !strings.Contains(*e.LastError, billingtest.ErrNoMailbox.Error()) || !strings.Contains(string(e.Payload), "inv-1") {
			t.Fatalf("show %s: %+v", billingtest.ParkedKey, e)
		}
		hist, err := db.Ops.History(ctx, "billing:invoice:inv-2")
		if err != nil || len(hist.Effects) != 1 || hist.Effects[0].Key != billingtest.DoneKey || hist.Effects[0].DoneAt == nil {
			t.Fatalf("history of inv-2: %+v, %v", hist, err)
		}
		if rows, err := db.Ops.Show(ctx, "no-such-key", ""); err != nil || !rows.Empty() {
			t.Fatalf("show of an unknown key: %+v, %v", rows, err)
		}
	})
}

// A retry puts the parked effect back so that the next run performs it
// once; a second retry finds nothing parked, and a retry of an effect
// under a live lease is refused with the row left as it was.
func TestRetryPutsBackOnce(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		f, j := billingtest.OpsScenario(t, db)
		ctx := t.Context()
		changes, err := db.Ops.Retry(ctx, billingtest.ParkedKey, "")
		if err != nil || len(changes) != 1 || changes[0].Key != billingtest.ParkedKey || changes[0].State != idem.StateParked {
			t.Fatalf("retry: %+v, %v", changes, err)
		}
		f.Clock.Advance(time.Minute)
		billingtest.Run(t, j)
		billingtest.Run(t, j)
		if calls := f.Mailer.CallsOf(billingtest.ParkedKey); calls != 2 {
			t.Fatalf("provider calls of %s: %d, want the bounce and one more", billingtest.ParkedKey, calls)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.ParkedKey); e.State != idem.StateDone {
			t.Fatalf("after the retry and a run: %+v", e)
		}
		if changes, err := db.Ops.Retry(ctx, billingtest.ParkedKey, ""); err == nil {
			t.Fatalf("a second retry changed %+v", changes)
		}
		var refused *idemops.RefusedError
		if _, err := db.Ops.Retry(ctx, billingtest.LeasedKey, ""); !errors.As(err, &refused) || !strings.Contains(err.Error(), "worker-7") {
			t.Fatalf("retry of a leased effect: %v; want a refusal naming worker-7", err)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.LeasedKey); e.State != idem.StatePending || e.LeaseOwner != "worker-7" {
			t.Fatalf("leased row after a refused retry: %+v", e)
		}
	})
}

// RetryAllParked puts back every parked effect of a job and nothing else.
func TestRetryAllParked(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		changes, err := db.Ops.RetryAllParked(t.Context(), "invoice_sync")
		if err != nil || len(changes) != 1 || changes[0].Key != billingtest.ParkedKey {
			t.Fatalf("retry all parked: %+v, %v", changes, err)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.LeasedKey); e.LeaseOwner != "worker-7" {
			t.Fatalf("the leased row was touched: %+v", e)
		}
	})
}

// A dry-run reset says what it would remove and writes nothing; the reset
// itself removes the row.
func TestResetDryRunWritesNothing(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		ctx := t.Context()
		changes, err := db.Ops.Reset(ctx, billingtest.DoneKey, "", true)
		if err != nil || len(changes) != 1 || changes[0].Key != billingtest.DoneKey {
			t.Fatalf("dry run: %+v, %v", changes, err)
		}
		if e := billingtest.LedgerEntry(t, db.Store, billingtest.DoneKey); e.State != idem.StateDone {
			t.Fatalf("a dry run changed the row: %+v", e)
		}
		if _, err := db.Ops.Reset(ctx, billingtest.DoneKey, "", false); err != nil {
			t.Fatal(err)
		}
		if rows, err := db.Ops.Show(ctx, billingtest.DoneKey, ""); err != nil || !rows.Empty() {
			t.Fatalf("after the reset: %+v, %v", rows, err)
		}
	})
}

// The activity window counts the done send and the bounce.
func TestActivityCountsTheRuns(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		billingtest.OpsScenario(t, db)
		a, err := db.Ops.Activity(t.Context(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if a.Done != 1 || a.Failed != 1 || len(a.Minutes) < 60 {
			t.Fatalf("activity: done %d, failed %d over %d minutes; want 1 and 1 over the hour", a.Done, a.Failed, len(a.Minutes))
		}
	})
}

// A provider's pause shows as the effect's gate until it is lifted.
func TestGateShowsAPauseUntilLifted(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		f := billingtest.NewOpsFixture()
		db.Ops.SetClock(f.Clock.Now)
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		notify := billing.NotifyNewInvoiceFunc(func(context.Context, string, billing.Invoice) error {
			return idem.PauseEffect(time.Hour, errors.New("429 the mail account is throttled"))
		})
		circuit := idemtest.WithJobEdit(func(j *idemrt.Job[billing.Invoice]) {
			j.Effects[0].Circuit = idemrt.Circuit{Failures: 5, CoolDown: time.Minute} // a gate, for the pause
		})
		j, err := billing.NewInvoiceSync(db.Store, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: notify},
			append(f.Options(), idem.WithStart(f.Base.Add(-24*time.Hour)), circuit)...)
		if err != nil {
			t.Fatal(err)
		}
		billingtest.Run(t, j)
		ctx := t.Context()
		g, err := db.Ops.Gate(ctx, "invoice_sync", "notify_new_invoice")
		if err != nil || g == nil || g.State != "paused" || !strings.Contains(g.Reason, "throttled") ||
			g.Until == nil || !g.Until.Equal(f.Clock.Now().Add(time.Hour)) {
			t.Fatalf("gate: %+v, %v; want paused for an hour with the provider's answer", g, err)
		}
		if lifted, err := db.Ops.LiftGate(ctx, "invoice_sync", "notify_new_invoice"); err != nil || !lifted {
			t.Fatalf("lift: %v, %v", lifted, err)
		}
		if g, err := db.Ops.Gate(ctx, "invoice_sync", "notify_new_invoice"); err != nil || g != nil {
			t.Fatalf("gate after the lift: %+v, %v", g, err)
		}
	})
}
