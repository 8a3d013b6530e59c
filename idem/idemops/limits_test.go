package idemops_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// Limits reads an effect's limits rows as they are: the pacing row's next
// start, the call slots held now (not one whose hold is over, nor an empty
// one), the gate row left out of both, and the override set by hand,
// whose rate and concurrency are the ones followed.
func TestLimitsReadTheLimitsRows(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		ctx := t.Context()
		now := time.Now().UTC().Truncate(time.Second)
		db.Ops.SetClock(func() time.Time { return now })
		table := billing.OpsPackage().Tables.Limits
		exec := func(format string, args ...any) { q := fmt.Sprintf(format, args...); db.Exec(t, q, q) } // the same in both dialects
		row := func(slot int, held string) {
			exec(`INSERT INTO %s (job, effect, slot, held_until) VALUES ('payment_webhook', 'send_receipt', %d, %s)`, table, slot, held)
		}
		at := func(d time.Duration) string { return "'" + now.Add(d).Format("2006-01-02T15:04:05.000000000Z") + "'" }
		row(-1, at(time.Minute)) // pacing: the next call starts in a minute
		row(0, at(5*time.Minute))
		row(1, at(-5*time.Minute)) // a hold that is over
		row(2, "NULL")
		row(3, at(time.Hour))
		exec(`INSERT INTO %s (job, effect, slot, gate, held_until, since, reason) VALUES ('payment_webhook', 'send_receipt', -2, 'paused', %s, %s, 'x')`,
			table, at(2*time.Hour), at(0))
		if err := db.Ops.SetLimits(ctx, "payment_webhook", "send_receipt", idem.LimitOverride{Rate: idem.Rate{N: 10, Per: time.Minute}, Concurrency: 4, By: "bob"}); err != nil {
			t.Fatal(err)
		}
		limits, err := db.Ops.Limits(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(limits) != 1 {
			t.Fatalf("limits: %+v; want send_receipt's", limits)
		}
		l := limits[0]
		if l.Job != "payment_webhook" || l.Effect != "send_receipt" || l.Held != 2 || l.NextStart == nil || !l.NextStart.Equal(now.Add(time.Minute)) ||
			l.Override == nil || l.Override.By != "bob" || l.RateN != 10 || l.RatePer != time.Minute || l.Concurrency != 4 || l.Booked != 10 {
			t.Errorf("limit: %+v (override %+v); want 2 held, the next start in a minute (10 booked at 10/m), bob's override followed", l, l.Override)
		}
		g, err := db.Ops.Gate(ctx, "payment_webhook", "send_receipt")
		if err != nil || g == nil || g.State != "paused" || g.Reason != "x" || !g.Until.Equal(now.Add(2*time.Hour)) || !g.Since.Equal(now) {
			t.Errorf("gate: %+v, %v; want paused for two hours", g, err)
		}
	})
}
