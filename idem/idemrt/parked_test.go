package idemrt_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// poisoned serves inv-1, inv-2 and inv-3 and makes the database refuse inv-2.
func poisoned(t *testing.T, f *billingtest.Fixture, db billingtest.DB) billing.Invoice {
	t.Helper()
	db.Exec(t, billingtest.RefusePoisonSQLite, billingtest.RefusePoisonPostgres)
	f.Invoice("inv-1", 100, f.Base.Add(-3*time.Minute))
	poison := f.Invoice("inv-2", 200, f.Base.Add(-2*time.Minute))
	poison.CustomerID = "poison"
	f.Source.Put(poison)
	f.Invoice("inv-3", 300, f.Base.Add(-time.Minute))
	return poison
}

func parkedUnits(t *testing.T, st *billing.Store) []idem.ParkedUnit {
	t.Helper()
	units, err := st.Parked(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return units
}

// parkedPoison serves inv-1 to inv-3 and runs the job until the database's
// refusals of inv-2 have parked it (max_attempts is 3), checking that the
// failing runs hold the watermark at it.
func parkedPoison(t *testing.T, st *billing.Store, db billingtest.DB) (*billingtest.Fixture, *billing.InvoiceSync, billing.Invoice) {
	t.Helper()
	f := billingtest.NewFixture()
	poison := poisoned(t, f, db)
	j := f.Job(t, st)
	for run := 1; run <= 3; run++ {
		rep := billingtest.RunChecked(t, j)
		wantParked, wantNew := 0, 0
		if run == 1 {
			wantNew = 2
		}
		if run == 3 {
			wantParked = 1
		}
		if rep.Failed != 1 || rep.Parked != wantParked || rep.Inserted != wantNew || rep.EffectsDone != wantNew {
			t.Fatalf("run %d: %s", run, rep)
		}
		if since := f.Source.LastWindow().Since; run > 1 && !since.Equal(poison.UpdatedAt.Add(-10*time.Minute)) {
			t.Fatalf("run %d fetched from %s; a failing unit must hold the watermark at itself (%s minus the overlap)", run, since, poison.UpdatedAt)
		}
		f.Clock.Advance(billingtest.RunGap)
	}
	return f, j, poison
}

// A unit the database keeps refusing fails alone and holds the watermark;
// after max_attempts failed runs it is parked, and the watermark passes it.
// Fetched again with the same payload it is skipped, not attempted; once
// upstream fixes it (a new payload) it is written, and its row goes.
func TestPoisonUnitIsParkedAndPassed(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f, j, poison := parkedPoison(t, st, db)

		units := parkedUnits(t, st)
		if len(units) != 1 {
			t.Fatalf("parked table %+v, want inv-2 alone", units)
		}
		u := units[0]
		if u.Job != "invoice_sync" || u.Key != poison.Key() || u.State != "parked" || u.Attempts != 3 ||
			!strings.Contains(u.LastError, "poison invoice refused") || u.Mark == nil || !u.Mark.Equal(poison.UpdatedAt) ||
			u.FirstFailedAt.IsZero() || !u.UpdatedAt.After(u.FirstFailedAt) {
			t.Fatalf("parked row %+v", u)
		}
		var stored billing.Invoice
		if err := json.Unmarshal(u.Payload, &stored); err != nil || stored.CustomerID != "poison" || !stored.UpdatedAt.Equal(poison.UpdatedAt) {
			t.Fatalf("stored payload %s (%v), want inv-2 as fetched", u.Payload, err)
		}

		// The watermark passed it: this run's window starts after it.
		if rep := billingtest.RunChecked(t, j); rep.Seen != 0 || f.Source.LastWindow().Since.Before(poison.UpdatedAt) {
			t.Fatalf("run after parking: %s, window %+v", rep, f.Source.LastWindow())
		}
		got := rows(t, j)
		if _, ok := got["inv-2"]; ok || len(got) != 2 {
			t.Fatalf("rows %v, want inv-1 and inv-3", got)
		}

		// Fetched again with the same payload it is skipped: not attempted
		// (the trigger would have failed it a fourth time), but reported.
		rep, err := j.Backfill(ctx, idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Base})
		billingtest.CheckFailures(t, "backfill over the parked unit", rep, err, false)
		if !errors.Is(err, idem.ErrParked) || rep.Seen != 3 || rep.Unchanged != 2 || rep.Parked != 1 || rep.Failed != 1 {
			t.Fatalf("backfill over the parked unit: %s, %v", rep, err)
		}
		if units := parkedUnits(t, st); len(units) != 1 || units[0].Attempts != 3 || units[0].State != "parked" {
			t.Fatalf("a skipped unit was attempted: %+v", units)
		}

		// Upstream fixes the invoice: a new payload is attempted, and written.
		fixed := poison
		fixed.CustomerID = "cus"
		fixed.UpdatedAt = f.Clock.Now()
		f.Source.Put(fixed)
		f.Clock.Advance(billingtest.RunGap)
		if rep := billingtest.RunChecked(t, j); rep.Inserted != 1 || rep.Failed != 0 || rep.Parked != 0 || rep.EffectsDone != 1 {
			t.Fatalf("run with the fixed invoice: %s", rep)
		}
		if units := parkedUnits(t, st); len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v", units)
		}
		if got := rows(t, j)["inv-2"].CustomerID; got != "cus" {
			t.Fatalf("inv-2 customer %q, want the fixed one", got)
		}
		if calls, applied := f.Mailer.Totals(); calls != 3 || applied != 3 {
			t.Fatalf("notifier saw %d calls, %d applied; want one per invoice", calls, applied)
		}
	})
}

// A person puts a parked unit back: each Run writes it from its stored
// payload, counting attempts from 0, until the write succeeds and its row
// goes with it.
func TestRetryPutsAParkedUnitBack(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f, j, _ := parkedPoison(t, st, db)

		if changes, err := st.Retry(ctx, "invoice_sync", "billing:invoice:nope"); !errors.Is(err, idem.ErrNothingUnderKey) {
			t.Fatalf("Retry of an unknown key: %+v, %v; want ErrNothingUnderKey", changes, err)
		}
		if changes, err := st.RetryParked(ctx, "invoice_sync"); len(changes) != 1 || err != nil || changes[0].Kind != idem.KindUnit || changes[0].State != "parked" {
			t.Fatalf("RetryParked: %+v, %v; want the one parked unit", changes, err)
		}
		if units := parkedUnits(t, st); len(units) != 1 || units[0].State != "retry" || units[0].Attempts != 0 {
			t.Fatalf("after RetryParked: %+v", units)
		}
		// Still refused: one attempt more, and it stays put back for the next Run.
		if rep := billingtest.RunChecked(t, j); rep.Seen != 1 || rep.Failed != 1 || rep.Parked != 0 {
			t.Fatalf("retry still refused: %s", rep)
		}
		if units := parkedUnits(t, st); len(units) != 1 || units[0].State != "retry" || units[0].Attempts != 1 {
			t.Fatalf("after a failed retry: %+v", units)
		}
		db.Exec(t, billingtest.AcceptPoisonSQLite, billingtest.AcceptPoisonPostgres)
		f.Clock.Advance(billingtest.RunGap)
		if rep := billingtest.RunChecked(t, j); rep.Seen != 1 || rep.Inserted != 1 || rep.Failed != 0 || rep.EffectsDone != 1 {
			t.Fatalf("retry after the fix: %s", rep)
		}
		if units := parkedUnits(t, st); len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v", units)
		}
		if got := rows(t, j)["inv-2"]; got.CustomerID != "poison" || got.AmountCents != 200 {
			t.Fatalf("inv-2 %+v, want the stored payload", got)
		}
		f.Clock.Advance(billingtest.RunGap)
		if rep := billingtest.RunChecked(t, j); rep.Seen != 0 {
			t.Fatalf("run after the retry: %s", rep)
		}
		if calls, _ := f.Mailer.Totals(); calls != 3 {
			t.Fatalf("notifier saw %d calls, want one per invoice", calls)
		}
	})
}

// A unit that fails twice, under its max_attempts, and is then written
// leaves no row behind; the watermark moves on.
func TestUnitFailingTwiceThenWrittenLeavesNoRow(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		f := billingtest.NewFixture()
		poison := poisoned(t, f, db)
		j := f.Job(t, st)
		for run := 1; run <= 2; run++ {
			if rep := billingtest.RunChecked(t, j); rep.Failed != 1 || rep.Parked != 0 {
				t.Fatalf("run %d: %s", run, rep)
			}
			f.Clock.Advance(billingtest.RunGap)
		}
		if units := parkedUnits(t, st); len(units) != 1 || units[0].State != "failing" || units[0].Attempts != 2 {
			t.Fatalf("after two failures: %+v", units)
		}
		db.Exec(t, billingtest.AcceptPoisonSQLite, billingtest.AcceptPoisonPostgres)
		if rep := billingtest.RunChecked(t, j); rep.Inserted != 1 || rep.Failed != 0 || rep.EffectsDone != 1 {
			t.Fatalf("run after the fix: %s", rep)
		}
		if units := parkedUnits(t, st); len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v", units)
		}
		f.Clock.Advance(billingtest.RunGap)
		if rep := billingtest.RunChecked(t, j); rep.Seen != 0 || f.Source.LastWindow().Since.Before(poison.UpdatedAt) {
			t.Fatalf("the watermark did not move on: %s, window %+v", rep, f.Source.LastWindow())
		}
	})
}

// Handed-in units without max_attempts stay failing, however often they
// fail; a person's Retry makes Drain write them from the stored payload.
func TestWebhookFailureRetriedByDrain(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		db.Exec(t, `CREATE TRIGGER refuse_payment BEFORE INSERT ON payments WHEN NEW.invoice_id = 'gone'
			BEGIN SELECT RAISE(ABORT, 'invoice gone'); END`,
			`CREATE FUNCTION refuse_payment() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN IF NEW.invoice_id = 'gone' THEN RAISE EXCEPTION 'invoice gone'; END IF; RETURN NEW; END $$;
			CREATE TRIGGER refuse_payment BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION refuse_payment()`)
		f := billingtest.NewFixture()
		rc := billingtest.NewReceipts()
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithClock(f.Clock.Now), idem.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		p := billing.Payment{EventID: "evt_9", InvoiceID: "gone", AmountCents: 900, PaidAt: f.Base}
		for try := 1; try <= 4; try++ {
			rep, _ := hook.Process(ctx, p)
			if rep.Failed != 1 || rep.Parked != 0 || rep.Units[0].Outcome != idem.OutcomeFailed {
				t.Fatalf("delivery %d: %s %+v", try, rep, rep.Units)
			}
		}
		if units := parkedUnits(t, st); len(units) != 1 || units[0].State != "failing" || units[0].Attempts != 4 || units[0].Mark != nil {
			t.Fatalf("payment_webhook has no max_attempts, so the unit stays failing: %+v", units)
		}
		if rep, err := hook.Drain(ctx); err != nil || rep.Seen != 0 {
			t.Fatalf("Drain wrote a unit nobody put back: %s, %v", rep, err)
		}
		db.Exec(t, `DROP TRIGGER refuse_payment`, `DROP TRIGGER refuse_payment ON payments`)
		if changes, err := st.Retry(ctx, "payment_webhook", p.Key()); len(changes) != 1 || err != nil {
			t.Fatalf("Retry: %+v, %v", changes, err)
		}
		if rep, err := hook.Drain(ctx); err != nil || rep.Inserted != 1 || rep.EffectsDone != 1 {
			t.Fatalf("Drain after Retry: %s, %v", rep, err)
		}
		if units := parkedUnits(t, st); len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v", units)
		}
		if rep, _ := hook.Process(ctx, p); rep.Deduped != 1 || rc.Calls[billing.SendReceiptKey(p)] != 1 {
			t.Fatalf("redelivery after the retry: %s, %d receipts", rep, rc.Calls[billing.SendReceiptKey(p)])
		}
	})
}

// A provider that calls its failure permanent parks the effect after one
// call; no later run, drain or replay calls it again.
func TestPermanentEffectFailureParksAtOnce(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		f.Mailer.Bounce = true
		j := f.Job(t, st)
		if rep := billingtest.RunChecked(t, j); rep.Inserted != 1 || rep.EffectsParked != 1 || rep.EffectsFailed != 1 {
			t.Fatalf("first run: %s", rep)
		}
		entries, err := st.Ledger(ctx)
		if err != nil || len(entries) != 1 || entries[0].State != idem.StateParked || entries[0].Attempts != 1 ||
			!strings.Contains(entries[0].LastError, "permanent: mailbox does not exist") ||
			!entries[0].Permanent || entries[0].ParkedReason != "permanent" {
			t.Fatalf("ledger %+v, %v; want failed after one attempt, permanently", entries, err)
		}
		f.Mailer.Bounce = false // it would succeed now, but a permanent failure is not retried
		f.Clock.Advance(time.Minute)
		if rep := billingtest.RunChecked(t, j); rep.EffectsDone != 0 {
			t.Fatalf("next run: %s", rep)
		}
		if rep, err := j.Drain(ctx); err != nil || rep.EffectsDone != 0 {
			t.Fatalf("drain: %s, %v", rep, err)
		}
		rep, err := j.Backfill(ctx, idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Base})
		billingtest.CheckFailures(t, "replay", rep, err, false)
		if !errors.Is(err, idem.ErrEffectParked) || !errors.Is(err, idem.ErrPermanent) || rep.EffectsParked != 1 || rep.EffectsDone != 0 {
			t.Fatalf("replay: %s, %v; want the effect reported parked, permanently", rep, err)
		}
		if calls, _ := f.Mailer.Totals(); calls != 1 {
			t.Fatalf("provider called %d times, want once", calls)
		}
	})
}

// A parked effect is in every Run's and Drain's Report.Backlog, whether or
// not the run reads its unit again: the first run, inside the overlap
// window, meets it (EffectsParked); a run after the window does not, and
// still counts it, until a person puts it back.
func TestParkedEffectInEveryReportsBacklog(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		f.Mailer.Bounce = true
		j := f.Job(t, st)
		parkedBacklog := func(call string, rep idem.Report, parked int64) {
			t.Helper()
			if rep.Backlog == nil || rep.Backlog.ParkedEffects != parked || rep.Backlog.OwedEffects != 0 {
				t.Fatalf("%s: %s; want the backlog to count %d parked effects", call, rep, parked)
			}
		}
		rep := billingtest.RunChecked(t, j)
		if rep.EffectsParked != 1 {
			t.Fatalf("first run: %s", rep)
		}
		parkedBacklog("first run", rep, 1)
		f.Mailer.Bounce = false
		// A newer invoice moves the watermark past inv-1 and its overlap:
		// the run after it does not read inv-1 again.
		f.Clock.Advance(billingtest.RunGap)
		f.Invoice("inv-2", 200, f.Base.Add(billingtest.RunGap-time.Minute))
		if rep := billingtest.RunChecked(t, j); rep.EffectsParked != 1 || rep.EffectsDone != 1 {
			t.Fatalf("run reading inv-2: %s", rep)
		}
		f.Clock.Advance(billingtest.RunGap)
		rep = billingtest.RunChecked(t, j)
		if rep.Seen != 1 || rep.EffectsParked != 0 {
			t.Fatalf("run after the overlap: %s; want inv-1 not read again", rep)
		}
		parkedBacklog("run after the overlap", rep, 1)
		rep, err := j.Drain(ctx)
		if err != nil {
			t.Fatal(err)
		}
		parkedBacklog("drain", rep, 1)
		if changes, err := st.RetryParked(ctx, "invoice_sync"); err != nil || len(changes) != 1 || changes[0].State != idem.StateParked {
			t.Fatalf("RetryParked: %+v, %v", changes, err)
		}
		rep = billingtest.RunChecked(t, j)
		if rep.EffectsDone != 1 {
			t.Fatalf("run after the retry: %s", rep)
		}
		parkedBacklog("run after the retry", rep, 0)
		if !strings.Contains(rep.String(), " backlog: owed=0 parked_effects=0 parked_units=0") {
			t.Fatalf("String leaves out the backlog: %s", rep)
		}
	})
}

// The same on handed-in units: the replayed Process reports the effect
// parked, with the provider's permanent error, and calls nothing.
func TestPermanentEffectFailureOnProcessReplay(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		rc := billingtest.NewReceipts()
		rc.Decline = true
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithClock(f.Clock.Now), idem.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		p := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: f.Base}
		first, _ := hook.Process(ctx, p)
		if first.Inserted != 1 || first.EffectsParked != 1 {
			t.Fatalf("first: %s", first)
		}
		if er := first.Units[0].Effects[0]; er.Outcome != idem.EffectParked || !errors.Is(er.Err, idem.ErrPermanent) || !errors.Is(er.Err, billingtest.ErrDeclined) {
			t.Fatalf("first effect %+v, want parked with the provider's permanent error", er)
		}
		rc.Decline = false
		again, _ := hook.Process(ctx, p)
		if again.Deduped != 1 || again.EffectsParked != 1 || again.Units[0].Effects[0].Outcome != idem.EffectParked {
			t.Fatalf("replay: %s %+v", again, again.Units)
		}
		// A stored failure replays as it was first answered: the same text,
		// and idemgen's errors.Is targets (the provider's own error values
		// do not outlive the process that saw them; their text does).
		was, is := first.Units[0].Effects[0].Err, again.Units[0].Effects[0].Err
		if was.Error() != is.Error() || !errors.Is(is, idem.ErrEffectParked) || !errors.Is(is, idem.ErrPermanent) {
			t.Fatalf("replayed failure %q, want %q, parked and permanent", is, was)
		}
		if rep, err := hook.Drain(ctx); err != nil || rep.EffectsDone != 0 {
			t.Fatalf("drain: %s, %v", rep, err)
		}
		if n := rc.Calls[billing.SendReceiptKey(p)]; n != 1 {
			t.Fatalf("receipt provider called %d times, want once", n)
		}
	})
}

// Why an effect is parked lives in the ledger's columns, not in its text:
// a transient failure whose text merely starts like a permanent one parks
// after max_attempts, says so, and replays as parked but not permanent.
func TestParkedEffectSaysWhyInItsColumns(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		f.Mailer.Failing = true
		f.Mailer.Failure = errors.New("permanent: looking, but a timeout")
		j := f.Job(t, st)
		for run := 1; run <= 5; run++ { // notify_new_invoice has max_attempts: 5
			billingtest.RunChecked(t, j)
			f.Clock.Advance(10 * time.Minute) // past the lease
		}
		entries, err := st.Ledger(ctx)
		if err != nil || len(entries) != 1 {
			t.Fatalf("ledger %+v, %v", entries, err)
		}
		if e := entries[0]; e.State != idem.StateParked || e.Attempts != 5 || e.Permanent || e.ParkedReason != "max_attempts" ||
			e.LastError != "permanent: looking, but a timeout" {
			t.Fatalf("ledger row %+v; want failed after 5 attempts, for max_attempts, not permanent, with the provider's text", e)
		}
		rep, err := j.Backfill(ctx, idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Base})
		billingtest.CheckFailures(t, "replay", rep, err, false)
		if !errors.Is(err, idem.ErrEffectParked) || errors.Is(err, idem.ErrPermanent) || rep.EffectsParked != 1 {
			t.Fatalf("replay: %s, %v; want parked, not permanent", rep, err)
		}
		if !strings.Contains(err.Error(), "permanent: looking, but a timeout") {
			t.Fatalf("replay %v lost the provider's text", err)
		}
		if calls, _ := f.Mailer.Totals(); calls != 5 {
			t.Fatalf("provider called %d times, want 5", calls)
		}
	})
}

// A row parked permanently before the ledger had its permanent and
// parked_reason columns (both at their defaults after the migration) said
// so only in its text; it still replays as permanent.
func TestEffectParkedBeforeTheReasonColumnsStaysPermanent(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		rc := billingtest.NewReceipts()
		rc.Decline = true
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: rc}, idem.WithClock(f.Clock.Now), idem.WithLogger(quiet))
		if err != nil {
			t.Fatal(err)
		}
		p := billing.Payment{EventID: "evt_1", InvoiceID: "inv-1", AmountCents: 500, PaidAt: f.Base}
		if first, _ := hook.Process(ctx, p); first.EffectsParked != 1 {
			t.Fatalf("first: %s", first)
		}
		const legacy = `UPDATE billing_idem_ledger SET permanent = false, parked_reason = NULL`
		db.Exec(t, legacy, legacy)
		again, err := hook.Process(ctx, p)
		if er := again.Units[0].Effects[0]; er.Outcome != idem.EffectParked || !errors.Is(er.Err, idem.ErrPermanent) {
			t.Fatalf("replay of a row parked the old way: %+v, %v; want parked, permanent", er, err)
		}
	})
}

// What a retry resends (docs/operations.md, "What a retry sends"): the
// payload stored when the effect was reserved. The invoice is fixed at its
// source after the effect was parked, and the next run writes the fix to
// the row, but a person's Retry still sends the amount the effect was
// reserved with; the fix reaches the provider only under a new key.
func TestRetryResendsThePayloadStoredAtReservation(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		f.Invoice("inv-1", 100, f.Base.Add(-time.Minute))
		f.Mailer.Bounce = true
		j := f.Job(t, st)
		if rep := billingtest.RunChecked(t, j); rep.Inserted != 1 || rep.EffectsParked != 1 {
			t.Fatalf("first run: %s", rep)
		}
		const key = "notify:new-invoice:v2:inv-1"
		f.Invoice("inv-1", 150, f.Base.Add(30*time.Second))
		f.Clock.Advance(time.Minute)
		if rep := billingtest.RunChecked(t, j); rep.Updated != 1 || rep.EffectsDone != 0 {
			t.Fatalf("run with the fixed invoice: %s", rep)
		}
		if got := rows(t, j)["inv-1"].AmountCents; got != 150 {
			t.Fatalf("row amount %d, want the fix", got)
		}
		f.Mailer.Bounce = false
		if _, err := st.Retry(ctx, "invoice_sync", key); err != nil {
			t.Fatal(err)
		}
		if rep, err := j.Drain(ctx); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("drain after retry: %s, %v", rep, err)
		}
		if got := f.Mailer.AmountsOf(key); !slices.Equal(got, []int64{100, 100}) {
			t.Fatalf("amounts sent under %s: %v, want the stored 100 twice", key, got)
		}
	})
}

// A parked unit that arrives with another payload is tried again with it,
// once per run that reads it; still refused, it is parked again at once,
// now with the new payload, and the next run with that payload skips it.
func TestParkedUnitWithANewPayloadIsTriedOncePerRun(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f, j, poison := parkedPoison(t, st, db)
		changed := poison
		changed.AmountCents = 999 // still customer poison: still refused
		changed.UpdatedAt = f.Clock.Now()
		f.Source.Put(changed)
		f.Clock.Advance(billingtest.RunGap)
		rep, err := j.Run(ctx)
		billingtest.CheckFailures(t, "run with the new payload", rep, err, false)
		if rep.Failed != 1 || rep.Parked != 1 || rep.Inserted != 0 {
			t.Fatalf("run with the new payload: %s", rep)
		}
		units := parkedUnits(t, st)
		var stored billing.Invoice
		if len(units) != 1 || units[0].State != "parked" || json.Unmarshal(units[0].Payload, &stored) != nil || stored.AmountCents != 999 {
			t.Fatalf("parked rows %+v, want inv-2 parked with the new payload", units)
		}
		attempts := units[0].Attempts
		// The same payload again: skipped, not attempted.
		rep, err = j.Backfill(ctx, idem.Window{Since: f.Base.Add(-time.Hour), Until: f.Clock.Now()})
		billingtest.CheckFailures(t, "backfill", rep, err, false)
		if units := parkedUnits(t, st); len(units) != 1 || units[0].Attempts != attempts {
			t.Fatalf("the unit parked with this payload was attempted again: %+v", units)
		}
	})
}
