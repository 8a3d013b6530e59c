package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Every test here runs on SQLite and, when IDEMGEN_TEST_POSTGRES is set, on
// PostgreSQL in a schema of its own that is dropped afterwards.
func eachDB(t *testing.T, fn func(t *testing.T, store *billing.Store)) {
	eachRawDB(t, func(t *testing.T, store *billing.Store, _ rawDB) { fn(t, store) })
}

// rawDB runs, on the test's database, what only the database can do: a
// trigger that refuses a row, say. Each statement comes in both dialects.
type rawDB func(t *testing.T, sqlite, postgres string)

// eachRawDB is eachDB with a rawDB beside the store.
func eachRawDB(t *testing.T, fn func(t *testing.T, store *billing.Store, db rawDB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "test.db")
		st, closeDB, err := openSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeDB)
		raw, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		fn(t, st, func(t *testing.T, sqlite, _ string) {
			t.Helper()
			if _, err := raw.ExecContext(context.Background(), sqlite); err != nil {
				t.Fatalf("sqlite: %v", err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := idemtest.OpenPostgres(t)
		st, pool, err := openPostgresConfig(context.Background(), pg.Config(pg.NewSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		fn(t, st, func(t *testing.T, _, postgres string) {
			t.Helper()
			if _, err := pool.Exec(context.Background(), postgres); err != nil {
				t.Fatalf("postgres: %v", err)
			}
		})
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type fixture struct {
	clk  *clock
	api  *billingAPI
	mail *notifier
	base time.Time
}

func newFixture() *fixture {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	return &fixture{clk: &clock{now: base}, api: newBillingAPI(), mail: newNotifier(), base: base}
}

func (f *fixture) job(t *testing.T, st *billing.Store) *billing.InvoiceSync {
	t.Helper()
	j, err := billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
		idem.WithClock(f.clk.Now), idemrt.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (f *fixture) invoice(id string, amount int64, updated time.Time) billing.Invoice {
	inv := billing.Invoice{InvoiceID: id, CustomerID: "cus", AmountCents: amount, CreatedAt: f.base.Add(-time.Hour), UpdatedAt: updated}
	f.api.put(inv)
	return inv
}

// runJob runs j once. A run that stopped fails the test; one that ran to
// its end must return a *idem.FailuresError exactly when its report counts
// a unit or effect that did not end applied, one failure per count.
func runJob(t *testing.T, j *billing.InvoiceSync) idem.Report {
	t.Helper()
	rep, err := j.Run(context.Background())
	checkFailures(t, "run", rep, err, false)
	return rep
}

// checkFailures holds a call's error to its report: nil when nothing
// failed, else a *idem.FailuresError counting every failed unit and effect
// (and busy effects, for Process).
func checkFailures(t *testing.T, call string, rep idem.Report, err error, busyFails bool) {
	t.Helper()
	want := rep.Failed + rep.EffectsFailed
	if busyFails {
		want += rep.EffectsBusy
	}
	var fe *idem.FailuresError
	switch {
	case err == nil && want > 0:
		t.Fatalf("%s: report counts %d failures but the error is nil: %s", call, want, rep)
	case errors.As(err, &fe) && fe.Count != want:
		t.Fatalf("%s: error counts %d failures, report %d: %v; %s", call, fe.Count, want, err, rep)
	case err != nil && fe == nil:
		t.Fatalf("%s: %v", call, err)
	}
}

func rows(t *testing.T, j *billing.InvoiceSync) map[string]billing.Invoice {
	t.Helper()
	rs, err := j.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]billing.Invoice{}
	for _, r := range rs {
		if _, dup := out[r.InvoiceID]; dup {
			t.Fatalf("two rows for %s", r.InvoiceID)
		}
		out[r.InvoiceID] = r
	}
	return out
}

func TestRerunChangesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		for i := 1; i <= 5; i++ {
			f.invoice(fmt.Sprintf("inv-%d", i), 100, f.base.Add(-time.Duration(i)*time.Minute))
		}
		j := f.job(t, st)
		rep := runJob(t, j)
		if rep.Inserted != 5 || rep.EffectsDone != 5 {
			t.Fatalf("first run: %s", rep)
		}
		// Re-run the same window, twice: no writes, no effects.
		for range 2 {
			rep, err := j.Backfill(context.Background(), idem.Window{Since: f.base.Add(-time.Hour), Until: f.base})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Inserted+rep.Updated != 0 || rep.Unchanged != 5 || rep.EffectsDone != 0 || rep.EffectsDeduped != 5 {
				t.Fatalf("re-run: %s", rep)
			}
		}
		if calls, applied := f.mail.totals(); calls != 5 || applied != 5 {
			t.Fatalf("provider saw %d calls, %d applied; want 5, 5", calls, applied)
		}
		if got := len(rows(t, j)); got != 5 {
			t.Fatalf("%d rows, want 5", got)
		}
	})
}

func TestWhenInsertedIgnoresUpdates(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		f.invoice("inv-1", 100, f.base.Add(-2*time.Minute))
		j := f.job(t, st)
		runJob(t, j)
		f.clk.advance(time.Minute)
		f.invoice("inv-1", 250, f.base.Add(30*time.Second))
		rep := runJob(t, j)
		if rep.Updated != 1 || rep.EffectsDone != 0 {
			t.Fatalf("update run: %s", rep)
		}
		if got := rows(t, j)["inv-1"].AmountCents; got != 250 {
			t.Fatalf("amount %d, want 250", got)
		}
		if calls, _ := f.mail.totals(); calls != 1 {
			t.Fatalf("provider calls %d, want 1", calls)
		}
	})
}

func TestNewerWinsRejectsOlderReplay(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		f.invoice("inv-1", 300, f.base.Add(-time.Minute))
		j := f.job(t, st)
		runJob(t, j)
		// The source now serves an older version (a replica lagging behind).
		f.invoice("inv-1", 100, f.base.Add(-30*time.Minute))
		rep, err := j.Backfill(context.Background(), idem.Window{Since: f.base.Add(-time.Hour), Until: f.base})
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
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		j := f.job(t, st)
		runJob(t, j) // empty: the mark moves to now
		// A late-arriving row, stamped inside the overlap, is still fetched.
		f.clk.advance(time.Minute)
		f.invoice("late", 1, f.base.Add(-5*time.Minute))
		if rep := runJob(t, j); rep.Inserted != 1 {
			t.Fatalf("late row inside overlap not fetched: %s", rep)
		}
		// Outside the overlap it is not (the window is mark-10m..now).
		f.clk.advance(time.Hour)
		runJob(t, j)
		f.invoice("too-late", 1, f.base.Add(-20*time.Minute))
		if rep := runJob(t, j); rep.Seen != 0 {
			t.Fatalf("window reached behind the overlap: %s", rep)
		}
	})
}

func TestEffectFailuresRetryThenPark(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		f.invoice("inv-1", 100, f.base.Add(-time.Minute))
		f.invoice("inv-2", 100, f.base.Add(-2*time.Minute))
		f.mail.failing = true
		j := f.job(t, st)
		rep := runJob(t, j)
		// The failing effect does not stop or undo the units.
		if rep.Inserted != 2 || rep.EffectsFailed != 2 {
			t.Fatalf("first run: %s", rep)
		}
		for i := 2; i <= 5; i++ { // max_attempts is 5
			f.clk.advance(time.Minute)
			rep = runJob(t, j)
		}
		if rep.EffectsParked != 2 {
			t.Fatalf("after 5 attempts: %s", rep)
		}
		// A plain error is retried once per run, up to max_attempts, and no more.
		if calls, _ := f.mail.totals(); calls != 10 {
			t.Fatalf("provider saw %d calls, want 5 per invoice", calls)
		}
		f.mail.failing = false
		f.clk.advance(time.Minute)
		if rep = runJob(t, j); rep.EffectsDone != 0 {
			t.Fatalf("parked effect was retried: %s", rep)
		}
		if calls, _ := f.mail.totals(); calls != 10 {
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
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		f.invoice("inv-1", 100, f.base.Add(-time.Minute))
		hang := make(chan struct{})
		f.mail.hang = hang
		a := f.job(t, st)
		done := make(chan idem.Report)
		go func() { rep, _ := a.Run(context.Background()); done <- rep }()
		// Wait until A's provider call is in flight (it applied, then hangs).
		for {
			if calls, _ := f.mail.totals(); calls == 1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		// Within the lease, another worker leaves the reservation alone.
		b := f.job(t, st)
		f.mail.mu.Lock()
		f.mail.hang = nil
		f.mail.mu.Unlock()
		if rep, err := b.Drain(context.Background()); err != nil || rep.EffectsDone != 0 {
			t.Fatalf("drain within lease: %s, %v", rep, err)
		}
		// After the lease (5m) another worker takes over and performs it with the same key.
		f.clk.advance(6 * time.Minute)
		if rep, err := b.Drain(context.Background()); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("takeover: %s, %v", rep, err)
		}
		close(hang)
		<-done
		calls, applied := f.mail.totals()
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
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		f.invoice("done-early", 1, f.base.Add(-time.Minute))
		j := f.job(t, st)
		runJob(t, j)
		f.clk.advance(700 * time.Hour)
		f.mail.failing = true
		f.invoice("pending", 1, f.clk.Now().Add(-time.Minute))
		runJob(t, j)
		f.clk.advance(30 * time.Hour) // done-early is now 730h old; retention is 720h
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
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		zones := []string{"UTC", "America/Los_Angeles", "Asia/Kolkata", "Pacific/Chatham"}
		want := map[string]billing.Invoice{}
		for i, z := range zones {
			loc, err := time.LoadLocation(z)
			if err != nil {
				t.Skip(err)
			}
			at := f.base.Add(-time.Duration(i+1)*time.Minute + 123456789*time.Nanosecond/1000*1000).In(loc)
			want[z] = f.invoice(z, int64(i), at)
		}
		j := f.job(t, st)
		runJob(t, j)
		got := rows(t, j)
		for z, w := range want {
			g := got[z]
			if !g.UpdatedAt.Equal(w.UpdatedAt) || !g.CreatedAt.Equal(w.CreatedAt) {
				t.Errorf("%s: stored %v, want %v", z, g.UpdatedAt, w.UpdatedAt)
			}
		}
		// Re-running with the same instants in other zones changes nothing.
		if rep := runJob(t, j); rep.Updated != 0 {
			t.Fatalf("zone-only difference counted as change: %s", rep)
		}
	})
}

func TestWebhookInsertOnceDedupeAndMismatch(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		rc := newReceipts()
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithClock(f.clk.Now), idem.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		note := "first"
		p := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: f.base, Note: &note}
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
		if n := rc.calls[billing.SendReceiptKey(p)]; n != 1 {
			t.Fatalf("receipt sent %d times", n)
		}
	})
}

func TestExampleRunsEndToEnd(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), nil, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "invoices table: 7 rows for 7 invoices") {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}

// TestExampleAgainOnTheSameDatabase runs the example three times on one
// SQLite file, as docs/example.md's "Bumping a version" walk-through does. A second
// run backfills every invoice and changes nothing. Between the second and
// the third, the database is made to look as if an older build wrote it
// (notify_new_invoice at version 1, rows by an older invoice_sync version),
// which is what the checked-in build meets after a user bumps both
// versions: the third run notifies each invoice once more under the current
// key, keeps the old ledger rows, and lists the old rows as stale before
// recomputing them.
func TestExampleAgainOnTheSameDatabase(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "billing.db")
	runOnce := func(want ...string) string {
		t.Helper()
		var out bytes.Buffer
		if err := run(ctx, []string{"-db", path}, &out); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		for _, w := range want {
			if !strings.Contains(out.String(), w) {
				t.Fatalf("output lacks %q:\n%s", w, out.String())
			}
		}
		return out.String()
	}
	runOnce("invoices table: 7 rows for 7 invoices")
	nothingNew := []string{
		"this database already holds 7 invoices from an earlier run",
		"(Stale), before: none",
		"unchanged=7 deduped=0",
		"effects: done=0 deduped=7 failed=0",
		"notifier: 0 calls, 0 emails sent",
		"  version 2: done=7\n",
	}
	if out := runOnce(nothingNew...); strings.Contains(out, "version 1:") {
		t.Fatalf("unexpected ledger rows:\n%s", out)
	}

	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{
		`UPDATE billing_idem_ledger SET effect_version = 1, effect_key = replace(effect_key, ':v2:', ':v1:') WHERE effect = 'notify_new_invoice'`,
		`UPDATE invoices SET idemgen_job_version = idemgen_job_version - 1`,
	} {
		if res, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		} else if n, _ := res.RowsAffected(); n != 7 {
			t.Fatalf("%s: %d rows, want 7", stmt, n)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	out := runOnce(
		"(Stale), before: 7 [billing:invoice:inv-1 ",
		"effects: done=7 deduped=0 failed=0",
		"notifier: 7 calls, 7 emails sent",
		"(Stale), after: none",
		"  version 1: done=7\n  version 2: done=7\n",
	)
	for i := 1; i <= 7; i++ {
		if w := fmt.Sprintf("  inv-%d emails=1 key=notify:new-invoice:v2:inv-%d\n", i, i); !strings.Contains(out, w) {
			t.Fatalf("output lacks %q:\n%s", w, out)
		}
	}
	runOnce(append(nothingNew[:len(nothingNew)-1], "  version 1: done=7\n  version 2: done=7\n")...)
}

// Every log line about a unit carries the unit's key, and every line about
// an effect its effect key, so one grep follows a unit through a run.
func TestLogsCarryKeys(t *testing.T) {
	st, closeDB, err := openSQLite(context.Background(), filepath.Join(t.TempDir(), "log.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer closeDB()
	f := newFixture()
	f.invoice("inv-1", 100, f.base.Add(-time.Minute))
	f.invoice("inv-2", 200, f.base.Add(-2*time.Minute))
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	j, err := billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
		idem.WithClock(f.clk.Now), idem.WithLogger(log), idem.WithStart(f.base.Add(-time.Hour)))
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
	eachDB(t, func(t *testing.T, st *billing.Store) {
		f := newFixture()
		for i := 1; i <= 3; i++ {
			f.invoice(fmt.Sprintf("inv-%d", i), 100, f.base.Add(-time.Duration(i)*time.Minute))
		}
		j, err := billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
			idem.WithClock(f.clk.Now), idemrt.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)),
			idem.WithEffectConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		f.mail.onCall = cancel
		rep, err := j.Run(ctx)
		f.mail.onCall = nil
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("run err = %v, want context.Canceled", err)
		}
		if calls, _ := f.mail.totals(); calls != 1 {
			t.Fatalf("provider saw %d calls after the run was canceled in the first; want 1 (report %s)", calls, rep)
		}
		// The API serves pages of two: the run stops after its first page.
		if rep.Inserted != 2 || rep.EffectsDone != 1 || rep.EffectsFailed != 1 {
			t.Fatalf("canceled run: %s; want 2 inserted, 1 effect done, 1 not called (failed)", rep)
		}

		f.clk.advance(6 * time.Minute) // past the canceled run's leases (5m)
		rep = runJob(t, j)
		if rep.EffectsDone != 2 || rep.EffectsParked != 0 {
			t.Fatalf("next run: %s; want the owed effect and the third invoice's done", rep)
		}
		calls, applied := f.mail.totals()
		if calls != 3 || applied != 3 {
			t.Fatalf("provider saw %d calls, %d applied; want each invoice called once", calls, applied)
		}
	})
}
