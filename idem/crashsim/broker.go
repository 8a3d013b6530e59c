package crashsim

// The consumer families' broker: at least once, as every broker is. A
// message fetched by an incarnation is its own until settled; when the
// incarnation dies its messages are delivered again (a redelivery timer
// running out), and so is a message whose ack the broker lost. It keeps
// what the families check: each message's deliveries and settlements, and
// any settlement made by an incarnation that was already dead.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem/idembroker"
)

type simMsgState int

const (
	msgReady simMsgState = iota // waiting to be delivered
	msgOut                      // delivered, not settled
	msgAcked                    // settled for good
	msgDead                     // settled as never to succeed
)

// simMsg is one message the world published, and what became of it.
type simMsg struct {
	msg  idembroker.Message
	kind simMsgKind
	// unit is the index of the fixture unit it carries (-1: none).
	unit  int
	state simMsgState
	owner int // the incarnation it is out to
	// delivered counts deliveries; acks, retries and deads its settlements
	// (a lost ack counts in acks and lostAcks).
	delivered, acks, retries, deads, lostAcks int
}

// simMsgKind is what a fixture message is for.
type simMsgKind int

const (
	msgGood       simMsgKind = iota // a unit, maybe a copy of one sent before
	msgUndecoded                    // a body that does not decode
	msgEmptyKey                     // a unit whose key field is empty
	msgChangedKey                   // a unit sent before, with another payload
)

// simBroker is the scenario's broker.
type simBroker struct {
	mu    sync.Mutex
	msgs  []*simMsg
	ready []int // indexes of ready messages, in delivery order
	wake  chan struct{}
	// loseAck: the first ack of these messages is lost (the message is
	// delivered again), at most once each.
	loseAck map[int]bool
	// onAck, when set, checks that a message may be acknowledged now (its
	// unit's transaction committed); called without the lock.
	onAck func(m *simMsg)
	// dead reports whether an incarnation has died: its settlements are
	// refused (a goroutine of a process that died sends none).
	dead func(inc int) bool
	// gone holds the incarnations whose messages were requeued: they
	// fetch nothing more. A dying consumer's loop may call Fetch once
	// more before it sees its context end; a message it took then stayed
	// out to a dead process for good (spec-space seed 38, spec 3,
	// consume-crash@96: "message sim/5 never settled").
	gone map[int]bool
	// changed counts the changes to the messages: deliveries,
	// settlements, messages put back (simHit.broker).
	changed int
}

func newSimBroker(msgs []*simMsg) *simBroker {
	b := &simBroker{msgs: msgs, wake: make(chan struct{}, 1), loseAck: map[int]bool{}, gone: map[int]bool{}}
	for i := range msgs {
		b.ready = append(b.ready, i)
	}
	return b
}

// source is the subscription of one incarnation.
func (b *simBroker) source(inc int) idembroker.Source { return &simSource{b: b, inc: inc} }

// requeue delivers again every message out to inc: it died, and the
// broker's redelivery timer ran out. inc fetches nothing after it.
func (b *simBroker) requeue(inc int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gone[inc] = true
	b.changed++
	for i, m := range b.msgs {
		if m.state == msgOut && m.owner == inc {
			m.state = msgReady
			b.ready = append(b.ready, i)
		}
	}
	b.signal()
}

// redeliver puts message i back while it is still out (its redelivery
// timer ran out with its first delivery still working on it).
func (b *simBroker) redeliver(i int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if m := b.msgs[i]; m.state == msgOut {
		b.changed++
		m.state = msgReady
		b.ready = append(b.ready, i)
		b.signal()
	}
}

// reverse reorders the messages waiting, last first.
func (b *simBroker) reverse() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.changed++
	slices.Reverse(b.ready)
}

// settled reports whether every message is acked or dead.
func (b *simBroker) settled() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range b.msgs {
		if m.state != msgAcked && m.state != msgDead {
			return false
		}
	}
	return true
}

// changes is how many times the messages changed so far.
func (b *simBroker) changes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.changed
}

// snapshot copies the messages for the end checks.
func (b *simBroker) snapshot() []simMsg {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]simMsg, len(b.msgs))
	for i, m := range b.msgs {
		out[i] = *m
	}
	return out
}

func (b *simBroker) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// simFetchWait bounds a fetch that finds nothing.
const simFetchWait = 5 * time.Millisecond

type simSource struct {
	b   *simBroker
	inc int
}

func (s *simSource) Fetch(ctx context.Context, max int) ([]idembroker.Delivery, error) {
	for attempt := 0; ; attempt++ {
		s.b.mu.Lock()
		var out []idembroker.Delivery
		for len(out) < max && len(s.b.ready) > 0 && !s.b.gone[s.inc] {
			i := s.b.ready[0]
			s.b.ready = s.b.ready[1:]
			m := s.b.msgs[i]
			m.state, m.owner = msgOut, s.inc
			m.delivered++
			s.b.changed++
			msg := m.msg
			msg.Deliveries = m.delivered
			out = append(out, &brokerDelivery{b: s.b, i: i, inc: s.inc, msg: msg})
		}
		s.b.mu.Unlock()
		if len(out) > 0 || attempt > 0 {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case <-s.b.wake:
		case <-time.After(simFetchWait):
		}
	}
}

func (s *simSource) Close() error { return nil }

type brokerDelivery struct {
	b   *simBroker
	i   int
	inc int
	msg idembroker.Message
}

func (d *brokerDelivery) Message() idembroker.Message { return d.msg }

// settle applies one settlement, unless the incarnation is dead.
func (d *brokerDelivery) settle(how string, apply func(m *simMsg)) error {
	if d.b.dead != nil && d.b.dead(d.inc) {
		return fmt.Errorf("simulated: %s of message %s: the process is gone", how, d.msg.ID)
	}
	d.b.mu.Lock()
	defer d.b.mu.Unlock()
	m := d.b.msgs[d.i]
	apply(m)
	d.b.changed++
	d.b.signal()
	return nil
}

func (d *brokerDelivery) Ack(ctx context.Context) error {
	if d.b.onAck != nil {
		d.b.onAck(d.b.msgs[d.i])
	}
	return d.settle("ack", func(m *simMsg) {
		m.acks++
		if d.b.loseAck[d.i] {
			delete(d.b.loseAck, d.i)
			m.lostAcks++
			if m.state == msgOut {
				m.state = msgReady
				d.b.ready = append(d.b.ready, d.i)
			}
			return
		}
		if m.state != msgDead {
			m.state = msgAcked
		}
	})
}

func (d *brokerDelivery) Retry(ctx context.Context, delay time.Duration) error {
	return d.settle("retry", func(m *simMsg) {
		m.retries++
		if m.state == msgOut {
			m.state = msgReady
			d.b.ready = append(d.b.ready, d.i)
		}
	})
}

func (d *brokerDelivery) Dead(ctx context.Context, reason error) error {
	return d.settle("dead", func(m *simMsg) {
		m.deads++
		if m.state != msgAcked {
			m.state = msgDead
		}
	})
}

func (d *brokerDelivery) InProgress(ctx context.Context) error { return nil }
