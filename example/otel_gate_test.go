package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemotel"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// The provider pauses its whole effect on the first call (idem.PauseEffect):
// that call's span, and the span of every call that meets the pause, carry
// the gate's state and end as attributes and an idemgen.gate event with
// the provider's answer; no call after the first reaches the provider.
func TestOpenTelemetryGate(t *testing.T) {
	eachRawDB(t, func(t *testing.T, st *billing.Store, db rawDB) {
		spans := tracetest.NewSpanRecorder()
		otelOpt := idemotel.Option(sdkmetric.NewMeterProvider(), sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
		f := newFixture()
		for i, id := range []string{"inv-1", "inv-2", "inv-3"} {
			f.invoice(id, 100, f.base.Add(time.Duration(i)*time.Minute))
		}
		f.clk.advance(runGap)
		calls := 0
		notify := billing.NotifyNewInvoiceFunc(func(ctx context.Context, key string, inv billing.Invoice) error {
			calls++
			return idem.PauseEffect(time.Hour, errors.New("429 the mail account is throttled"))
		})
		circuit := idemrt.WithJobEdit(func(j *idemrt.Job[billing.Invoice]) {
			j.Effects[0].Circuit = idemrt.Circuit{Failures: 5, CoolDown: time.Minute} // a gate, for the pause
		})
		j, err := billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: notify},
			idem.WithClock(f.clk.Now), idemrt.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)),
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
			if attrOf(s.Attributes(), "idemgen.gate.until") != f.clk.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano) {
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
