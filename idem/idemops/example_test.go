package idemops_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
)

// A service reads its jobs' state as `idemgen status` does: New over the
// database its generated package writes to, described by the package's
// OpsPackage, then Status.
func ExampleDB_Status() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "idemops-example-")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(dir, "billing.db"))
	if err != nil {
		panic(err)
	}
	store := billing.NewSQLiteStore(db)
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	// One payment whose receipt the provider declined for good: parked.
	declined := billing.SendReceiptFunc(func(context.Context, string, billing.Payment) ([]byte, error) {
		return nil, idem.Permanent(fmt.Errorf("402 card declined"))
	})
	hook, err := billing.NewPaymentWebhook(store, billing.PaymentWebhookEffects{SendReceipt: declined}, idem.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	_, _ = hook.Process(ctx, billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: time.Now()})

	ops, err := idemops.New(ctx, db, store.Runtime(), idemops.SQLite, billing.OpsPackage(), quiet)
	if err != nil {
		panic(err)
	}
	defer ops.Close()
	status, err := ops.Status(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("healthy:", status.Healthy)
	for _, p := range status.Problems {
		fmt.Println("problem:", p)
	}
	for _, j := range status.Jobs {
		for _, e := range j.Effects {
			fmt.Printf("%s.%s: owed %d, parked %d, done %d\n", j.Job, e.Effect, e.Owed, e.Parked, e.Done)
		}
	}
	// Output:
	// healthy: false
	// problem: payment_webhook: 1 parked effect
	// invoice_sync.notify_new_invoice: owed 0, parked 0, done 0
	// payment_webhook.send_receipt: owed 0, parked 1, done 0
}
