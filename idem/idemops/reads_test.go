package idemops_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemrt"
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

// Status reads each job's progress row whole (a job the spec no longer
// has too), counts the parked table's units by state and an effect's
// parked rows (of an effect the spec no longer has, under the newest
// version they were parked under); StatusUpTo
// counts the first of them on the table's key and says there are more.
func TestStatusReadsProgressUnitsAndParked(t *testing.T) {
	billingtest.EachOpsDB(t, func(t *testing.T, db billingtest.OpsDB) {
		ctx := t.Context()
		now := time.Now().UTC().Truncate(time.Second)
		db.Ops.SetClock(func() time.Time { return now })
		tables := billing.OpsPackage().Tables
		exec := func(format string, args ...any) { q := fmt.Sprintf(format, args...); db.Exec(t, q, q) } // the same in both dialects
		at := func(d time.Duration) string { return "'" + now.Add(d).Format("2006-01-02T15:04:05.000000000Z") + "'" }
		exec(`INSERT INTO %s (job, watermark, cursor_token, cursor_position, job_version, updated_at) VALUES ('gone_sync', NULL, 'c-7', 7, 3, %s)`,
			tables.Progress, at(-time.Minute))
		exec(`INSERT INTO %s (job, watermark, cursor_position, job_version, updated_at) VALUES ('invoice_sync', %s, 0, 1, %s)`,
			tables.Progress, at(-2*time.Hour), at(-30*time.Second))
		for key, state := range map[string]string{"a": "failing", "b": "failing", "c": "parked", "d": "retry"} {
			exec(`INSERT INTO %s (job, unit_key, payload, payload_hash, attempts, last_error, state, job_version, first_failed_at, updated_at)
VALUES ('invoice_sync', '%s', '', '', 1, 'boom', '%s', 1, %s, %s)`, tables.Parked, key, state, at(-time.Hour), at(-time.Hour))
		}
		// An effect the spec no longer has, parked under two versions: counted under the newest.
		for i, v := range []int{2, 4} {
			exec(`INSERT INTO %s (effect_key, job, effect, effect_version, job_version, unit_key, payload, state, attempts, created_at, updated_at)
VALUES ('gone:%d', 'invoice_sync', 'gone_notice', %d, 1, 'u%d', '', 'failed', 1, %s, %s)`, tables.Ledger, i, v, i, at(-time.Hour), at(-time.Hour))
		}
		job := func(s *idemops.Status, name string) *idemops.JobStatus {
			for i := range s.Jobs {
				if s.Jobs[i].Job == name {
					return &s.Jobs[i]
				}
			}
			t.Fatalf("status has no job %s: %+v", name, s.Jobs)
			return nil
		}
		s, err := db.Ops.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if p := job(s, "gone_sync").Progress; p == nil || p.Watermark != nil || p.Cursor == nil || *p.Cursor != "c-7" || p.Position != 7 ||
			p.JobVersion != 3 || !p.Saved.Equal(now.Add(-time.Minute)) {
			t.Errorf("gone_sync's progress: %+v; want cursor c-7 at 7, version 3, saved a minute ago", p)
		}
		if p := job(s, "invoice_sync").Progress; p == nil || p.Watermark == nil || !p.Watermark.Equal(now.Add(-2*time.Hour)) || p.Cursor != nil ||
			!p.Saved.Equal(now.Add(-30*time.Second)) {
			t.Errorf("invoice_sync's progress: %+v; want the watermark two hours ago", p)
		}
		if u := job(s, "invoice_sync").Units; u != (idemops.UnitStatus{Failing: 2, Parked: 1, Retry: 1}) {
			t.Errorf("units: %+v; want 2 failing, 1 parked, 1 put back", u)
		}
		var gone *idemops.EffectStatus
		for i, e := range job(s, "invoice_sync").Effects {
			if e.Effect == "gone_notice" {
				gone = &job(s, "invoice_sync").Effects[i]
			}
		}
		if gone == nil || gone.InSpec || gone.Version != 4 || gone.Parked != 2 {
			t.Errorf("gone_notice: %+v; want 2 parked under version 4, its newest", gone)
		}
		s, err = db.Ops.StatusUpTo(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if u := job(s, "invoice_sync").Units; u != (idemops.UnitStatus{Failing: 2, Parked: 1, More: true}) {
			t.Errorf("units up to 2: %+v; want the first three rows (a, b, c) counted, and more", u)
		}
	})
}

// The compiled queries (internal/opspg, internal/opssqlite) name a parked
// ledger row by the state it is stored in, as the ledger's queries do.
func TestQueriesKnowTheParkedState(t *testing.T) {
	if idemrt.StoredParked != "failed" {
		t.Fatalf("idemrt.StoredParked is %q; the queries in internal/opspg and internal/opssqlite say 'failed'", idemrt.StoredParked)
	}
}
