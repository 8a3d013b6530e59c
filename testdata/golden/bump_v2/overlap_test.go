// Hand-written (idemgen leaves this file alone: it has no generated-code header).
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

type windowedV1 []bumpv1.Order

func (s windowedV1) Fetch(ctx context.Context, w idem.Window, page string) ([]bumpv1.Order, string, error) {
	var in []bumpv1.Order
	for _, o := range s {
		if !o.UpdatedAt.Before(w.Since) && o.UpdatedAt.Before(w.Until) {
			in = append(in, o)
		}
	}
	return in, "", nil
}

type windowedV2 []bumpv2.Order

func (s windowedV2) Fetch(ctx context.Context, w idem.Window, page string) ([]bumpv2.Order, string, error) {
	var in []bumpv2.Order
	for _, o := range s {
		if !o.UpdatedAt.Before(w.Since) && o.UpdatedAt.Before(w.Until) {
			in = append(in, o)
		}
	}
	return in, "", nil
}

// What the bump note says (generator/bumps.go): after notify's bump, a
// plain Run re-performs it for the units it reads again in its overlap (10m
// behind the mark), not for older ones; a Backfill does for the window it
// is given.
func TestRunAfterBumpRePerformsInItsOverlap(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		base := time.Date(2026, 2, 1, 8, 0, 0, 0, time.UTC)
		clock := testdb.NewClock(base)
		fx := &providers{}
		var st1 *bumpv1.Store
		var st2 *bumpv2.Store
		if db.Pool != nil {
			st1, st2 = bumpv1.NewPostgresStore(db.Pool), bumpv2.NewPostgresStore(db.Pool)
		} else {
			st1, st2 = bumpv1.NewSQLiteStore(db.SQL), bumpv2.NewSQLiteStore(db.SQL)
		}
		if err := st1.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		// old is 30 minutes behind the run, recent 3 minutes.
		old, recent := base.Add(-30*time.Minute), base.Add(-3*time.Minute)
		j1, err := bumpv1.NewOrderSync(st1, windowedV1{{OrderID: "old", Status: "new", UpdatedAt: old}, {OrderID: "recent", Status: "new", UpdatedAt: recent}},
			bumpv1.OrderSyncEffects{
				Notify: bumpv1.NotifyFunc(func(ctx context.Context, key string, u bumpv1.Order) error { return fx.notifyCall(key) }),
				Audit:  bumpv1.AuditFunc(func(ctx context.Context, key string, u bumpv1.Order) error { return fx.auditCall(key) }),
			}, idem.WithClock(clock.Now), idem.WithStart(base.Add(-time.Hour)), idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := j1.Run(ctx); err != nil || rep.Inserted != 2 || fx.notify.Total() != 2 {
			t.Fatalf("v1 run: %s, %v, %d notify calls", rep, err, fx.notify.Total())
		}

		// The bumped build's first Run, a minute later.
		if err := st2.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		j2, err := bumpv2.NewOrderSync(st2, windowedV2{{OrderID: "old", Status: "new", UpdatedAt: old}, {OrderID: "recent", Status: "new", UpdatedAt: recent}},
			bumpv2.OrderSyncEffects{
				Notify: bumpv2.NotifyFunc(func(ctx context.Context, key string, u bumpv2.Order) error { return fx.notifyCall(key) }),
				Audit:  bumpv2.AuditFunc(func(ctx context.Context, key string, u bumpv2.Order) error { return fx.auditCall(key) }),
			}, idem.WithClock(clock.Now), idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := j2.Run(ctx)
		if err != nil || rep.Seen != 1 || rep.EffectsDone != 1 {
			t.Fatalf("v2 run: %s, %v", rep, err)
		}
		if fx.notify.Of("notify:v2:recent") != 1 || fx.notify.Of("notify:v2:old") != 0 {
			t.Fatalf("after Run: notify v2 recent %d, old %d; want 1 and 0", fx.notify.Of("notify:v2:recent"), fx.notify.Of("notify:v2:old"))
		}
		// A Backfill over the hour reaches the older unit, once.
		if rep, err := j2.Backfill(ctx, idem.Window{Since: base.Add(-time.Hour), Until: base}); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("v2 backfill: %s, %v", rep, err)
		}
		if fx.notify.Of("notify:v2:old") != 1 || fx.notify.Of("notify:v2:recent") != 1 || fx.audit.Total() != 2 {
			t.Fatalf("after Backfill: notify v2 old %d, recent %d, audit %d", fx.notify.Of("notify:v2:old"), fx.notify.Of("notify:v2:recent"), fx.audit.Total())
		}
	})
}
