package idembroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// Config is what a job's spec fixes for its consumer (consume:).
type Config struct {
	Job    string // the job's name, for logs
	Broker string // nats, rabbitmq or kafka
	From   string // subject, queue or topic
	Group  string // durable consumer, consumer tag or consumer group
	Batch  int    // messages per fetch; 0: a default
}

// DefaultBatch is the messages per fetch when neither the spec nor
// WithBatch says.
const DefaultBatch = 50

// Option tunes a consumer at run time.
type Option func(*options)

type options struct {
	log        *slog.Logger
	batch      int
	drainEvery time.Duration
	// retryInitial and retryMax shape the redelivery delay of a unit whose
	// write failed: retryInitial doubled per earlier delivery, up to
	// retryMax, jittered.
	retryInitial, retryMax time.Duration
	// keepAlive is how often a message in work is kept alive (InProgress).
	keepAlive time.Duration
	// stopGrace bounds the batch in hand, and the drain in progress, once
	// the consumer's context has ended.
	stopGrace time.Duration
}

// WithLogger sends the consumer's logs to l (default: the job's logger).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithBatch overrides the spec's batch: messages per fetch, one Process call.
func WithBatch(n int) Option { return func(o *options) { o.batch = n } }

// WithDrainEvery sets how often the consumer performs owed effects (its own
// and a dead consumer's, once their lease ran out); default: from the
// effects' leases.
func WithDrainEvery(d time.Duration) Option { return func(o *options) { o.drainEvery = d } }

// WithRetryBackoff sets the redelivery delay of a message whose unit's
// write failed: initial for its first delivery, doubled for each delivery
// before it, at most max, with jitter (default 1s and 1m).
func WithRetryBackoff(initial, max time.Duration) Option {
	return func(o *options) { o.retryInitial, o.retryMax = initial, max }
}

// WithKeepAlive sets how often each message of the batch in work is kept
// alive with its broker (Delivery.InProgress; default 5s). Keep it well
// under the broker's redelivery timer (JetStream `AckWait`).
func WithKeepAlive(d time.Duration) Option { return func(o *options) { o.keepAlive = d } }

// WithStopGrace bounds how long the consumer goes on with the batch in
// hand once its context has ended (default 30s): after it, the batch's
// calls are cancelled, and what is not settled is redelivered.
func WithStopGrace(d time.Duration) Option { return func(o *options) { o.stopGrace = d } }

// Bounds the consumer never goes past, whatever it is told.
const (
	minDrainEvery = time.Second
	maxDrainEvery = 30 * time.Second
	// settleTimeout bounds one call to the broker to settle a message.
	settleTimeout = 10 * time.Second
	// troubleRetry is the redelivery delay of a batch whose Process call
	// failed as a whole (the database unreachable, say).
	troubleRetry = time.Second
	// maxPause bounds the pause after a failed fetch or batch.
	maxPause = 30 * time.Second
)

func newOptions[U any](e *idemrt.Engine[U], cfg Config, opts []Option) options {
	o := options{log: e.Logger(), batch: cfg.Batch, retryInitial: time.Second, retryMax: time.Minute,
		keepAlive: 5 * time.Second, stopGrace: 30 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	if o.batch <= 0 {
		o.batch = DefaultBatch
	}
	if o.drainEvery <= 0 {
		o.drainEvery = defaultDrainEvery(e.Job())
	}
	o.retryInitial = max(o.retryInitial, time.Millisecond)
	o.retryMax = max(o.retryMax, o.retryInitial)
	o.keepAlive = max(o.keepAlive, 10*time.Millisecond)
	o.stopGrace = max(o.stopGrace, 0)
	return o
}

// defaultDrainEvery is a quarter of the shortest effect lease, within
// [1s, 30s]: a dead consumer's owed effect is taken over soon after its
// lease ran out.
func defaultDrainEvery[U any](def *idemrt.Job[U]) time.Duration {
	every := maxDrainEvery
	for _, fx := range def.Effects {
		if fx.Lease > 0 {
			every = min(every, fx.Lease/4)
		}
	}
	return max(minDrainEvery, every)
}

// longestLease bounds how long a message is kept alive: past an effect's
// lease (and its call's timeout), another consumer may take the effect
// over anyway.
func longestLease[U any](def *idemrt.Job[U]) time.Duration {
	longest := time.Duration(0)
	for _, fx := range def.Effects {
		longest = max(longest, fx.Lease+fx.Timeout)
	}
	if longest == 0 {
		return 5 * time.Minute
	}
	return longest
}

// RetryDelay is the redelivery delay of a message on its deliveries-th
// delivery: initial doubled for each delivery before it, at most max, then
// jittered to between half of it and all of it, so that messages that
// failed together do not all come back together.
func RetryDelay(deliveries int, initial, max time.Duration) time.Duration {
	d := initial
	for i := 1; i < deliveries && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// Consume runs e as a consumer of src until ctx ends, decoding each message
// with decode. It returns nil when ctx ended and everything fetched was
// settled, or the error that stopped it: one wrapping ErrSourceClosed when
// the subscription is gone for good (connect again, and consume again).
// Other fetch errors, and a database that is down, are waited out.
func Consume[U any](ctx context.Context, e *idemrt.Engine[U], src Source, decode func(Message) (U, error), cfg Config, opts ...Option) error {
	if e == nil || src == nil || decode == nil {
		return errors.New("idembroker: Consume needs an engine, a source and a decoder")
	}
	o := newOptions(e, cfg, opts)
	c := &consumer[U]{e: e, src: src, decode: decode, o: o,
		log: o.log.With(slog.String("job", e.Job().Name), slog.String("broker", cfg.Broker), slog.String("from", cfg.From))}
	defer func() {
		if err := src.Close(); err != nil {
			c.log.Warn("idemgen: closing the consumer's subscription failed", slog.Any("err", err))
		}
	}()
	stopDrain := c.startDrain(ctx)
	defer stopDrain()
	c.log.Info("idemgen: consumer started", slog.String("group", cfg.Group), slog.Int("batch", o.batch),
		slog.Duration("drain_every", o.drainEvery))
	pause := time.Duration(0)
	for ctx.Err() == nil {
		if pause > 0 && !sleep(ctx, pause) {
			break
		}
		ds, err := src.Fetch(ctx, o.batch)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			if errors.Is(err, ErrSourceClosed) {
				c.log.Error("idemgen: consumer stopped: its subscription is gone", slog.Any("err", err))
				return fmt.Errorf("job %q: consume: %w", e.Job().Name, err)
			}
			pause = nextPause(pause)
			c.log.Warn("idemgen: fetch failed; trying again", slog.Duration("pause", pause), slog.Any("err", err))
			continue
		}
		if len(ds) == 0 {
			continue
		}
		if c.batch(ctx, ds) {
			pause = 0
		} else {
			pause = nextPause(pause)
		}
	}
	c.log.Info("idemgen: consumer stopped")
	return nil
}

func nextPause(p time.Duration) time.Duration {
	return min(max(2*p, 100*time.Millisecond), maxPause)
}

// sleep waits d, or less when ctx ends first; it reports whether ctx is
// still going.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

type consumer[U any] struct {
	e      *idemrt.Engine[U]
	src    Source
	decode func(Message) (U, error)
	o      options
	log    *slog.Logger
}

// inWork is one fetched message on its way through a batch.
type inWork struct {
	d   Delivery
	msg Message
	// unit is the index of its unit in the batch's Process call; -1 when
	// it did not decode.
	unit int
}

// batch decodes, processes and settles one fetch; it reports false when
// the batch's Process call failed as a whole (the caller pauses).
func (c *consumer[U]) batch(ctx context.Context, ds []Delivery) bool {
	// The batch is finished once fetched, even when ctx ends meanwhile:
	// bounded by stopGrace after that.
	work, cancel := graceful(ctx, c.o.stopGrace)
	defer cancel()
	defer c.commit(work) // whatever happened, every message of the batch was settled
	msgs := make([]inWork, len(ds))
	var units []U
	def := c.e.Job()
	for i, d := range ds {
		m := d.Message()
		msgs[i] = inWork{d: d, msg: m, unit: -1}
		u, err := c.decodeSafely(m)
		if err == nil && def.CheckKey != nil {
			err = def.CheckKey(u)
		}
		if err != nil {
			c.dead(work, msgs[i], "", fmt.Errorf("job %q: message %s: %w", def.Name, m.ID, err))
			continue
		}
		msgs[i].unit = len(units)
		units = append(units, u)
	}
	if len(units) == 0 {
		return true
	}
	stopKeepAlive := c.keepAlive(work, msgs)
	rep, err := c.e.Process(work, units)
	stopKeepAlive()
	var fe *idemrt.FailuresError
	if err != nil && !errors.As(err, &fe) || len(rep.Units) != len(units) {
		if err == nil {
			err = fmt.Errorf("Process reported %d units for %d handed in", len(rep.Units), len(units))
		}
		c.log.Error("idemgen: a batch failed as a whole; its messages are redelivered", slog.Int("messages", len(units)), slog.Any("err", err))
		for _, m := range msgs {
			if m.unit >= 0 {
				c.retry(work, m, troubleRetry)
			}
		}
		return false
	}
	for _, m := range msgs {
		if m.unit >= 0 {
			c.settle(work, m, rep.Units[m.unit])
		}
	}
	return true
}

// commit commits a batch's settles with a source that settles in batches.
func (c *consumer[U]) commit(ctx context.Context) {
	cm, ok := c.src.(Committer)
	if !ok {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := cm.Commit(cctx); err != nil {
		c.log.Warn("idemgen: committing the batch's acknowledgements failed; its messages may be redelivered (and deduped)", slog.Any("err", err))
	}
}

// decodeSafely decodes m; a decoder that panics on a body makes the
// message poison, parked with the panic, rather than crash the consumer on
// every redelivery.
func (c *consumer[U]) decodeSafely(m Message) (u U, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the decoder panicked: %v", p)
		}
	}()
	return c.decode(m)
}

// graceful is a context that does not end with ctx, but stopGrace after it.
func graceful(ctx context.Context, stopGrace time.Duration) (context.Context, context.CancelFunc) {
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(stopGrace, cancel)
		context.AfterFunc(work, func() { t.Stop() })
	})
	return work, func() { stop(); cancel() }
}

// keepAlive tells the broker, every keepAlive, that the batch's messages
// are still in work, until the returned stop is called, and at most for
// the job's longest effect lease: past it, another consumer may take the
// effects over anyway.
func (c *consumer[U]) keepAlive(ctx context.Context, msgs []inWork) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(c.o.keepAlive)
		defer tick.Stop()
		until := time.NewTimer(longestLease(c.e.Job()))
		defer until.Stop()
		for {
			select {
			case <-done:
				return
			case <-until.C:
				return
			case <-tick.C:
			}
			for _, m := range msgs {
				if m.unit < 0 {
					continue
				}
				cctx, cancel := context.WithTimeout(ctx, settleTimeout)
				if err := m.d.InProgress(cctx); err != nil {
					c.log.Debug("idemgen: keeping a message alive failed", slog.String("message", m.msg.ID), slog.Any("err", err))
				}
				cancel()
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// settle settles one message from its unit's result.
func (c *consumer[U]) settle(ctx context.Context, m inWork, ur idemrt.UnitResult) {
	log := c.log.With(slog.String("key", ur.Key), slog.String("message", m.msg.ID))
	switch s := ur.Settle(); s {
	case idemrt.SettleDone, idemrt.SettleOwed:
		cctx, cancel := context.WithTimeout(ctx, settleTimeout)
		defer cancel()
		if err := m.d.Ack(cctx); err != nil {
			log.Warn("idemgen: ack failed; the message will be redelivered, and deduped", slog.Any("err", err))
			return
		}
		log.Debug("idemgen: message acknowledged", slog.String("settle", s.String()), slog.String("outcome", string(ur.Outcome)))
	case idemrt.SettleRetry:
		c.retry(ctx, m, RetryDelay(m.msg.Deliveries, c.o.retryInitial, c.o.retryMax))
	case idemrt.SettleDead:
		c.dead(ctx, m, ur.Key, ur.Err)
	}
}

// retry gives a message back to its broker for redelivery after delay.
func (c *consumer[U]) retry(ctx context.Context, m inWork, delay time.Duration) {
	cctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	log := c.log.With(slog.String("message", m.msg.ID))
	if err := m.d.Retry(cctx, delay); err != nil {
		log.Warn("idemgen: giving a message back failed; the broker redelivers it when its timer runs out", slog.Any("err", err))
		return
	}
	log.Info("idemgen: message given back for redelivery", slog.Int("deliveries", m.msg.Deliveries), slog.Duration("delay", delay))
}

// dead parks a message that can never succeed, then settles it so that it
// never loops. A unit the engine parked (after max_attempts) is in the
// parked table already with its payload; anything else is parked as the
// raw message under "message:" + its id, once. When the parking fails
// (the database down), the message is given back instead: it must not be
// lost.
func (c *consumer[U]) dead(ctx context.Context, m inWork, unitKey string, cause error) {
	log := c.log.With(slog.String("message", m.msg.ID))
	if unitKey != "" {
		log = log.With(slog.String("key", unitKey))
	}
	if !errors.Is(cause, idemrt.ErrParked) {
		key := "message:" + m.msg.ID
		raw := idemrt.RawMessage{ID: m.msg.ID, Body: m.msg.Body, Headers: m.msg.Headers}
		if err := c.e.ParkMessage(ctx, key, raw, cause); err != nil {
			log.Error("idemgen: a message that cannot succeed could not be parked; given back", slog.Any("err", err), slog.Any("cause", cause))
			c.retry(ctx, m, RetryDelay(m.msg.Deliveries, c.o.retryInitial, c.o.retryMax))
			return
		}
		log = log.With(slog.String("parked_as", key))
	}
	cctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	if err := m.d.Dead(cctx, cause); err != nil {
		log.Warn("idemgen: settling a parked message failed; a redelivery finds it parked", slog.Any("err", err))
		return
	}
	log.Error("idemgen: message parked and settled; it will not be redelivered", slog.Any("err", cause))
}

// startDrain performs the job's owed effects every drainEvery until the
// returned stop is called: the consumer's own (failed, waiting) and a dead
// consumer's once their lease ran out. Stop lets a drain in progress end,
// within stopGrace.
func (c *consumer[U]) startDrain(ctx context.Context) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	work, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer close(done)
		tick := time.NewTicker(c.o.drainEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			rep, err := c.e.Drain(work)
			var fe *idemrt.FailuresError
			switch {
			case errors.As(err, &fe):
				c.log.Warn("idemgen: drain: some owed effects failed; tried again later", slog.Any("report", rep), slog.Any("err", err))
			case err != nil:
				c.log.Warn("idemgen: drain failed; tried again later", slog.Any("err", err))
			case rep.EffectsDone > 0:
				c.log.Info("idemgen: drain performed owed effects", slog.Int("effects_done", rep.EffectsDone))
			}
		}
	}()
	return func() {
		close(quit)
		t := time.AfterFunc(c.o.stopGrace, cancel)
		<-done
		t.Stop()
		cancel()
	}
}
