package main

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/example/fulfilment"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Two generated packages in one module share one database: each migrates
// its own prefixed tables and migration history, and both speak the one
// runtime, so one handler deals with either's Report and errors.
func TestTwoPackagesShareOneDatabase(t *testing.T) {
	ctx := context.Background()
	type stores struct {
		billing    *billing.Store
		fulfilment *fulfilment.Store
	}
	check := func(t *testing.T, s stores) {
		f, rc := newFixture(), newReceipts()
		hook := newHook(t, s.billing, f, rc)
		notes := 0
		events, err := fulfilment.NewShipmentEvents(s.fulfilment, fulfilment.ShipmentEventsEffects{
			NotifyCustomer: fulfilment.NotifyCustomerFunc(func(context.Context, string, fulfilment.ShipmentEvent) error {
				notes++
				return nil
			}),
		}, idem.WithClock(f.clk.Now), idem.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		// One function for both packages' results: the runtime's types.
		var reports []idem.Report
		handle := func(rep idem.Report, err error) error {
			reports = append(reports, rep)
			return err
		}
		p := payment(f, "evt_shared", 100)
		ev := fulfilment.ShipmentEvent{EventID: "ship_1", ParcelID: "parcel-9", Status: "shipped", At: f.base}
		for range 2 {
			if err := handle(hook.Process(ctx, p)); err != nil {
				t.Fatal(err)
			}
			if err := handle(events.Process(ctx, ev)); err != nil {
				t.Fatal(err)
			}
		}
		changed := ev
		changed.Status = "lost"
		if err := handle(events.Process(ctx, changed)); !errors.Is(err, idem.ErrPayloadMismatch) {
			t.Fatalf("fulfilment mismatch: %v, want idem.ErrPayloadMismatch", err)
		}
		var total idem.Report
		for _, r := range reports {
			total.Add(r)
		}
		if total.Inserted != 2 || total.Deduped != 2 || total.Mismatched != 1 || total.EffectsDone != 2 || notes != 1 || len(rc.calls) != 1 {
			t.Fatalf("both packages together: %s, %d notes, receipts %v", total, notes, rc.calls)
		}
		// Each package sees its own ledger only.
		bl, err := s.billing.Ledger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fl, err := s.fulfilment.Ledger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(bl) != 1 || bl[0].Job != "payment_webhook" || len(fl) != 1 || fl[0].Job != "shipment_events" {
			t.Fatalf("ledgers: billing %+v, fulfilment %+v", bl, fl)
		}
	}
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "shared.db")
		bst, closeDB, err := openSQLite(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeDB)
		db, err := openSQLiteDB(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		fst := fulfilment.NewSQLiteStore(db)
		if err := fst.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, stores{bst, fst})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := idemtest.OpenPostgres(t)
		schema := pg.NewSchema(t)
		bst, pool, err := openPostgresConfig(ctx, pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		fst := fulfilment.NewPostgresStore(pool)
		if err := fst.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		check(t, stores{bst, fst})
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name LIKE '%_idem_migrations'", schema).Scan(&n); err != nil || n != 2 {
			t.Fatalf("%d migration tables, %v; want one per package", n, err)
		}
	})
}
