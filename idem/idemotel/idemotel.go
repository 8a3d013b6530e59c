// Package idemotel reports idemgen jobs to OpenTelemetry: pass Option to a
// generated job's constructor. It is a package of its own so that a
// service that does not use it links no OpenTelemetry.
//
// Metrics (attributes in brackets):
//
//	idemgen.units            counter   units by how they ended [idemgen.job, idemgen.outcome]
//	idemgen.effects          counter   effects by how they ended, deduped included [idemgen.job, idemgen.effect, idemgen.outcome]
//	idemgen.effect.duration  histogram seconds per effect call (claimed: the provider call and its recording) [idemgen.job, idemgen.effect, idemgen.outcome]
//	idemgen.backlog          gauge     owed effects (state owed) and parked effects plus parked units (state parked), read from the store [idemgen.job, idemgen.state]
//
// Spans: "idemgen.run <job>" per Run, Backfill, Process or Drain call
// [idemgen.job, idemgen.operation, idemgen.report.*]; below it
// "idemgen.batch <job>" per batch of units applied together
// [idemgen.job, idemgen.batch.units], with an event per unit and effect
// outcome [idemgen.key, idemgen.effect, idemgen.effect_key,
// idemgen.outcome]; and "idemgen.effect <effect>" per effect call
// [idemgen.job, idemgen.effect, idemgen.effect_key, idemgen.key,
// idemgen.outcome], whose context the provider receives. Failures are
// recorded on the span they happened in.
package idemotel

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

const scope = "github.com/idemgen/idemgen/idem/idemotel"

// Attribute keys, namespaced: a plain "job" label would collide with the
// one Prometheus gives every scrape target.
const (
	attrJob        = attribute.Key("idemgen.job")
	attrOperation  = attribute.Key("idemgen.operation") // run, backfill, process or drain
	attrOutcome    = attribute.Key("idemgen.outcome")
	attrEffect     = attribute.Key("idemgen.effect")
	attrEffectKey  = attribute.Key("idemgen.effect_key")
	attrKey        = attribute.Key("idemgen.key") // the unit's key
	attrState      = attribute.Key("idemgen.state")
	attrBatchUnits = attribute.Key("idemgen.batch.units")
	// The effect's gate (idemrt.GateObserver): paused, open, probe or closed;
	// until when; the provider's answer.
	attrGateState  = attribute.Key("idemgen.gate.state")
	attrGateUntil  = attribute.Key("idemgen.gate.until")
	attrGateReason = attribute.Key("idemgen.gate.reason")
)

// Option returns a job option that reports the job's runs, units and
// effects to mp and tp (nil: the global providers). Make it once and pass
// it to every job: each call creates its own instruments and registers its
// own gauge callback.
func Option(mp metric.MeterProvider, tp trace.TracerProvider) idem.Option {
	return idem.WithObserver(newObserver(mp, tp))
}

// observer implements idem.Observer.
type observer struct {
	tracer  trace.Tracer
	units   metric.Int64Counter
	effects metric.Int64Counter
	latency metric.Float64Histogram

	mu   sync.Mutex
	jobs map[string]func(context.Context) (idem.Backlog, error) // by job name: the last job value made wins
}

func newObserver(mp metric.MeterProvider, tp trace.TracerProvider) *observer {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	o := &observer{
		tracer: tp.Tracer(scope, trace.WithInstrumentationVersion(idem.Version)),
		jobs:   map[string]func(context.Context) (idem.Backlog, error){},
	}
	m := mp.Meter(scope, metric.WithInstrumentationVersion(idem.Version))
	// An error here is an invalid instrument definition, a bug of this
	// package; the SDK still returns a working instrument, so report it and go on.
	var err1, err2, err3, err4 error
	o.units, err1 = m.Int64Counter("idemgen.units", metric.WithUnit("{unit}"),
		metric.WithDescription("Units by how they ended."))
	o.effects, err2 = m.Int64Counter("idemgen.effects", metric.WithUnit("{effect}"),
		metric.WithDescription("Effects by how they ended; deduped ones were done already."))
	o.latency, err3 = m.Float64Histogram("idemgen.effect.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of effect calls: the provider call with the effect's key, and its recording."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60))
	_, err4 = m.Int64ObservableGauge("idemgen.backlog", metric.WithUnit("{item}"),
		metric.WithDescription("Owed effects (state owed); parked effects and units, left for a person (state parked)."),
		metric.WithInt64Callback(o.observeBacklog))
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		otel.Handle(err)
	}
	return o
}

func (o *observer) Watch(job string, backlog func(context.Context) (idem.Backlog, error)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.jobs[job] = backlog
}

// observeBacklog reads every watched job's backlog; one job's error does
// not hide the others'.
func (o *observer) observeBacklog(ctx context.Context, obs metric.Int64Observer) error {
	o.mu.Lock()
	jobs := maps.Clone(o.jobs)
	o.mu.Unlock()
	var errs []error
	for _, job := range slices.Sorted(maps.Keys(jobs)) {
		b, err := jobs[job](ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		obs.Observe(b.OwedEffects, metric.WithAttributes(attrJob.String(job), attrState.String("owed")))
		obs.Observe(b.ParkedEffects+b.ParkedUnits, metric.WithAttributes(attrJob.String(job), attrState.String("parked")))
	}
	return errors.Join(errs...)
}

func (o *observer) RunStart(ctx context.Context, job, op string) context.Context {
	ctx, _ = o.tracer.Start(ctx, "idemgen.run "+job, trace.WithAttributes(attrJob.String(job), attrOperation.String(op)))
	return ctx
}

func (o *observer) RunEnd(ctx context.Context, rep idem.Report, err error) {
	span := trace.SpanFromContext(ctx)
	// The report's counts, by the names its log line uses.
	for _, a := range rep.LogValue().Group() {
		if a.Value.Kind() == slog.KindInt64 {
			span.SetAttributes(attribute.Int64("idemgen.report."+a.Key, a.Value.Int64()))
		}
	}
	end(span, err)
}

func (o *observer) BatchStart(ctx context.Context, job string, units int) context.Context {
	ctx, _ = o.tracer.Start(ctx, "idemgen.batch "+job, trace.WithAttributes(attrJob.String(job), attrBatchUnits.Int(units)))
	return ctx
}

func (o *observer) BatchEnd(ctx context.Context, job string, err error) {
	end(trace.SpanFromContext(ctx), err)
}

func (o *observer) Unit(ctx context.Context, job string, ur idem.UnitResult) {
	o.units.Add(ctx, 1, metric.WithAttributes(attrJob.String(job), attrOutcome.String(string(ur.Outcome))))
	event(ctx, "idemgen.unit", ur.Err, attrKey.String(ur.Key), attrOutcome.String(string(ur.Outcome)))
}

func (o *observer) Effect(ctx context.Context, job string, er idem.EffectResult) {
	o.effects.Add(ctx, 1, metric.WithAttributes(attrJob.String(job), attrEffect.String(er.Effect), attrOutcome.String(string(er.Outcome))))
	event(ctx, "idemgen.effect", er.Err, attrEffect.String(er.Effect), attrEffectKey.String(er.Key), attrOutcome.String(string(er.Outcome)))
}

func (o *observer) CallStart(ctx context.Context, job, effect, effectKey, unitKey string) context.Context {
	ctx, _ = o.tracer.Start(ctx, "idemgen.effect "+effect, trace.WithAttributes(
		attrJob.String(job), attrEffect.String(effect), attrEffectKey.String(effectKey), attrKey.String(unitKey)))
	return ctx
}

func (o *observer) CallEnd(ctx context.Context, job string, er idem.EffectResult, took time.Duration) {
	outcome := attrOutcome.String(string(er.Outcome))
	o.latency.Record(ctx, took.Seconds(), metric.WithAttributes(attrJob.String(job), attrEffect.String(er.Effect), outcome))
	span := trace.SpanFromContext(ctx)
	span.SetAttributes(outcome)
	end(span, er.Err)
}

// Gate is the idemrt.GateObserver's: the call's span gets the gate's state
// and time as attributes, and an idemgen.gate event with the provider's
// answer.
func (o *observer) Gate(ctx context.Context, job, effect, state string, until time.Time, reason string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	shown := state
	if shown == idemrt.GateClosed {
		shown = "closed"
	}
	attrs := []attribute.KeyValue{attrEffect.String(effect), attrGateState.String(shown)}
	if !until.IsZero() {
		attrs = append(attrs, attrGateUntil.String(until.UTC().Format(time.RFC3339Nano)))
	}
	span.SetAttributes(attrs...)
	span.AddEvent("idemgen.gate", trace.WithAttributes(append(attrs, attrGateReason.String(reason))...))
}

// end ends span, with err recorded and the span's status set when there is one.
func end(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// event adds an event to the current span: an exception event when err is
// set, else one named name.
func event(ctx context.Context, name string, err error, attrs ...attribute.KeyValue) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.RecordError(err, trace.WithAttributes(attrs...))
		return
	}
	span.AddEvent(name, trace.WithAttributes(attrs...))
}
