package idemrt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// Listings page on the ledger's key, and Purge deletes in batches (of 4
// here) until none is left, stopping at once under a cancelled context.
func TestLedgerPagesAndPurgeInBatches(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		for i := range 25 {
			f.Invoice(fmt.Sprintf("inv-%02d", i), 1, f.Base.Add(-time.Minute))
		}
		j, err := billing.NewInvoiceSync(st, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: f.Mailer},
			idem.WithClock(f.Clock.Now), idem.WithLogger(quiet), idem.WithPurgeBatch(4))
		if err != nil {
			t.Fatal(err)
		}
		billingtest.RunChecked(t, j)
		all, err := st.Ledger(ctx)
		if err != nil || len(all) <= 10 {
			t.Fatalf("Ledger: %d rows, %v; want more than a page of 10", len(all), err)
		}
		var paged []idem.LedgerEntry
		pages := 0
		for after := ""; ; pages++ {
			rows, next, err := st.LedgerPage(ctx, after, 10)
			if err != nil {
				t.Fatal(err)
			}
			paged = append(paged, rows...)
			if next == "" {
				break
			}
			after = next
		}
		if pages != (len(all)-1)/10 || len(paged) != len(all) {
			t.Fatalf("%d pages after the first, %d rows; want %d and %d", pages, len(paged), (len(all)-1)/10, len(all))
		}
		for i := range paged {
			if paged[i].Key != all[i].Key {
				t.Fatalf("row %d: page has %s, Ledger %s", i, paged[i].Key, all[i].Key)
			}
		}
		if _, _, err := st.LedgerPage(ctx, "", 0); err == nil {
			t.Fatal("LedgerPage with limit 0 succeeded")
		}

		f.Clock.Advance(730 * time.Hour) // past the effect's 720h retention
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		if n, err := j.Purge(cancelled); err == nil || n != 0 {
			t.Fatalf("purge under a cancelled context: %d, %v; want 0 and an error", n, err)
		}
		n, err := j.Purge(ctx)
		if err != nil || n != int64(len(all)) {
			t.Fatalf("purged %d, %v; want %d", n, err, len(all))
		}
		if rows, next, err := st.LedgerPage(ctx, "", 10); err != nil || len(rows) != 0 || next != "" {
			t.Fatalf("after purge: %d rows, next %q, %v", len(rows), next, err)
		}
		if units, next, err := st.ParkedPage(ctx, "invoice_sync", "", 10); err != nil || len(units) != 0 || next != "" {
			t.Fatalf("parked page: %d, %q, %v", len(units), next, err)
		}
	})
}
