// Command example runs the billing jobs generated from idemgen.yaml against a
// fake billing API, a fake notifier and a fake receipt service, on SQLite (no
// flags) or PostgreSQL (-postgres URL). It runs the invoice sync, runs it
// again, crashes a run half way, recovers, and shows that every invoice has
// one row and one notification; then it replays a payment webhook.
//
// Run again on the same SQLite file (-db PATH), it finds the earlier run's
// rows and instead backfills every invoice through the same keys and
// ledger: nothing new, unless the spec's versions were bumped and the
// package regenerated in between (docs/example.md, "Bumping a version,
// on the example").
package main

//go:generate go tool idemgen generate
//go:generate go tool idemgen generate -f fulfilment.yaml

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	//idemgen:allow-testonly the demo simulates a day: its leases expire on its clock (WithLeaseClock)
	"github.com/idemgen/idemgen/idem/idemtest"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("example", flag.ContinueOnError)
	pgURL := fs.String("postgres", "", "PostgreSQL URL; without it the example uses an embedded SQLite file")
	dbPath := fs.String("db", "", "SQLite file (default: a new temporary file)")
	verbose := fs.Bool("v", false, "log every unit and effect")
	onRiver := fs.Bool("river", false, "with -postgres: run the jobs on River, two workers sharing the load")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	if *onRiver && *pgURL == "" {
		return errors.New("-river runs on PostgreSQL: give -postgres URL too")
	}
	var store *billing.Store
	switch {
	case *pgURL != "":
		schema := fmt.Sprintf("idemgen_example_%d", time.Now().UnixNano())
		st, pool, err := openPostgres(ctx, *pgURL, schema)
		if err != nil {
			return err
		}
		defer func() {
			_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			pool.Close()
		}()
		store = st
		fmt.Fprintf(out, "database: PostgreSQL, schema %s\n", schema)
		if *onRiver {
			return riverDemo(ctx, *pgURL, schema, pool, log, out)
		}
	default:
		path := *dbPath
		if path == "" {
			dir, err := os.MkdirTemp("", "idemgen-example-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			path = filepath.Join(dir, "billing.db")
		}
		st, closeDB, err := openSQLite(ctx, path)
		if err != nil {
			return err
		}
		defer closeDB()
		store = st
		fmt.Fprintf(out, "database: SQLite, %s\n", path)
	}
	return demo(ctx, store, log, out)
}

// The example's fixed timeline: the billing API's invoices and the clock
// are the same on every run, so a second run on the same file sees exactly
// the invoices the first one left behind.
var base = time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)

// putFirstInvoices puts the four invoices of the first run.
func putFirstInvoices(api *billingAPI) {
	for i := 1; i <= 4; i++ {
		api.put(billing.Invoice{InvoiceID: fmt.Sprintf("inv-%d", i), CustomerID: "cus-1", AmountCents: int64(1000 * i),
			CreatedAt: base.Add(-time.Hour), UpdatedAt: base.Add(time.Duration(-5*i) * time.Minute)})
	}
}

// putLaterInvoices puts, as of now, three new invoices and a change to inv-1.
func putLaterInvoices(api *billingAPI, now time.Time) {
	for i := 5; i <= 7; i++ {
		api.put(billing.Invoice{InvoiceID: fmt.Sprintf("inv-%d", i), CustomerID: "cus-2", AmountCents: int64(500 * i),
			CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Duration(i) * time.Second)})
	}
	api.put(billing.Invoice{InvoiceID: "inv-1", CustomerID: "cus-1", AmountCents: 1111, CreatedAt: base.Add(-time.Hour), UpdatedAt: now.Add(-time.Second)})
}

// laterAt is when putLaterInvoices happens in the first run.
const laterAt = 2 * time.Minute

func demo(ctx context.Context, store *billing.Store, log *slog.Logger, out io.Writer) error {
	clk := &clock{now: base}
	api := newBillingAPI()
	putFirstInvoices(api)
	mail := newNotifier()
	newJob := func(opts ...idem.Option) (*billing.InvoiceSync, error) {
		// A new job value is a restarted process: new lease owner, no caches.
		// The demo simulates minutes passing, on the database too: leases,
		// which run on the database's clock, expire on the simulated one.
		return billing.NewInvoiceSync(store, api, billing.InvoiceSyncEffects{NotifyNewInvoice: mail},
			append([]idem.Option{idem.WithClock(clk.Now), idemtest.WithLeaseClock(clk.Now), idem.WithLogger(log), idem.WithStart(base.Add(-24 * time.Hour))}, opts...)...)
	}
	job, err := newJob()
	if err != nil {
		return err
	}
	if earlier, err := job.Rows(ctx); err != nil {
		return err
	} else if len(earlier) > 0 {
		return againDemo(ctx, store, job, api, mail, clk, out, len(earlier))
	}
	step := func(title string, rep idem.Report, err error) {
		fmt.Fprintf(out, "\n== %s\n%s\n", title, rep)
		if err != nil {
			fmt.Fprintf(out, "run stopped: %v\n", err)
		}
	}

	rep, err := job.Run(ctx)
	step("first run: 4 invoices, each new one announced", rep, err)
	clk.advance(time.Minute)
	rep, err = job.Run(ctx)
	step("second run: nothing new", rep, err)

	// Three new invoices and one change; this run "crashes" right after the
	// notifier applied its first email: the context dies with the process.
	// It sends one email at a time, so the crash falls between emails; at
	// the default concurrency the other two would already be on their way.
	clk.advance(time.Minute)
	putLaterInvoices(api, clk.Now())
	crashing, err := newJob(idem.WithEffectConcurrency(1))
	if err != nil {
		return err
	}
	crashCtx, crash := context.WithCancel(ctx)
	mail.onCall = crash
	rep, err = crashing.Run(crashCtx)
	mail.onCall = nil
	step("third run: crashes after the first new email", rep, err)

	// Restart after the crashed run's lease (5m) has expired.
	clk.advance(6 * time.Minute)
	if job, err = newJob(); err != nil {
		return err
	}
	rep, err = job.Run(ctx)
	step("recovery run: owed emails sent, the rest applied", rep, err)
	clk.advance(time.Minute)
	rep, err = job.Run(ctx)
	step("one more run: nothing new", rep, err)

	rows, err := job.Rows(ctx)
	if err != nil {
		return err
	}
	calls, applied := mail.totals()
	fmt.Fprintf(out, "\ninvoices table: %d rows for %d invoices\n", len(rows), len(api.invoices))
	fmt.Fprintf(out, "notifier: %d calls, %d emails sent, one per new invoice (a repeat call carries the same key)\n", calls, applied)
	for _, r := range rows {
		fmt.Fprintf(out, "  %s amount=%d emails=%d\n", r.InvoiceID, r.AmountCents, mail.applied[billing.NotifyNewInvoiceKey(r)])
	}
	if len(rows) != len(api.invoices) || applied != len(api.invoices) {
		return errors.New("invariant broken: want one row and one email per invoice")
	}
	return webhookDemo(ctx, store, clk, log, out)
}

func webhookDemo(ctx context.Context, store *billing.Store, clk *clock, log *slog.Logger, out io.Writer) error {
	rc := newReceipts()
	hook, err := billing.NewPaymentWebhook(store, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithClock(clk.Now), idem.WithLogger(log))
	if err != nil {
		return err
	}
	p := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 1111, PaidAt: clk.Now()}
	first, err := hook.Process(ctx, p)
	if err != nil {
		return err
	}
	again, err := hook.Process(ctx, p) // the provider redelivers the webhook
	if err != nil {
		return err
	}
	p.AmountCents = 9999
	bad, _ := hook.Process(ctx, p) // same event id, different payload
	fmt.Fprintf(out, "\n== payment webhook\nfirst delivery: %s, receipt %s\n", first.Units[0].Outcome, first.Units[0].Effects[0].Result)
	fmt.Fprintf(out, "redelivery:     %s, receipt %s (kept result, no second receipt)\n", again.Units[0].Outcome, again.Units[0].Effects[0].Result)
	fmt.Fprintf(out, "changed payload: %s: %v\n", bad.Units[0].Outcome, bad.Units[0].Err)
	fmt.Fprintf(out, "receipt service calls: %d\n", rc.calls[billing.SendReceiptKey(billing.Payment{EventID: "evt_1"})])
	return nil
}

// againDemo is a run on a database an earlier run filled: the same invoices,
// backfilled through the same keys and ledger. With the checked-in spec
// nothing happens; after an effect version bump each invoice is notified
// once more under the new key, and after a job version bump the rows the
// old version wrote are listed by Stale and recomputed.
func againDemo(ctx context.Context, store *billing.Store, job *billing.InvoiceSync, api *billingAPI, mail *notifier,
	clk *clock, out io.Writer, held int) error {
	putLaterInvoices(api, base.Add(laterAt))
	clk.advance(10 * time.Minute) // after the first run's last step
	fmt.Fprintf(out, "\n== this database already holds %d invoices from an earlier run\n", held)
	if err := printStale(ctx, job, out, "before"); err != nil {
		return err
	}
	rep, err := job.Backfill(ctx, idem.Window{Since: base.Add(-24 * time.Hour), Until: clk.Now()})
	fmt.Fprintf(out, "\n== backfill of every invoice, through the same keys and ledger\n%s\n", rep)
	if err != nil {
		return err
	}
	calls, applied := mail.totals()
	fmt.Fprintf(out, "notifier: %d calls, %d emails sent\n", calls, applied)
	rows, err := job.Rows(ctx)
	if err != nil {
		return err
	}
	for _, r := range rows {
		if key := billing.NotifyNewInvoiceKey(r); mail.applied[key] > 0 {
			fmt.Fprintf(out, "  %s emails=%d key=%s\n", r.InvoiceID, mail.applied[key], key)
		}
	}
	if err := printStale(ctx, job, out, "after"); err != nil {
		return err
	}
	entries, err := store.Ledger(ctx)
	if err != nil {
		return err
	}
	byVersion := map[int]map[string]int{}
	for _, e := range entries {
		if e.Effect == "notify_new_invoice" {
			if byVersion[e.EffectVersion] == nil {
				byVersion[e.EffectVersion] = map[string]int{}
			}
			byVersion[e.EffectVersion][e.State]++
		}
	}
	fmt.Fprintln(out, "ledger, notify_new_invoice:")
	for _, v := range slices.Sorted(maps.Keys(byVersion)) {
		fmt.Fprintf(out, "  version %d:", v)
		for _, state := range slices.Sorted(maps.Keys(byVersion[v])) {
			fmt.Fprintf(out, " %s=%d", state, byVersion[v][state])
		}
		fmt.Fprintln(out)
	}
	return nil
}

// printStale prints the keys of the rows an older invoice_sync version wrote.
func printStale(ctx context.Context, job *billing.InvoiceSync, out io.Writer, when string) error {
	stale, err := job.Stale(ctx, 10)
	if err != nil {
		return err
	}
	list := "none"
	if len(stale) > 0 {
		list = fmt.Sprintf("%d %v", len(stale), stale)
	}
	fmt.Fprintf(out, "rows written by an older invoice_sync version (Stale), %s: %s\n", when, list)
	return nil
}
