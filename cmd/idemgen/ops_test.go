package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for schemas
	_ "github.com/ncruces/go-sqlite3/driver"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The status and ledger scripts (ops_*.txtar) read and repair a database
// that the example's generated package (example/billing, spec
// example/idemgen.yaml) wrote: its jobs run in this process, through the
// billing command, so the parked effects, parked units, leases and owed
// effects they find are the runtime's own, and a retried item is performed
// by a real run. TestScripts runs them on a SQLite file ($DB is its path);
// TestOpsScriptsPostgres runs them again on PostgreSQL ($DB is a URL whose
// search_path is a schema of the script's own, dropped afterwards).

// opsScripts are the scripts that take $DB.
func opsScripts(t *testing.T) []string {
	files, err := filepath.Glob(filepath.Join("testdata", "script", "ops_*.txtar"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ops scripts: %v", err)
	}
	return files
}

func TestOpsScriptsPostgres(t *testing.T) {
	pgURL := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if pgURL == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the status and ledger scripts on PostgreSQL")
	}
	p := scriptParams(t)
	p.Dir, p.Files = "", opsScripts(t)
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		if err := setup(env); err != nil {
			return err
		}
		dsn, drop, err := pgSchema(pgURL)
		if err != nil {
			return err
		}
		env.Defer(drop)
		env.Setenv("DB", dsn)
		return nil
	}
	testscript.Run(t, p)
}

// pgSchema creates a schema of its own and returns a URL whose search_path
// is that schema, and a func that drops it.
func pgSchema(pgURL string) (string, func(), error) {
	admin, err := sql.Open("pgx", pgURL)
	if err != nil {
		return "", nil, err
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "idemgen_ops_" + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		admin.Close()
		return "", nil, err
	}
	drop := func() {
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "drop schema %s: %v\n", schema, err)
		}
		admin.Close()
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		drop()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}

// The invoices the billing command's source serves: inv-2's customer is
// "poison", which refuse-poison makes the database refuse.
var invoiceBase = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

var invoices = []billing.Invoice{
	{InvoiceID: "inv-1", CustomerID: "cus-1", AmountCents: 100, CreatedAt: invoiceBase, UpdatedAt: invoiceBase.Add(1 * time.Minute)},
	{InvoiceID: "inv-2", CustomerID: "poison", AmountCents: 200, CreatedAt: invoiceBase, UpdatedAt: invoiceBase.Add(2 * time.Minute)},
	{InvoiceID: "inv-3", CustomerID: "cus-3", AmountCents: 300, CreatedAt: invoiceBase, UpdatedAt: invoiceBase.Add(3 * time.Minute)},
}

// The database refuses invoices of customer "poison" (as idem/idemrt/parked_test.go does).
const (
	refusePoisonSQLite = `CREATE TRIGGER refuse_poison BEFORE INSERT ON invoices WHEN NEW.customer_id = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison invoice refused'); END`
	refusePoisonPostgres = `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.customer_id = 'poison' THEN RAISE EXCEPTION 'poison invoice refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON invoices FOR EACH ROW EXECUTE FUNCTION refuse_poison()`
	acceptPoisonSQLite   = `DROP TRIGGER refuse_poison`
	acceptPoisonPostgres = `DROP TRIGGER refuse_poison ON invoices; DROP FUNCTION refuse_poison()`
)

// cmdBilling runs the example's jobs on $DB, migrating it first:
//
//	billing run [-decline inv-1,...] [-fail inv-3,...]   one Run of invoice_sync over the invoices above;
//	                                                     its notifier declines (a permanent failure) or fails
//	billing hand-in [-fail-receipt] [-ago 10m] [-hold] [-backoff] EVENT
//	                                                     Process of one payment: its receipt fails, or runs
//	                                                     with a clock that long ago, or blocks until the
//	                                                     script ends (a live worker's lease, owner worker-7)
//	billing drain                                        Drain of payment_webhook
//	billing refuse-poison | accept-poison                the database refuses invoices of customer "poison", or stops
//
// It prints each report.
func cmdBilling(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: billing run|hand-in|drain|refuse-poison|accept-poison ...")
	}
	ctx := context.Background()
	st, raw, closeDB := openBilling(ts, ts.Getenv("DB"))
	fs := flag.NewFlagSet("billing "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	decline := fs.String("decline", "", "invoice ids whose notification is declined (permanent)")
	failIDs := fs.String("fail", "", "invoice ids whose notification fails")
	pauseIDs := fs.String("pause", "", "invoice ids whose notification pauses the effect for an hour (idem.PauseEffect); the effect gets a circuit, so it has a gate")
	failReceipt := fs.Bool("fail-receipt", false, "the receipt fails")
	ago := fs.Duration("ago", 0, "run with a clock this long ago")
	hold := fs.Bool("hold", false, "the receipt blocks until the script ends")
	backoff := fs.Bool("backoff", false, "keep the spec's retry backoff (else a failed effect may be tried again at once)")
	ts.Check(fs.Parse(args[1:]))
	opts := []idem.Option{idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	if *ago > 0 {
		// Leases and next-attempt times too: the failure happened then.
		then := func() time.Time { return time.Now().Add(-*ago) }
		opts = append(opts, idem.WithClock(then), idemtest.WithLeaseClock(then))
	}
	report := func(rep idem.Report, err error) {
		ts.Logf("%s (err: %v)", rep, err)
		fmt.Fprintln(ts.Stdout(), rep)
	}

	switch args[0] {
	case "refuse-poison", "accept-poison":
		defer closeDB()
		stmt := map[bool]map[string]string{
			true:  {"refuse-poison": refusePoisonPostgres, "accept-poison": acceptPoisonPostgres},
			false: {"refuse-poison": refusePoisonSQLite, "accept-poison": acceptPoisonSQLite},
		}[raw.postgres][args[0]]
		ts.Check(raw.exec(ctx, stmt))
	case "run":
		defer closeDB()
		notify := func(_ context.Context, key string, inv billing.Invoice) error {
			switch {
			case slices.Contains(strings.Split(*decline, ","), inv.InvoiceID):
				return idem.Permanent(errors.New("card declined for " + inv.InvoiceID))
			case slices.Contains(strings.Split(*failIDs, ","), inv.InvoiceID):
				return errors.New("mail server unavailable")
			case slices.Contains(strings.Split(*pauseIDs, ","), inv.InvoiceID):
				return idem.PauseEffect(time.Hour, errors.New("429 the mail account is throttled"))
			}
			return nil
		}
		// One job edit holds (the last given): the backoff's and, with
		// -pause, a circuit.
		edit := noBackoff[billing.Invoice](*backoff)
		if *pauseIDs != "" {
			edit = idemtest.WithJobEdit(func(j *idemrt.Job[billing.Invoice]) {
				for i := range j.Effects {
					j.Effects[i].Circuit = idemrt.Circuit{Failures: 5, CoolDown: 30 * time.Second}
				}
			})
		}
		j, err := billing.NewInvoiceSync(st, fixedInvoices{}, billing.InvoiceSyncEffects{NotifyNewInvoice: billing.NotifyNewInvoiceFunc(notify)},
			append(opts, edit)...)
		ts.Check(err)
		report(j.Run(ctx))
	case "drain", "hand-in":
		started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
		receipt := func(_ context.Context, key string, p billing.Payment) ([]byte, error) {
			if *hold {
				close(started)
				<-release
			}
			if *failReceipt {
				return nil, errors.New("receipt service unavailable")
			}
			return []byte("receipt for " + p.EventID), nil
		}
		j, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: billing.SendReceiptFunc(receipt)},
			append(opts, idem.WithOwner("worker-7"), noBackoff[billing.Payment](*backoff))...)
		ts.Check(err)
		if args[0] == "drain" {
			defer closeDB()
			report(j.Drain(ctx))
			return
		}
		if fs.NArg() != 1 {
			ts.Fatalf("usage: billing hand-in [-fail-receipt] [-ago D] [-hold] EVENT")
		}
		p := billing.Payment{EventID: fs.Arg(0), InvoiceID: "inv-1", AmountCents: 100, PaidAt: invoiceBase}
		if !*hold {
			defer closeDB()
			report(j.Process(ctx, p))
			return
		}
		// A worker in the middle of the provider call: it holds the
		// effect's lease until the script ends.
		go func() {
			defer close(done)
			_, _ = j.Process(ctx, p) // its outcome is not this test's: the script checks the ledger
		}()
		select {
		case <-started:
		case <-done:
			ts.Fatalf("hand-in %s: the receipt was never called", p.EventID)
		case <-time.After(30 * time.Second):
			ts.Fatalf("hand-in %s: the receipt was not called within 30s", p.EventID)
		}
		ts.Defer(func() {
			close(release)
			<-done
			closeDB()
		})
	default:
		ts.Fatalf("billing: unknown command %q", args[0])
	}
}

// fixedInvoices serves the invoices above by updated_at window, in one page.
type fixedInvoices struct{}

func (fixedInvoices) Fetch(_ context.Context, w idem.Window, _ string) ([]billing.Invoice, string, error) {
	var in []billing.Invoice
	for _, inv := range invoices {
		if !inv.UpdatedAt.Before(w.Since) && inv.UpdatedAt.Before(w.Until) {
			in = append(in, inv)
		}
	}
	return in, "", nil
}

// rawDB runs statements the runtime never does (the poison trigger).
type rawDB struct {
	postgres bool
	exec     func(ctx context.Context, stmt string) error
}

// openBilling opens $DB as the example does (example/db.go) and migrates it.
func openBilling(ts *testscript.TestScript, dsn string) (*billing.Store, rawDB, func()) {
	ctx := context.Background()
	if strings.HasPrefix(dsn, "postgres://") {
		pool, err := pgxpool.New(ctx, dsn)
		ts.Check(err)
		st := billing.NewPostgresStore(pool)
		ts.Check(st.Migrate(ctx))
		exec := func(ctx context.Context, stmt string) error { _, err := pool.Exec(ctx, stmt); return err }
		return st, rawDB{postgres: true, exec: exec}, pool.Close
	}
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(dsn)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
	ts.Check(err)
	st := billing.NewSQLiteStore(db)
	ts.Check(st.Migrate(ctx))
	exec := func(ctx context.Context, stmt string) error { _, err := db.ExecContext(ctx, stmt); return err }
	return st, rawDB{exec: exec}, func() { db.Close() }
}

// noBackoff lets a script run a job again at once after a failure: the
// scripts count attempts run by run, and the backoff between them is
// proven in idem/idemrt/provider_test.go and the crash simulations.
func noBackoff[U any](keep bool) idem.Option {
	return idemtest.WithJobEdit(func(j *idemrt.Job[U]) {
		if keep {
			return
		}
		for i := range j.Effects {
			j.Effects[i].Retry = idemrt.Backoff{Initial: time.Nanosecond, Max: time.Nanosecond}
		}
	})
}
