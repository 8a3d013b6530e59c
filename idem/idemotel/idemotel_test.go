package idemotel_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemotel"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// Both jobs of the package, under one idemotel.Option, through runs with
// inserts, dedupes, a mismatch, failing, parked and drained effects and a
// parked unit: every counter, the histogram's counts, the gauge read from
// the database and the span tree are checked against what those runs did.
func TestOpenTelemetry(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		reader := sdkmetric.NewManualReader()
		spans := tracetest.NewSpanRecorder()
		otelOpt := idemotel.Option(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
			sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))

		// invoice_sync: inv-1 and inv-3 are inserted and notified in run 1
		// and deduped in runs 2 and 3; the database refuses inv-2, which
		// fails runs 1 and 2 and is parked by run 3 (max_attempts 3).
		f := billingtest.NewFixture()
		db.Exec(t, billingtest.RefusePoisonSQLite, billingtest.RefusePoisonPostgres)
		f.Invoice("inv-1", 100, f.Base.Add(-3*time.Minute))
		f.CustomerInvoice("inv-2", "poison", 200, f.Base.Add(-2*time.Minute))
		f.Invoice("inv-3", 300, f.Base.Add(-time.Minute))
		invoices, err := billing.NewInvoiceSync(st, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: billingtest.NewMailer()},
			idem.WithClock(f.Clock.Now), idem.WithLogger(quiet), idem.WithStart(f.Base.Add(-24*time.Hour)), otelOpt)
		if err != nil {
			t.Fatal(err)
		}
		for run := 1; run <= 3; run++ {
			rep, err := invoices.Run(ctx)
			billingtest.CheckFailures(t, "run", rep, err, false)
			f.Clock.Advance(billingtest.RunGap)
		}

		// payment_webhook: evt_1 is sent, then redelivered (deduped), then
		// redelivered changed (a mismatch); evt_2's receipt fails, and fails
		// again in Drain (owed still: max_attempts 3); evt_3's is declined
		// for good (parked). The provider records the span it is called in.
		var mu sync.Mutex
		calledIn := map[string]trace.SpanID{}
		provider := billing.SendReceiptFunc(func(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
			mu.Lock()
			calledIn[key] = trace.SpanContextFromContext(ctx).SpanID()
			mu.Unlock()
			switch p.EventID {
			case "evt_2":
				return nil, errors.New("mail server down")
			case "evt_3":
				return nil, idem.Permanent(billingtest.ErrDeclined)
			}
			return []byte("rcpt-" + p.EventID), nil
		})
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: provider},
			idem.WithClock(f.Clock.Now), idemtest.WithLeaseClock(f.Clock.Now), idem.WithLogger(quiet), otelOpt)
		if err != nil {
			t.Fatal(err)
		}
		changed := f.Payment("evt_1", 500)
		changed.AmountCents++
		for _, p := range []billing.Payment{f.Payment("evt_1", 500), f.Payment("evt_1", 500), changed, f.Payment("evt_2", 700), f.Payment("evt_3", 900)} {
			rep, err := hook.Process(ctx, p)
			billingtest.CheckFailures(t, "process "+p.EventID, rep, err, true)
		}
		f.Clock.Advance(time.Minute) // past evt_2's backoff (the hook's leases run on this clock)
		rep, err := hook.Drain(ctx)
		billingtest.CheckFailures(t, "drain", rep, err, false)
		if rep.EffectsFailed != 1 {
			t.Fatalf("drain: %s, want evt_2's receipt failed again", rep)
		}

		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		wantMetrics(t, rm, `
idemgen.backlog{job=invoice_sync,state=owed} 0
idemgen.backlog{job=invoice_sync,state=parked} 1
idemgen.backlog{job=payment_webhook,state=owed} 1
idemgen.backlog{job=payment_webhook,state=parked} 1
idemgen.effect.duration{effect=notify_new_invoice,job=invoice_sync,outcome=done} count 2
idemgen.effect.duration{effect=send_receipt,job=payment_webhook,outcome=done} count 1
idemgen.effect.duration{effect=send_receipt,job=payment_webhook,outcome=failed} count 2
idemgen.effect.duration{effect=send_receipt,job=payment_webhook,outcome=parked} count 1
idemgen.effects{effect=notify_new_invoice,job=invoice_sync,outcome=deduped} 4
idemgen.effects{effect=notify_new_invoice,job=invoice_sync,outcome=done} 2
idemgen.effects{effect=send_receipt,job=payment_webhook,outcome=deduped} 1
idemgen.effects{effect=send_receipt,job=payment_webhook,outcome=done} 1
idemgen.effects{effect=send_receipt,job=payment_webhook,outcome=failed} 2
idemgen.effects{effect=send_receipt,job=payment_webhook,outcome=parked} 1
idemgen.units{job=invoice_sync,outcome=failed} 2
idemgen.units{job=invoice_sync,outcome=inserted} 2
idemgen.units{job=invoice_sync,outcome=parked} 1
idemgen.units{job=invoice_sync,outcome=unchanged} 4
idemgen.units{job=payment_webhook,outcome=deduped} 1
idemgen.units{job=payment_webhook,outcome=inserted} 3
idemgen.units{job=payment_webhook,outcome=mismatch} 1
`)

		// Runs are roots; batches of units below them (two pages of two and
		// one invoice per run); effect calls below the batch or, in Drain,
		// the run. Events list each unit and effect outcome; failures are
		// exceptions, and set the span's status.
		got := renderSpans(spans.Ended())
		want := `
idemgen.run invoice_sync ERROR {job=invoice_sync,operation=run,report.effects_done=2,report.failed=1,report.inserted=2,report.seen=3}
  event exception {}
  idemgen.batch invoice_sync {batch.units=2,job=invoice_sync}
    event idemgen.effect {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-1,outcome=done}
    event idemgen.unit {key=billing:invoice:inv-1,outcome=inserted}
    event exception {key=billing:invoice:inv-2,outcome=failed}
    idemgen.effect notify_new_invoice {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-1,job=invoice_sync,key=billing:invoice:inv-1,outcome=done}
  idemgen.batch invoice_sync {batch.units=1,job=invoice_sync}
    event idemgen.effect {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-3,outcome=done}
    event idemgen.unit {key=billing:invoice:inv-3,outcome=inserted}
    idemgen.effect notify_new_invoice {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-3,job=invoice_sync,key=billing:invoice:inv-3,outcome=done}
idemgen.run invoice_sync ERROR {job=invoice_sync,operation=run,report.effects_deduped=2,report.failed=1,report.seen=3,report.unchanged=2}
  event exception {}
  idemgen.batch invoice_sync {batch.units=2,job=invoice_sync}
    event idemgen.effect {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-1,outcome=deduped}
    event idemgen.unit {key=billing:invoice:inv-1,outcome=unchanged}
    event exception {key=billing:invoice:inv-2,outcome=failed}
  idemgen.batch invoice_sync {batch.units=1,job=invoice_sync}
    event idemgen.effect {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-3,outcome=deduped}
    event idemgen.unit {key=billing:invoice:inv-3,outcome=unchanged}
idemgen.run invoice_sync ERROR {job=invoice_sync,operation=run,report.effects_deduped=2,report.failed=1,report.parked=1,report.seen=3,report.unchanged=2}
  event exception {}
  idemgen.batch invoice_sync {batch.units=2,job=invoice_sync}
    event idemgen.effect {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-1,outcome=deduped}
    event idemgen.unit {key=billing:invoice:inv-1,outcome=unchanged}
    event exception {key=billing:invoice:inv-2,outcome=parked}
  idemgen.batch invoice_sync {batch.units=1,job=invoice_sync}
    event idemgen.effect {effect=notify_new_invoice,effect_key=notify:new-invoice:v2:inv-3,outcome=deduped}
    event idemgen.unit {key=billing:invoice:inv-3,outcome=unchanged}
idemgen.run payment_webhook {job=payment_webhook,operation=process,report.effects_done=1,report.inserted=1,report.seen=1}
  idemgen.batch payment_webhook {batch.units=1,job=payment_webhook}
    event idemgen.effect {effect=send_receipt,effect_key=receipt:v1:evt_1,outcome=done}
    event idemgen.unit {key=payments:event:evt_1,outcome=inserted}
    idemgen.effect send_receipt {effect=send_receipt,effect_key=receipt:v1:evt_1,job=payment_webhook,key=payments:event:evt_1,outcome=done}
idemgen.run payment_webhook {job=payment_webhook,operation=process,report.deduped=1,report.effects_deduped=1,report.seen=1}
  idemgen.batch payment_webhook {batch.units=1,job=payment_webhook}
    event idemgen.effect {effect=send_receipt,effect_key=receipt:v1:evt_1,outcome=deduped}
    event idemgen.unit {key=payments:event:evt_1,outcome=deduped}
idemgen.run payment_webhook ERROR {job=payment_webhook,operation=process,report.failed=1,report.mismatched=1,report.seen=1}
  event exception {}
  idemgen.batch payment_webhook {batch.units=1,job=payment_webhook}
    event exception {key=payments:event:evt_1,outcome=mismatch}
idemgen.run payment_webhook ERROR {job=payment_webhook,operation=process,report.effects_failed=1,report.inserted=1,report.seen=1}
  event exception {}
  idemgen.batch payment_webhook {batch.units=1,job=payment_webhook}
    event exception {effect=send_receipt,effect_key=receipt:v1:evt_2,outcome=failed}
    event idemgen.unit {key=payments:event:evt_2,outcome=inserted}
    idemgen.effect send_receipt ERROR {effect=send_receipt,effect_key=receipt:v1:evt_2,job=payment_webhook,key=payments:event:evt_2,outcome=failed}
      event exception {}
idemgen.run payment_webhook ERROR {job=payment_webhook,operation=process,report.effects_failed=1,report.effects_parked=1,report.inserted=1,report.seen=1}
  event exception {}
  idemgen.batch payment_webhook {batch.units=1,job=payment_webhook}
    event exception {effect=send_receipt,effect_key=receipt:v1:evt_3,outcome=parked}
    event idemgen.unit {key=payments:event:evt_3,outcome=inserted}
    idemgen.effect send_receipt ERROR {effect=send_receipt,effect_key=receipt:v1:evt_3,job=payment_webhook,key=payments:event:evt_3,outcome=parked}
      event exception {}
idemgen.run payment_webhook ERROR {job=payment_webhook,operation=drain,report.effects_failed=1}
  event exception {effect=send_receipt,effect_key=receipt:v1:evt_2,outcome=failed}
  event exception {}
  idemgen.effect send_receipt ERROR {effect=send_receipt,effect_key=receipt:v1:evt_2,job=payment_webhook,key=payments:event:evt_2,outcome=failed}
    event exception {}
`
		if got != want {
			t.Errorf("spans:\n%s\nwant:\n%s", got, want)
		}

		// The provider ran inside its effect span: its own spans (an HTTP
		// client's, say) nest under it.
		effectSpans := map[trace.SpanID]bool{}
		for _, s := range spans.Ended() {
			if strings.HasPrefix(s.Name(), "idemgen.effect ") {
				effectSpans[s.SpanContext().SpanID()] = true
			}
		}
		for key, id := range calledIn {
			if !effectSpans[id] {
				t.Errorf("provider call for %s ran in span %s, not an effect span", key, id)
			}
		}
		if len(calledIn) != 3 {
			t.Errorf("provider called for %d keys, want 3", len(calledIn))
		}
	})
}

// wantMetrics compares every data point in rm, one line each in key order,
// with want: a counter's or gauge's value, a histogram's count. A histogram
// point must also have a positive sum and buckets that add up to its count.
func wantMetrics(t *testing.T, rm metricdata.ResourceMetrics, want string) {
	t.Helper()
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/idemgen/idemgen/idem/idemotel" || sm.Scope.Version != idem.Version {
			t.Errorf("scope %+v", sm.Scope)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic || d.Temporality != metricdata.CumulativeTemporality {
					t.Errorf("%s is not a cumulative counter", m.Name)
				}
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", m.Name, renderAttrs(p.Attributes.ToSlice()), p.Value))
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s%s %d", m.Name, renderAttrs(p.Attributes.ToSlice()), p.Value))
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					var inBuckets uint64
					for _, n := range p.BucketCounts {
						inBuckets += n
					}
					if p.Sum <= 0 || inBuckets != p.Count {
						t.Errorf("%s%v: sum %g, %d in buckets, count %d", m.Name, p.Attributes.ToSlice(), p.Sum, inBuckets, p.Count)
					}
					lines = append(lines, fmt.Sprintf("%s%s count %d", m.Name, renderAttrs(p.Attributes.ToSlice()), p.Count))
				}
			default:
				t.Errorf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	slices.Sort(lines)
	if got := "\n" + strings.Join(lines, "\n") + "\n"; got != want {
		t.Errorf("metrics:%s\nwant:%s", got, want)
	}
}

// renderSpans prints spans as a tree: roots in start order, each span's
// events, then its children in start order.
func renderSpans(spans []sdktrace.ReadOnlySpan) string {
	children := map[trace.SpanID][]sdktrace.ReadOnlySpan{}
	var roots []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().IsValid() {
			children[s.Parent().SpanID()] = append(children[s.Parent().SpanID()], s)
		} else {
			roots = append(roots, s)
		}
	}
	byStart := func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) }
	var b strings.Builder
	var walk func(s sdktrace.ReadOnlySpan, indent string)
	walk = func(s sdktrace.ReadOnlySpan, indent string) {
		status := ""
		if s.Status().Code == codes.Error {
			status = " ERROR"
		}
		fmt.Fprintf(&b, "%s%s%s %s\n", indent, s.Name(), status, renderAttrs(s.Attributes()))
		for _, e := range s.Events() {
			fmt.Fprintf(&b, "%s  event %s %s\n", indent, e.Name, renderAttrs(e.Attributes))
		}
		kids := children[s.SpanContext().SpanID()]
		slices.SortStableFunc(kids, byStart)
		for _, c := range kids {
			walk(c, indent+"  ")
		}
	}
	slices.SortStableFunc(roots, byStart)
	for _, r := range roots {
		walk(r, "")
	}
	return "\n" + b.String()
}

// renderAttrs prints the idemgen.* attributes without their prefix, in key
// order, leaving out report counts of zero. (An exception event's message
// differs between the databases; the spans' status says there was one.)
func renderAttrs(attrs []attribute.KeyValue) string {
	var parts []string
	for _, a := range attrs {
		k, ok := strings.CutPrefix(string(a.Key), "idemgen.")
		if !ok || strings.HasPrefix(k, "report.") && a.Value.AsInt64() == 0 {
			continue
		}
		parts = append(parts, k+"="+a.Value.String())
	}
	slices.Sort(parts)
	return "{" + strings.Join(parts, ",") + "}"
}

// The provider pauses its whole effect on the first call (idem.PauseEffect):
// that call's span, and the span of every call that meets the pause, carry
// the gate's state and end as attributes and an idemgen.gate event with
// the provider's answer; no call after the first reaches the provider.
func TestOpenTelemetryGate(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		spans := tracetest.NewSpanRecorder()
		otelOpt := idemotel.Option(sdkmetric.NewMeterProvider(), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
		f := billingtest.NewFixture()
		for i, id := range []string{"inv-1", "inv-2", "inv-3"} {
			f.Invoice(id, 100, f.Base.Add(time.Duration(i)*time.Minute))
		}
		f.Clock.Advance(billingtest.RunGap)
		calls := 0
		notify := billing.NotifyNewInvoiceFunc(func(ctx context.Context, key string, inv billing.Invoice) error {
			calls++
			return idem.PauseEffect(time.Hour, errors.New("429 the mail account is throttled"))
		})
		circuit := idemtest.WithJobEdit(func(j *idemrt.Job[billing.Invoice]) {
			j.Effects[0].Circuit = idemrt.Circuit{Failures: 5, CoolDown: time.Minute} // a gate, for the pause
		})
		j, err := billing.NewInvoiceSync(st, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: notify},
			idem.WithClock(f.Clock.Now), idemtest.WithLeaseClock(f.Clock.Now), idem.WithLogger(quiet), idem.WithStart(f.Base.Add(-24*time.Hour)),
			idem.WithEffectConcurrency(1), circuit, otelOpt)
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := j.Run(context.Background())
		if calls != 1 || rep.EffectsWaiting != 3 || rep.EffectsParked != 0 {
			t.Fatalf("%s after %d calls; want one call, the three effects waiting", rep, calls)
		}
		gated, events := 0, 0
		for _, s := range spans.Ended() {
			if attrOf(s.Attributes(), "idemgen.gate.state") != "paused" {
				continue
			}
			gated++
			if attrOf(s.Attributes(), "idemgen.gate.until") != f.Clock.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) {
				t.Errorf("span %s: gate until %q, want an hour on", s.Name(), attrOf(s.Attributes(), "idemgen.gate.until"))
			}
			for _, e := range s.Events() {
				if e.Name == "idemgen.gate" && attrOf(e.Attributes, "idemgen.gate.reason") != "" {
					events++
				}
			}
		}
		if gated != 3 || events != 3 {
			t.Errorf("%d call spans carry the pause, %d idemgen.gate events with the answer; want 3 and 3", gated, events)
		}
	})
}

func attrOf(attrs []attribute.KeyValue, key string) string {
	for _, a := range attrs {
		if string(a.Key) == key {
			return a.Value.String()
		}
	}
	return ""
}
