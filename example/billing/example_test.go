package billing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "github.com/ncruces/go-sqlite3/driver" // pure-Go SQLite: nothing to install

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
)

// These examples run the package idemgen generated from
// example/idemgen.yaml on an embedded SQLite, as a service would run it on
// PostgreSQL.

var quiet = idem.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// openStore opens a new SQLite database in dir and migrates it: the
// package's tables and the runtime's bookkeeping.
func openStore(ctx context.Context, dir string) (*billing.Store, func()) {
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "billing.db")+"?_pragma=busy_timeout(10000)")
	if err != nil {
		panic(err)
	}
	store := billing.NewSQLiteStore(db)
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	return store, func() { db.Close() }
}

// receipts is the receipt provider: it answers with a receipt id and
// declines the card of invoice "inv-declined" for good, until it is fixed.
type receipts struct {
	calls     int
	cardFixed bool
}

func (r *receipts) SendReceipt(_ context.Context, key string, p billing.Payment) ([]byte, error) {
	r.calls++
	if p.InvoiceID == "inv-declined" && !r.cardFixed {
		return nil, idem.Permanent(errors.New("402 card declined"))
	}
	return []byte("rcpt-" + p.EventID), nil
}

// A payment handed in twice (a webhook delivers at least once) is written
// once and its receipt sent once; the second delivery gets the receipt
// the first one kept.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "billing-example-")
	defer os.RemoveAll(dir)
	store, closeDB := openStore(ctx, dir)
	defer closeDB()

	provider := &receipts{}
	hook, err := billing.NewPaymentWebhook(store, billing.PaymentWebhookEffects{SendReceipt: provider}, quiet)
	if err != nil {
		panic(err)
	}
	payment := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)}
	for range 2 {
		rep, err := hook.Process(ctx, payment)
		if err != nil {
			panic(err)
		}
		u := rep.Units[0]
		fmt.Printf("%s: %s, receipt %s (%s)\n", u.Key, u.Outcome, u.Effects[0].Result, u.Effects[0].Outcome)
	}
	fmt.Println("receipts sent:", provider.calls)
	// Output:
	// payments:event:evt_1: inserted, receipt rcpt-evt_1 (done)
	// payments:event:evt_1: deduped, receipt rcpt-evt_1 (deduped)
	// receipts sent: 1
}

// Process returns a *idem.FailuresError when a unit or an effect did not
// end applied; errors.Is finds what happened to it.
func ExamplePaymentWebhook_Process() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "billing-example-")
	defer os.RemoveAll(dir)
	store, closeDB := openStore(ctx, dir)
	defer closeDB()
	hook, err := billing.NewPaymentWebhook(store, billing.PaymentWebhookEffects{SendReceipt: &receipts{}}, quiet)
	if err != nil {
		panic(err)
	}

	paid := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	first := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: paid}
	changed := first
	changed.AmountCents = 501 // the same event, another amount
	declined := billing.Payment{EventID: "evt_2", InvoiceID: "inv-declined", AmountCents: 700, PaidAt: paid}
	for _, p := range []billing.Payment{first, changed, declined} {
		_, err := hook.Process(ctx, p)
		switch {
		case err == nil:
			fmt.Println(p.EventID, "applied")
		case errors.Is(err, idem.ErrPayloadMismatch):
			fmt.Println(p.EventID, "refused: same key, another payload")
		case errors.Is(err, idem.ErrEffectParked):
			fmt.Println(p.EventID, "written, its receipt parked; permanent:", errors.Is(err, idem.ErrPermanent))
		default:
			fmt.Println(p.EventID, "failed, retry later:", err)
		}
	}
	// Output:
	// evt_1 applied
	// evt_1 refused: same key, another payload
	// evt_2 written, its receipt parked; permanent: true
}

// invoices is the billing service's list, served by updated_at window.
type invoices []billing.Invoice

func (s invoices) Fetch(_ context.Context, w idem.Window, _ string) ([]billing.Invoice, string, error) {
	var in []billing.Invoice
	for _, inv := range s {
		if !inv.UpdatedAt.Before(w.Since) && inv.UpdatedAt.Before(w.Until) {
			in = append(in, inv)
		}
	}
	return in, "", nil
}

// Run copies the invoices changed since the last run and notifies each
// new one once. A second run reads its overlap again and changes nothing.
func ExampleInvoiceSync_Run() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "billing-example-")
	defer os.RemoveAll(dir)
	store, closeDB := openStore(ctx, dir)
	defer closeDB()

	now := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	source := invoices{
		{InvoiceID: "inv-1", CustomerID: "cus-1", AmountCents: 500, CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-3 * time.Minute)},
		{InvoiceID: "inv-2", CustomerID: "cus-2", AmountCents: 700, CreatedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-2 * time.Minute)},
	}
	notices := 0
	notify := billing.NotifyNewInvoiceFunc(func(_ context.Context, key string, _ billing.Invoice) error {
		notices++
		return nil
	})
	job, err := billing.NewInvoiceSync(store, source, billing.InvoiceSyncEffects{NotifyNewInvoice: notify},
		quiet, idem.WithClock(func() time.Time { return now }), idem.WithStart(now.Add(-24*time.Hour)))
	if err != nil {
		panic(err)
	}
	for range 2 {
		rep, err := job.Run(ctx)
		if err != nil {
			panic(err)
		}
		fmt.Printf("inserted %d, unchanged %d, notified %d, already notified %d\n", rep.Inserted, rep.Unchanged, rep.EffectsDone, rep.EffectsDeduped)
	}
	fmt.Println("notices sent:", notices)
	// Output:
	// inserted 2, unchanged 0, notified 2, already notified 0
	// inserted 0, unchanged 2, notified 0, already notified 2
	// notices sent: 2
}

// A receipt the provider declined is parked until a person looks; once
// the card is fixed, RetryParked puts the job's parked effects back and
// the next Drain performs them.
func ExampleStore_RetryParked() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "billing-example-")
	defer os.RemoveAll(dir)
	store, closeDB := openStore(ctx, dir)
	defer closeDB()
	provider := &receipts{}
	hook, err := billing.NewPaymentWebhook(store, billing.PaymentWebhookEffects{SendReceipt: provider}, quiet)
	if err != nil {
		panic(err)
	}
	p := billing.Payment{EventID: "evt_9", InvoiceID: "inv-declined", AmountCents: 900, PaidAt: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)}
	if _, err := hook.Process(ctx, p); !errors.Is(err, idem.ErrEffectParked) {
		panic(err)
	}

	changes, err := store.RetryParked(ctx, "payment_webhook")
	if err != nil {
		panic(err)
	}
	for _, c := range changes {
		fmt.Println("put back:", c.Key, "was", c.State)
	}
	provider.cardFixed = true
	rep, err := hook.Drain(ctx)
	fmt.Println("drained: done", rep.EffectsDone, "parked", rep.EffectsParked, err)
	// Output:
	// put back: receipt:v1:evt_9 was parked
	// drained: done 1 parked 0 <nil>
}
