// Hand-written behaviour tests of a version bump (idemgen leaves this file
// alone: it has no generated-code header).
//
// bump_v1 and bump_v2 are the same spec before and after the notify effect's
// version goes from 1 to 2. The real scenario is one package regenerated
// with the bumped version; two packages stand in for the two builds, so
// their specs give them identical bookkeeping (tables:) and destination
// table names, and bump_v2 runs on the database bump_v1 left behind, ledger,
// rows and migration versions included.
package bumpv2_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	bumpv1 "github.com/idemgen/idemgen/testdata/golden/bump_v1"
	bumpv2 "github.com/idemgen/idemgen/testdata/golden/bump_v2"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
)

// notifier and auditor count calls per key; both builds share them, as
// the real providers outlive a deploy.
type providers struct{ notify, audit testdb.Calls }

func (p *providers) notifyCall(key string) error { p.notify.Add(key); return nil }
func (p *providers) auditCall(key string) error  { p.audit.Add(key); return nil }

type v1Source struct{ orders []bumpv1.Order }

func (s *v1Source) Fetch(ctx context.Context, w idem.Window, page string) ([]bumpv1.Order, string, error) {
	return s.orders, "", nil
}

type v2Source struct{ orders []bumpv2.Order }

func (s *v2Source) Fetch(ctx context.Context, w idem.Window, page string) ([]bumpv2.Order, string, error) {
	return s.orders, "", nil
}

func TestVersionBumpPerformsOnceMoreAndRepeatsNothingElse(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		base := time.Date(2026, 2, 1, 8, 0, 0, 0, time.UTC)
		clock := func() time.Time { return base }
		fx := &providers{}
		orders := []struct {
			id, status string
		}{{"o1", "new"}, {"o2", "new"}, {"o3", "paid"}}

		// Build 1: notify at version 1.
		var st1 *bumpv1.Store
		if db.Pool != nil {
			st1 = bumpv1.NewPostgresStore(db.Pool)
		} else {
			st1 = bumpv1.NewSQLiteStore(db.SQL)
		}
		if err := st1.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		src1 := &v1Source{}
		for _, o := range orders {
			src1.orders = append(src1.orders, bumpv1.Order{OrderID: o.id, Status: o.status, UpdatedAt: base.Add(-time.Minute)})
		}
		j1, err := bumpv1.NewOrderSync(st1, src1, bumpv1.OrderSyncEffects{
			Notify: bumpv1.NotifyFunc(func(ctx context.Context, key string, u bumpv1.Order) error { return fx.notifyCall(key) }),
			Audit:  bumpv1.AuditFunc(func(ctx context.Context, key string, u bumpv1.Order) error { return fx.auditCall(key) }),
		}, idem.WithClock(clock), idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		window1 := idem.Window{Since: base.Add(-time.Hour), Until: base}
		if rep, err := j1.Backfill(ctx, window1); err != nil || rep.Inserted != 3 || rep.EffectsDone != 6 {
			t.Fatalf("v1: %s, %v", rep, err)
		}

		// Build 2, same database: notify at version 2.
		var st2 *bumpv2.Store
		if db.Pool != nil {
			st2 = bumpv2.NewPostgresStore(db.Pool)
		} else {
			st2 = bumpv2.NewSQLiteStore(db.SQL)
		}
		if err := st2.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		src2 := &v2Source{}
		for _, o := range orders {
			src2.orders = append(src2.orders, bumpv2.Order{OrderID: o.id, Status: o.status, UpdatedAt: base.Add(-time.Minute)})
		}
		j2, err := bumpv2.NewOrderSync(st2, src2, bumpv2.OrderSyncEffects{
			Notify: bumpv2.NotifyFunc(func(ctx context.Context, key string, u bumpv2.Order) error { return fx.notifyCall(key) }),
			Audit:  bumpv2.AuditFunc(func(ctx context.Context, key string, u bumpv2.Order) error { return fx.auditCall(key) }),
		}, idem.WithClock(clock), idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		window2 := idem.Window{Since: base.Add(-time.Hour), Until: base}
		rep, err := j2.Backfill(ctx, window2)
		if err != nil || rep.Unchanged != 3 || rep.Inserted+rep.Updated != 0 || rep.EffectsDone != 3 {
			t.Fatalf("v2 first pass: %s, %v", rep, err)
		}
		// Once more per unit, and only once: both effects report deduped.
		rep, err = j2.Backfill(ctx, window2)
		if err != nil || rep.Unchanged != 3 || rep.EffectsDone != 0 || rep.EffectsDeduped != 6 {
			t.Fatalf("v2 second pass: %s, %v", rep, err)
		}
		// A unit new under v2 owes only the v2 key.
		src2.orders = append(src2.orders, bumpv2.Order{OrderID: "o4", Status: "new", UpdatedAt: base.Add(-time.Minute)})
		if rep, err = j2.Backfill(ctx, window2); err != nil || rep.Inserted != 1 || rep.EffectsDone != 2 {
			t.Fatalf("v2 new unit: %s, %v", rep, err)
		}

		for _, id := range []string{"o1", "o2", "o3"} {
			if n := fx.notify.Of("notify:v1:" + id); n != 1 {
				t.Errorf("notify v1 %s: %d calls, want 1", id, n)
			}
		}
		for _, id := range []string{"o1", "o2", "o3", "o4"} {
			if n := fx.notify.Of("notify:v2:" + id); n != 1 {
				t.Errorf("notify v2 %s: %d calls, want 1", id, n)
			}
		}
		if fx.notify.Of("notify:v1:o4") != 0 || fx.notify.Total() != 7 {
			t.Errorf("notify calls %d, want 7 (3 under v1, 4 under v2)", fx.notify.Total())
		}
		// The unbumped effect is not repeated by the bump.
		if fx.audit.Total() != 4 || fx.audit.Keys() != 4 {
			t.Errorf("audit calls %d over %d keys, want 4 over 4", fx.audit.Total(), fx.audit.Keys())
		}
		rows, err := j2.Rows(ctx)
		if err != nil || len(rows) != 4 {
			t.Fatalf("rows %v, %v; want one per order", rows, err)
		}
		entries, err := st2.Ledger(ctx)
		if err != nil || len(entries) != 11 {
			t.Fatalf("%d ledger rows, %v; want 11", len(entries), err)
		}
		for _, e := range entries {
			if e.State != "done" {
				t.Errorf("ledger row %s is %s", e.Key, e.State)
			}
		}
	})
}
