package main

import (
	"bytes"
	"context"
	"database/sql"
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
		idem.WithClock(f.clk.Now), idemtest.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)))
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

// newHook is the payment webhook job on the fixture's clock.
func newHook(t *testing.T, st *billing.Store, f *fixture, provider billing.SendReceipt, opts ...idem.Option) *billing.PaymentWebhook {
	t.Helper()
	opts = append([]idem.Option{idem.WithClock(f.clk.Now), idemtest.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet)}, opts...)
	hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: provider}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return hook
}

func payment(f *fixture, id string, cents int64) billing.Payment {
	return billing.Payment{EventID: id, InvoiceID: "inv-" + id, AmountCents: cents, PaidAt: f.base}
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
