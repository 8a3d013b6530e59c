package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
)

// riverDemo runs the billing jobs on River: two workers (each its own pool,
// as two processes would have) share payments that a web handler enqueues
// in its own transactions, and the periodic invoice sync runs on one of
// them at a time.
func riverDemo(ctx context.Context, dsn, schema string, pool *pgxpool.Pool, log *slog.Logger, out io.Writer) error {
	if err := migrateRiver(ctx, pool); err != nil {
		return err
	}
	fmt.Fprintln(out, "River migrations applied (rivermigrate)")
	rc, mail, api := newReceipts(), newNotifier(), newBillingAPI()
	recent := time.Now().Add(-time.Minute).Truncate(time.Second).UTC() // the API's invoices changed a minute ago
	for i := 1; i <= 4; i++ {
		id := fmt.Sprintf("inv-%d", i)
		at := recent.Add(time.Duration(i) * time.Second)
		api.put(billing.Invoice{InvoiceID: id, CustomerID: "cus-" + id, AmountCents: int64(1000 * i), CreatedAt: at, UpdatedAt: at})
	}
	var clients []*river.Client[pgx.Tx]
	var pools []*pgxpool.Pool
	defer func() { // stop the workers, then close their pools
		for _, c := range clients {
			stop, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = c.Stop(stop)
			cancel()
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	var hook *billing.PaymentWebhook
	for _, name := range []string{"worker-1", "worker-2"} {
		cfg, err := pgxpool.ParseConfig(dsn)
		if err != nil {
			return err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
		cfg.ConnConfig.RuntimeParams["application_name"] = name
		wpool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return err
		}
		pools = append(pools, wpool)
		st := billing.NewPostgresStore(wpool)
		opts := []idem.Option{idem.WithLogger(log), idem.WithOwner(name)}
		h, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, opts...)
		if err != nil {
			return err
		}
		sync, err := billing.NewInvoiceSync(st, api, billing.InvoiceSyncEffects{NotifyNewInvoice: mail},
			append(opts, idem.WithStart(recent.Add(-time.Hour)))...)
		if err != nil {
			return err
		}
		client, err := newRiverClient(wpool, billing.RiverJobs{PaymentWebhook: h, InvoiceSync: sync}, fastRiver(name, log))
		if err != nil {
			return err
		}
		if err := client.Start(ctx); err != nil {
			return err
		}
		clients = append(clients, client)
		hook = h
	}
	fmt.Fprintln(out, "two River workers started; invoice_sync runs every 1m (and at start), one run at a time")

	// A web handler: its own transaction enqueues the payments (InsertTx);
	// a retried request enqueues them again, and River skips the copies.
	var payments []billing.Payment
	for i := 1; i <= 20; i++ {
		payments = append(payments, billing.Payment{EventID: fmt.Sprintf("evt_%02d", i), InvoiceID: "inv-1", AmountCents: 100, PaidAt: recent})
	}
	for range 2 {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		if err := hook.InsertTx(ctx, clients[0], tx, payments...); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "enqueued 20 payments in a handler's transaction, and the same 20 again (a retried request)")

	deadline := time.Now().Add(time.Minute)
	for {
		states, err := riverJobStates(ctx, pool, billing.PaymentWebhookArgs{}.Kind())
		if err != nil {
			return err
		}
		var invoices, owed int
		if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM invoices), (SELECT count(*) FROM billing_idem_ledger WHERE state = 'pending')").Scan(&invoices, &owed); err != nil {
			return err
		}
		if states["completed"] == len(payments) && invoices == 4 && owed == 0 {
			fmt.Fprintf(out, "River payment jobs: %v\n", states)
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("River did not finish within a minute: payment jobs %v, %d invoices, %d effects owed", states, invoices, owed)
		}
		time.Sleep(100 * time.Millisecond)
	}
	rows, err := pool.Query(ctx, "SELECT attempted_by[array_length(attempted_by, 1)], count(*) FROM river_job WHERE kind = $1 GROUP BY 1 ORDER BY 1", billing.PaymentWebhookArgs{}.Kind())
	if err != nil {
		return err
	}
	for rows.Next() {
		var worker string
		var n int
		if err := rows.Scan(&worker, &n); err != nil {
			return err
		}
		fmt.Fprintf(out, "  %s worked %d payments\n", worker, n)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	sent, once := 0, 0
	for _, p := range payments {
		if n := rc.calls[billing.SendReceiptKey(p)]; n > 0 {
			sent++
			if n == 1 {
				once++
			}
		}
	}
	calls, applied := mail.totals()
	fmt.Fprintf(out, "receipts: %d of %d payments sent, %d of them exactly once\n", sent, len(payments), once)
	fmt.Fprintf(out, "invoice_sync (periodic): 4 invoices, notifier %d calls, %d emails sent\n", calls, applied)
	return nil
}
