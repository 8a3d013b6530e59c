package idemrt_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

func TestRerunChangesNothing(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		for i := 1; i <= 5; i++ {
			f.Invoice(fmt.Sprintf("inv-%d", i), 100, f.Base.Add(-time.Duration(i)*time.Minute))
		}
		j := f.Job(t, st)
		rep := billingtest.RunChecked(t, j)
		if rep.Inserted != 5 || rep.EffectsDone != 5 {
			t.Fatalf("first run: %s", rep)
		}
		// Re-run the same window, twice: no writes, no effects.
		for range 2 {
			rep, err := j.Backfill(context.Background(), idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Base})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Inserted+rep.Updated != 0 || rep.Unchanged != 5 || rep.EffectsDone != 0 || rep.EffectsDeduped != 5 {
				t.Fatalf("re-run: %s", rep)
			}
		}
		if calls, applied := f.Mailer.Totals(); calls != 5 || applied != 5 {
			t.Fatalf("provider saw %d calls, %d applied; want 5, 5", calls, applied)
		}
		if got := len(rows(t, j)); got != 5 {
			t.Fatalf("%d rows, want 5", got)
		}
	})
}

func TestWhenInsertedIgnoresUpdates(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-2*time.Minute))
		j := f.Job(t, st)
		billingtest.RunChecked(t, j)
		f.Clock.Advance(time.Minute)
		f.Invoice("inv-1", 250, f.Base.Add(30*time.Second))
		rep := billingtest.RunChecked(t, j)
		if rep.Updated != 1 || rep.EffectsDone != 0 {
			t.Fatalf("update run: %s", rep)
		}
		if got := rows(t, j)["inv-1"].AmountCents; got != 250 {
			t.Fatalf("amount %d, want 250", got)
		}
		if calls, _ := f.Mailer.Totals(); calls != 1 {
			t.Fatalf("provider calls %d, want 1", calls)
		}
	})
}

func TestNewerWinsRejectsOlderReplay(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 300, f.Base.Add(-time.Minute))
		j := f.Job(t, st)
		billingtest.RunChecked(t, j)
		// The source now serves an older version (a replica lagging behind).
		f.Invoice("inv-1", 100, f.Base.Add(-30*time.Minute))
		rep, err := j.Backfill(context.Background(), idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Base})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Unchanged != 1 || rep.Updated != 0 {
			t.Fatalf("older replay: %s", rep)
		}
		if got := rows(t, j)["inv-1"].AmountCents; got != 300 {
			t.Fatalf("older data overwrote newer: amount %d", got)
		}
	})
}

func TestWatermarkNeverMovesBackAndOverlapRefetches(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		j := f.Job(t, st)
		billingtest.RunChecked(t, j) // empty: the mark moves to now
		// A late-arriving row, stamped inside the overlap, is still fetched.
		f.Clock.Advance(time.Minute)
		f.Invoice("late", 1, f.Base.Add(-5*time.Minute))
		if rep := billingtest.RunChecked(t, j); rep.Inserted != 1 {
			t.Fatalf("late row inside overlap not fetched: %s", rep)
		}
		// Outside the overlap it is not (the window is mark-10m..now).
		f.Clock.Advance(time.Hour)
		billingtest.RunChecked(t, j)
		f.Invoice("too-late", 1, f.Base.Add(-20*time.Minute))
		if rep := billingtest.RunChecked(t, j); rep.Seen != 0 {
			t.Fatalf("window reached behind the overlap: %s", rep)
		}
	})
}

func TestEffectFailuresRetryThenPark(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		f.Invoice("inv-2", 100, f.Base.Add(-2*time.Minute))
		f.Mailer.Failing = true
		j := f.Job(t, st)
		rep := billingtest.RunChecked(t, j)
		// The failing effect does not stop or undo the units.
		if rep.Inserted != 2 || rep.EffectsFailed != 2 {
			t.Fatalf("first run: %s", rep)
		}
		for i := 2; i <= 5; i++ { // max_attempts is 5
			f.Clock.Advance(time.Minute)
			rep = billingtest.RunChecked(t, j)
		}
		if rep.EffectsParked != 2 {
			t.Fatalf("after 5 attempts: %s", rep)
		}
		// A plain error is retried once per run, up to max_attempts, and no more.
		if calls, _ := f.Mailer.Totals(); calls != 10 {
			t.Fatalf("provider saw %d calls, want 5 per invoice", calls)
		}
		f.Mailer.Failing = false
		f.Clock.Advance(time.Minute)
		if rep = billingtest.RunChecked(t, j); rep.EffectsDone != 0 {
			t.Fatalf("parked effect was retried: %s", rep)
		}
		if calls, _ := f.Mailer.Totals(); calls != 10 {
			t.Fatalf("a parked effect was called again: %d calls", calls)
		}
		entries, err := st.Ledger(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.State != idem.StateParked || e.Attempts != 5 || e.LastError == "" {
				t.Fatalf("ledger row %+v, want failed after 5 attempts", e)
			}
		}
	})
}

func TestLeaseTakeover(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		hang := make(chan struct{})
		f.Mailer.Hang = hang
		a := f.Job(t, st)
		done := make(chan idem.Report)
		go func() { rep, _ := a.Run(context.Background()); done <- rep }()
		// Wait until A's provider call is in flight (it applied, then hangs).
		for {
			if calls, _ := f.Mailer.Totals(); calls == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		// Within the lease, another worker leaves the reservation alone.
		b := f.Job(t, st)
		f.Mailer.SetHang(nil)
		if rep, err := b.Drain(context.Background()); err != nil || rep.EffectsDone != 0 {
			t.Fatalf("drain within lease: %s, %v", rep, err)
		}
		// After the lease (5m) another worker takes over and performs it with the same key.
		f.Clock.Advance(6 * time.Minute)
		if rep, err := b.Drain(context.Background()); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("takeover: %s, %v", rep, err)
		}
		close(hang)
		<-done
		calls, applied := f.Mailer.Totals()
		if calls != 2 || applied != 1 {
			t.Fatalf("calls=%d applied=%d, want 2 calls with one key, 1 applied", calls, applied)
		}
		entries, _ := st.Ledger(context.Background())
		if len(entries) != 1 || entries[0].State != "done" {
			t.Fatalf("ledger %+v", entries)
		}
	})
}

func TestPurgeDeletesOnlyExpiredDoneRows(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		f.Invoice("done-early", 1, f.Base.Add(-time.Minute))
		j := f.Job(t, st)
		billingtest.RunChecked(t, j)
		f.Clock.Advance(700 * time.Hour)
		f.Mailer.Failing = true
		f.Invoice("pending", 1, f.Clock.Now().Add(-time.Minute))
		billingtest.RunChecked(t, j)
		f.Clock.Advance(30 * time.Hour) // done-early is now 730h old; retention is 720h
		n, err := j.Purge(context.Background())
		if err != nil || n != 1 {
			t.Fatalf("purged %d, %v; want 1", n, err)
		}
		entries, _ := st.Ledger(context.Background())
		if len(entries) != 1 || entries[0].State != "pending" {
			t.Fatalf("left %+v, want the pending row only", entries)
		}
	})
}

func TestTimesRoundTripInAnyZone(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		zones := []string{"UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham"}
		want := map[string]billing.Invoice{}
		for i, z := range zones {
			loc, err := time.LoadLocation(z)
			if err != nil {
				t.Skip(err)
			}
			at := f.Base.Add(-time.Duration(i+1)*time.Minute + 123456789*time.Nanosecond/1000*1000).In(loc)
			want[z] = f.Invoice(z, int64(i), at)
		}
		j := f.Job(t, st)
		billingtest.RunChecked(t, j)
		got := rows(t, j)
		for z, w := range want {
			g := got[z]
			if !g.UpdatedAt.Equal(w.UpdatedAt) || !g.CreatedAt.Equal(w.CreatedAt) {
				t.Errorf("%s: stored %v, want %v", z, g.UpdatedAt, w.UpdatedAt)
			}
		}
		// Re-running with the same instants in other zones changes nothing.
		if rep := billingtest.RunChecked(t, j); rep.Updated != 0 {
			t.Fatalf("zone-only difference counted as change: %s", rep)
		}
	})
}

func TestWebhookInsertOnceDedupeAndMismatch(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		rc := billingtest.NewReceipts()
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithClock(f.Clock.Now), idem.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		note := "first"
		p := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: f.Base, Note: &note}
		ctx := context.Background()
		first, _ := hook.Process(ctx, p)
		again, _ := hook.Process(ctx, p)
		changed := p
		changed.AmountCents = 501
		bad, _ := hook.Process(ctx, changed)
		if first.Inserted != 1 || again.Deduped != 1 || bad.Mismatched != 1 {
			t.Fatalf("first %s / again %s / changed %s", first, again, bad)
		}
		if !bytes.Equal(again.Units[0].Effects[0].Result, []byte("rcpt-evt_1")) || again.Units[0].Effects[0].Outcome != idem.EffectDeduped {
			t.Fatalf("replay did not return the kept result: %+v", again.Units[0].Effects)
		}
		if !strings.Contains(bad.Units[0].Err.Error(), "different payload") {
			t.Fatalf("mismatch error %v", bad.Units[0].Err)
		}
		if n := rc.Calls[billing.SendReceiptKey(p)]; n != 1 {
			t.Fatalf("receipt sent %d times", n)
		}
	})
}

// Every log line about a unit carries the unit's key, and every line about
// an effect its effect key, so one grep follows a unit through a run.
func TestLogsCarryKeys(t *testing.T) {
	st, closeDB, err := billingtest.OpenSQLite(context.Background(), filepath.Join(t.TempDir(), "log.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	f := billingtest.NewFixture()
	f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
	f.Invoice("inv-2", 200, f.Base.Add(-2*time.Minute))
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	j, err := billing.NewInvoiceSync(st, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: f.Mailer},
		idem.WithClock(f.Clock.Now), idem.WithLogger(log), idem.WithStart(f.Base.Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	units, effects := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		switch {
		case strings.Contains(msg, "unit"):
			units++
			if k, _ := rec["key"].(string); !strings.HasPrefix(k, "billing:invoice:") {
				t.Errorf("unit line without the unit key: %s", line)
			}
		case strings.Contains(msg, "effect"):
			effects++
			if k, _ := rec["effect_key"].(string); !strings.HasPrefix(k, "notify:new-invoice:") || rec["key"] == nil {
				t.Errorf("effect line without its keys: %s", line)
			}
		}
	}
	if units != 2 || effects != 2 {
		t.Fatalf("logged %d unit lines and %d effect lines, want 2 and 2:\n%s", units, effects, buf.String())
	}
}

// TestCanceledRunStartsNoNewCall: once a run's context is canceled (a
// shutdown), no further provider call starts; the effects it did not call
// are performed once by the next run after their leases, and none is
// parked or called twice.
func TestCanceledRunStartsNoNewCall(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		for i := 1; i <= 3; i++ {
			f.Invoice(fmt.Sprintf("inv-%d", i), 100, f.Base.Add(-time.Duration(i)*time.Minute))
		}
		j, err := billing.NewInvoiceSync(st, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: f.Mailer},
			idem.WithClock(f.Clock.Now), idemtest.WithLeaseClock(f.Clock.Now), idem.WithLogger(quiet), idem.WithStart(f.Base.Add(-24*time.Hour)),
			idem.WithEffectConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		f.Mailer.OnCall = cancel
		rep, err := j.Run(ctx)
		f.Mailer.OnCall = nil
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run err = %v, want context.Canceled", err)
		}
		if calls, _ := f.Mailer.Totals(); calls != 1 {
			t.Fatalf("provider saw %d calls after the run was canceled in the first; want 1 (report %s)", calls, rep)
		}
		// The API serves pages of two: the run stops after its first page.
		if rep.Inserted != 2 || rep.EffectsDone != 1 || rep.EffectsFailed != 1 {
			t.Fatalf("canceled run: %s; want 2 inserted, 1 effect done, 1 not called (failed)", rep)
		}

		f.Clock.Advance(6 * time.Minute) // past the canceled run's leases (5m)
		rep = billingtest.RunChecked(t, j)
		if rep.EffectsDone != 2 || rep.EffectsParked != 0 {
			t.Fatalf("next run: %s; want the owed effect and the third invoice's done", rep)
		}
		calls, applied := f.Mailer.Totals()
		if calls != 3 || applied != 3 {
			t.Fatalf("provider saw %d calls, %d applied; want each invoice called once", calls, applied)
		}
	})
}
