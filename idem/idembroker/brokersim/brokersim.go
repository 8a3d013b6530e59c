// Package brokersim is a message broker in memory, for tests and the
// crash simulation: it plays what a real broker does to a consumer, so a
// consumer's behaviour can be checked anywhere, with no broker running.
//
// It delivers at least once. A message fetched and not settled goes back
// to the queue when its source closes (a killed consumer) or when its ack
// wait runs out (AckWait; InProgress restarts it); Retry puts it back after
// its delay (scaled by DelayScale, so tests need not wait out real
// backoffs); Ack and Dead settle it for good, unless the broker was told
// to lose acks (LoseAcks), when the consumer believes it acked and the
// message comes again. With Shuffle, a message that goes back is put at a
// random place in the queue, so redeliveries come out of order. It counts
// every delivery, ack, retry, dead and keep-alive per message (Stats).
package brokersim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem/idembroker"
)

// Broker is one queue of messages.
type Broker struct {
	// AckWait redelivers a delivery not settled within it; 0: only when
	// its source closes.
	AckWait time.Duration
	// DelayScale multiplies Retry's delay (0: redelivered at once).
	DelayScale float64
	// FetchWait bounds how long Fetch waits for a first message (default 20ms).
	FetchWait time.Duration

	mu       sync.Mutex
	seq      int
	queue    []*message // ready or waiting out a retry delay, in delivery order
	byID     map[string]*message
	lostAcks int
	shuffle  bool
	rng      *rand.Rand
	changed  chan struct{} // closed and replaced when the queue changes
}

// State of a message at the broker.
const (
	StateQueued   = "queued"   // waiting for a fetch (or its retry delay)
	StateInFlight = "inflight" // fetched, not settled
	StateAcked    = "acked"
	StateDead     = "dead"
)

// Stats is what happened to one message. Acks, Retries and Deads count
// every such call that reached the broker, including one refused because
// the message was settled already (a consumer that settles twice shows).
type Stats struct {
	ID                                         string
	State                                      string
	Deliveries, Acks, Retries, Deads, Progress int
	// LostAcks counts acks the broker dropped (LoseAcks).
	LostAcks int
	// DeadReason is the reason Dead was given, if it was.
	DeadReason string
}

type message struct {
	msg     idembroker.Message
	stats   Stats
	readyAt time.Time
	// delivery numbers the message's current delivery; a settle of an
	// older one (its ack wait ran out meanwhile) still settles the
	// message, as on JetStream.
	delivery int
	deadline time.Time // of the current delivery, with AckWait
	source   *Source   // holding the current delivery
}

// New returns an empty broker; seed makes Shuffle's order repeatable.
func New(seed uint64) *Broker {
	return &Broker{byID: map[string]*message{}, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), changed: make(chan struct{})}
}

// Publish queues a message and returns its id ("sim/N").
func (b *Broker) Publish(body []byte, headers map[string]string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.seq++
	id := fmt.Sprintf("sim/%d", b.seq)
	m := &message{msg: idembroker.Message{ID: id, Body: body, Headers: headers}, stats: Stats{ID: id, State: StateQueued}}
	b.byID[id] = m
	b.queue = append(b.queue, m)
	b.notify()
	return id
}

// LoseAcks makes the broker drop the next n acks: the consumer's Ack
// returns nil, and the message is redelivered (a lost ack, or a consumer
// killed between its commit and its ack).
func (b *Broker) LoseAcks(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lostAcks += n
}

// Shuffle puts messages that go back at random places in the queue.
func (b *Broker) Shuffle(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.shuffle = on
}

// Stats returns what happened to the message id.
func (b *Broker) Stats(id string) Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m, ok := b.byID[id]; ok {
		return m.stats
	}
	return Stats{ID: id}
}

// All returns every message's stats, in publishing order.
func (b *Broker) All() []Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Stats, 0, len(b.byID))
	for _, m := range b.byID {
		out = append(out, m.stats)
	}
	sort.Slice(out, func(i, j int) bool { return seqOf(out[i].ID) < seqOf(out[j].ID) })
	return out
}

func seqOf(id string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "sim/"))
	if err != nil {
		return -1 // not one of this broker's ids: first
	}
	return n
}

// Unsettled counts the messages neither acked nor dead.
func (b *Broker) Unsettled() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, m := range b.byID {
		if m.stats.State == StateQueued || m.stats.State == StateInFlight {
			n++
		}
	}
	return n
}

// WaitSettled waits until every message is acked or dead, or ctx ends.
func (b *Broker) WaitSettled(ctx context.Context) error {
	for {
		if b.Unsettled() == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("brokersim: %d messages still unsettled: %w", b.Unsettled(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// notify wakes fetches waiting for the queue; b.mu is held.
func (b *Broker) notify() {
	close(b.changed)
	b.changed = make(chan struct{})
}

// requeue puts m back in the queue, ready at readyAt; b.mu is held.
func (b *Broker) requeue(m *message, readyAt time.Time) {
	m.stats.State, m.readyAt, m.source, m.deadline = StateQueued, readyAt, nil, time.Time{}
	at := len(b.queue)
	if b.shuffle {
		at = b.rng.IntN(len(b.queue) + 1)
	}
	b.queue = append(b.queue, nil)
	copy(b.queue[at+1:], b.queue[at:])
	b.queue[at] = m
	b.notify()
}

// expire requeues deliveries whose ack wait ran out; b.mu is held.
func (b *Broker) expire(now time.Time) {
	for _, m := range b.byID {
		if m.stats.State == StateInFlight && !m.deadline.IsZero() && now.After(m.deadline) {
			b.requeue(m, now)
		}
	}
}

// Source returns a new subscription to the broker (a consumer's).
func (b *Broker) Source() *Source { return &Source{b: b} }

// Source is one consumer's subscription; it implements idembroker.Source.
type Source struct {
	b      *Broker
	closed bool
	killed bool // Kill: its deliveries can no longer be settled
}

var errClosed = fmt.Errorf("brokersim: %w", idembroker.ErrSourceClosed)

// Fetch returns up to max ready messages, waiting up to FetchWait for one.
func (s *Source) Fetch(ctx context.Context, limit int) ([]idembroker.Delivery, error) {
	b := s.b
	wait := b.FetchWait
	if wait <= 0 {
		wait = 20 * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		b.mu.Lock()
		if s.closed {
			b.mu.Unlock()
			return nil, errClosed
		}
		now := time.Now()
		b.expire(now)
		var out []idembroker.Delivery
		rest := b.queue[:0:0]
		var nextReady time.Time
		for _, m := range b.queue {
			if len(out) < limit && !m.readyAt.After(now) {
				m.stats.State, m.source = StateInFlight, s
				m.stats.Deliveries++
				m.delivery++
				if b.AckWait > 0 {
					m.deadline = now.Add(b.AckWait)
				}
				msg := m.msg
				msg.Deliveries = m.stats.Deliveries
				out = append(out, &delivery{b: b, src: s, m: m, msg: msg, n: m.delivery})
				continue
			}
			if m.readyAt.After(now) && (nextReady.IsZero() || m.readyAt.Before(nextReady)) {
				nextReady = m.readyAt
			}
			rest = append(rest, m)
		}
		b.queue = rest
		changed := b.changed
		b.mu.Unlock()
		if len(out) > 0 {
			return out, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		if !nextReady.IsZero() {
			left = min(left, time.Until(nextReady))
		}
		if b.AckWait > 0 {
			left = min(left, b.AckWait)
		}
		t := time.NewTimer(max(left, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// Close ends the subscription: its unsettled deliveries go back to the
// queue, as a broker redelivers a dead consumer's messages.
func (s *Source) Close() error {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	for _, m := range b.byID {
		if m.stats.State == StateInFlight && m.source == s {
			b.requeue(m, time.Now())
		}
	}
	return nil
}

// Kill ends the subscription as a killed consumer's ends: its unsettled
// deliveries go back to the queue, and a settle through any delivery it
// fetched fails from now on (the consumer's connection is gone).
func (s *Source) Kill() {
	s.b.mu.Lock()
	s.killed = true
	s.b.mu.Unlock()
	s.Close()
}

// delivery is one fetch of a message.
type delivery struct {
	b   *Broker
	src *Source
	m   *message
	msg idembroker.Message
	n   int
}

func (d *delivery) Message() idembroker.Message { return d.msg }

// settleable reports whether the message can still be settled by this
// delivery: not settled for good already; d.b.mu is held.
func (d *delivery) settleable() error {
	switch d.m.stats.State {
	case StateAcked, StateDead:
		return fmt.Errorf("brokersim: message %s is %s already", d.m.msg.ID, d.m.stats.State)
	}
	return nil
}

func (d *delivery) Ack(ctx context.Context) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if d.src.killed {
		return fmt.Errorf("brokersim: message %s: the consumer that fetched it was killed", d.m.msg.ID)
	}
	d.m.stats.Acks++
	if err := d.settleable(); err != nil {
		return err
	}
	if d.b.lostAcks > 0 {
		d.b.lostAcks--
		d.m.stats.LostAcks++
		if d.m.stats.State == StateInFlight && d.m.delivery == d.n {
			d.b.requeue(d.m, time.Now())
		}
		return nil
	}
	d.dequeue()
	d.m.stats.State = StateAcked
	return nil
}

// dequeue takes the message out of the queue when it went back there
// (its ack wait ran out) before this delivery settled it; d.b.mu is held.
func (d *delivery) dequeue() {
	for i, m := range d.b.queue {
		if m == d.m {
			d.b.queue = append(d.b.queue[:i], d.b.queue[i+1:]...)
			return
		}
	}
}

func (d *delivery) Retry(ctx context.Context, delay time.Duration) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if d.src.killed {
		return fmt.Errorf("brokersim: message %s: the consumer that fetched it was killed", d.m.msg.ID)
	}
	d.m.stats.Retries++
	if err := d.settleable(); err != nil {
		return err
	}
	if d.m.stats.State == StateInFlight && d.m.delivery == d.n {
		d.b.requeue(d.m, time.Now().Add(time.Duration(float64(delay)*d.b.DelayScale)))
	}
	return nil
}

func (d *delivery) Dead(ctx context.Context, reason error) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	if d.src.killed {
		return fmt.Errorf("brokersim: message %s: the consumer that fetched it was killed", d.m.msg.ID)
	}
	d.m.stats.Deads++
	if reason != nil {
		d.m.stats.DeadReason = reason.Error()
	}
	if err := d.settleable(); err != nil {
		return err
	}
	d.dequeue()
	d.m.stats.State = StateDead
	return nil
}

func (d *delivery) InProgress(ctx context.Context) error {
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	d.m.stats.Progress++
	if d.src.killed {
		return errClosed
	}
	if d.m.stats.State == StateInFlight && d.m.delivery == d.n && d.b.AckWait > 0 {
		d.m.deadline = time.Now().Add(d.b.AckWait)
	}
	return nil
}
