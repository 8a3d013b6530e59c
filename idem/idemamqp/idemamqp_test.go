package idemamqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemamqp"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idembroker/brokertest"
	"github.com/idemgen/idemgen/idem/idemrt"
)

const envAMQP = "IDEMGEN_TEST_AMQP"

// dial connects to the test broker, or skips t.
func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	url := os.Getenv(envAMQP)
	if url == "" {
		t.Skip(envAMQP + " is not set; set it to a RabbitMQ URL (amqp://guest:guest@127.0.0.1:5672/) to run this test")
	}
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		t.Fatalf("%s is set, but RabbitMQ cannot be reached: %v", envAMQP, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// queues is a quorum queue of t's own with a dead-letter queue, deleted
// when t ends, on an admin connection that outlives the consumers'.
type queues struct {
	ch         *amqp.Channel
	main, dead string
}

func newQueues(t *testing.T) *queues {
	t.Helper()
	ch, err := dial(t).Channel()
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	q := &queues{ch: ch, main: "idemt." + id, dead: "idemt." + id + ".dead"}
	dlx := q.main + ".dlx"
	must(t, ch.ExchangeDeclare(dlx, "fanout", false, true, false, false, nil))
	_, err = ch.QueueDeclare(q.dead, false, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(q.dead, "", dlx, false, nil))
	_, err = ch.QueueDeclare(q.main, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": dlx})
	must(t, err)
	t.Cleanup(func() {
		for _, name := range []string{q.main, q.dead} {
			if _, err := ch.QueueDelete(name, false, false, false); err != nil {
				t.Logf("delete queue %s: %v", name, err)
			}
		}
		if err := ch.ExchangeDelete(dlx, false, false); err != nil {
			t.Logf("delete exchange %s: %v", dlx, err)
		}
	})
	return q
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (q *queues) publish(t *testing.T, messageID string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	must(t, q.ch.PublishWithContext(ctx, "", q.main, false, false, amqp.Publishing{MessageId: messageID, Body: body, DeliveryMode: amqp.Persistent}))
}

// ready counts the messages ready in a queue (not those unacknowledged).
func (q *queues) ready(t *testing.T, name string) int {
	t.Helper()
	info, err := q.ch.QueueDeclarePassive(name, name == q.main, false, false, false, nil)
	must(t, err)
	return info.Messages
}

func source(t *testing.T, conn *amqp.Connection, queue string) *idemamqp.Source {
	t.Helper()
	src, err := idemamqp.NewSource(context.Background(), conn, idemamqp.SourceConfig{Queue: queue, ConsumerTag: "orders-" + fmt.Sprint(time.Now().UnixNano()), FetchWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// Duplicates, poison and a write that keeps failing, through a real
// quorum queue: each key is charged once; the poison is parked once and
// dead-lettered; the failing unit is redelivered (its deliveries counted by
// the queue), parked after its 3 attempts and dead-lettered.
func TestConsume(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		q := newQueues(t)
		conn := dial(t)
		p := brokertest.NewProvider()
		e := brokertest.NewEngine(t, st, p, time.Minute)
		var keys []string
		for i := range 20 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: int64(i + 1)}
			q.publish(t, fmt.Sprintf("m%d", i), brokertest.Body(u))
			if i%4 == 0 {
				q.publish(t, fmt.Sprintf("m%d", i), brokertest.Body(u)) // the producer's retry
			}
			keys = append(keys, brokertest.ChargeKey(u))
		}
		q.publish(t, "poison", []byte("{not json"))
		q.publish(t, "broken", brokertest.Body(brokertest.Order{ID: "b", Amount: 1, Broken: true}))
		src := &recording{Source: source(t, conn, q.main), seen: map[string][]int{}}
		stop := brokertest.Consuming(t, e, src)
		brokertest.Within(t, 30*time.Second, "the poison and the broken unit dead-lettered, every charge applied", func() bool {
			applied := 0
			for _, k := range keys {
				_, n := p.Counts(k)
				applied += n
			}
			return q.ready(t, q.dead) == 2 && applied >= len(keys)
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if n := q.ready(t, q.main); n != 0 {
			t.Errorf("%d messages left in the queue", n)
		}
		p.AppliedOnce(t, keys...)
		parked := brokertest.Parked(t, st)
		if row, ok := parked["message:"+q.main+"/poison"]; !ok || row.State != idem.UnitStateParked || row.Attempts != 1 {
			t.Errorf("poison: %+v (found %v)", row, ok)
		}
		if row, ok := parked["order:b"]; !ok || row.State != idem.UnitStateParked || row.Attempts != 3 {
			t.Errorf("broken unit: %+v (found %v)", row, ok)
		}
		if len(parked) != 2 {
			t.Errorf("parked rows %v, want 2", parked)
		}
		// Both dead-lettered, and the broken unit's deliveries numbered by the queue.
		for range 2 {
			if _, ok, err := q.ch.Get(q.dead, true); err != nil || !ok {
				t.Fatalf("a dead letter is missing (%v)", err)
			}
		}
		if got := fmt.Sprint(src.deliveries(q.main + "/broken")); got != "[1 2 3]" {
			t.Errorf("the broken unit's deliveries %s, want [1 2 3]", got)
		}
	})
}

// A consumer whose connection dies with its charge in flight, and a new
// one: RabbitMQ gives the messages back when the connection closes; the
// new consumer acks them (the charge it finds leased is owed) and its
// drain performs the held charge after the dead one's lease. Each key is
// applied once.
func TestConsumerKilledMidBatch(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		const lease = 2 * time.Second
		q := newQueues(t)
		var keys []string
		for i := range 10 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: 1}
			q.publish(t, fmt.Sprintf("m%d", i), brokertest.Body(u))
			keys = append(keys, brokertest.ChargeKey(u))
		}
		held := brokertest.ChargeKey(brokertest.Order{ID: "3"})
		dead := brokertest.NewProvider()
		inFlight, release := make(chan struct{}), make(chan struct{})
		dead.Hold = func(ctx context.Context, key string) error {
			if key == held {
				close(inFlight)
				<-release
				return errors.New("killed")
			}
			return nil
		}
		conn1 := dial(t)
		first := brokertest.NewEngine(t, st, dead, lease)
		brokertest.Consuming(t, first, source(t, conn1, q.main), idembroker.WithStopGrace(time.Hour), idembroker.WithDrainEvery(time.Hour))
		t.Cleanup(func() { close(release) })
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("the first consumer never called the provider")
		}
		conn1.Close()

		next := brokertest.NewProvider()
		second := brokertest.NewEngine(t, st, next, lease)
		stop := brokertest.Consuming(t, second, source(t, dial(t), q.main))
		brokertest.Within(t, 30*time.Second, "the held charge taken over", func() bool {
			_, n := next.Counts(held)
			return n == 1 && q.ready(t, q.main) == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			_, a1 := dead.Counts(k)
			_, a2 := next.Counts(k)
			if a1+a2 != 1 {
				t.Errorf("%s applied %d times (killed consumer %d, next %d)", k, a1+a2, a1, a2)
			}
		}
		if n := q.ready(t, q.main); n != 0 {
			t.Errorf("%d messages left", n)
		}
		if bl := brokertest.Backlog(t, second); bl != (idemrt.Backlog{}) {
			t.Errorf("backlog %+v", bl)
		}
	})
}

// RabbitMQ dedupes nothing: the same key published twice is delivered
// twice, both with the key as message-id, each confirmed. A consumer whose
// unit key is the message-id applies it once.
func TestPublishDedupedByConsumer(t *testing.T) {
	q := newQueues(t)
	conn := dial(t)
	pub, err := idemamqp.NewPublisher(context.Background(), conn, "")
	must(t, err)
	t.Cleanup(func() { pub.Close() })
	var tags []uint64
	for range 2 {
		res, err := pub.Publish(context.Background(), q.main, "e1", brokertest.Body(brokertest.Order{ID: "ignored", Amount: 9}))
		must(t, err)
		var ack struct {
			RoutingKey  string `json:"routing_key"`
			DeliveryTag uint64 `json:"delivery_tag"`
		}
		must(t, json.Unmarshal(res, &ack))
		if ack.RoutingKey != q.main {
			t.Errorf("result %s", res)
		}
		tags = append(tags, ack.DeliveryTag)
	}
	if tags[0] != 1 || tags[1] != 2 {
		t.Errorf("delivery tags %v, want 1 and 2", tags)
	}
	if _, err := pub.Publish(context.Background(), "no-such-queue-"+q.main, "e2", []byte("{}")); err == nil || !strings.Contains(err.Error(), "unroutable") {
		t.Errorf("unroutable publish: %v", err)
	}

	st := brokertest.OpenSQLite(t)
	p := brokertest.NewProvider()
	e := brokertest.NewEngine(t, st, p, time.Minute)
	var decoded atomic.Int32
	byMessageID := func(m idembroker.Message) (brokertest.Order, error) {
		decoded.Add(1)
		u, err := brokertest.DecodeOrder(m)
		u.ID = m.Headers["message-id"]
		return u, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- idembroker.Consume(ctx, e, source(t, conn, q.main), byMessageID, idembroker.Config{Job: brokertest.JobName, Broker: "rabbitmq"},
			idembroker.WithLogger(brokertest.Logger()), idembroker.WithDrainEvery(time.Hour))
	}()
	brokertest.Within(t, 30*time.Second, "both deliveries decoded", func() bool { return decoded.Load() == 2 })
	cancel() // the batch in hand is finished and settled before Consume returns
	must(t, <-done)
	p.AppliedOnce(t, "charge:e1")
	if calls, _ := p.Counts("charge:e1"); calls != 1 {
		t.Errorf("provider called %d times", calls)
	}
}

// recording is a Source that notes each message's Deliveries as fetched.
type recording struct {
	*idemamqp.Source
	mu   sync.Mutex
	seen map[string][]int
}

func (r *recording) Fetch(ctx context.Context, max int) ([]idembroker.Delivery, error) {
	ds, err := r.Source.Fetch(ctx, max)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range ds {
		m := d.Message()
		r.seen[m.ID] = append(r.seen[m.ID], m.Deliveries)
	}
	return ds, err
}

func (r *recording) deliveries(id string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[id]
}

// A source closed right after acking lands its acks: none of the messages
// comes back to the queue. A quorum queue dropped the acks still on their
// way when the channel closed at once, in about half the closes here, so
// the close is tried closesTried times, each after a hundred acks.
func TestCloseLandsItsAcks(t *testing.T) {
	const closesTried, perClose = 14, 100
	q := newQueues(t)
	conn := dial(t)
	for round := range closesTried {
		for i := range perClose {
			q.publish(t, fmt.Sprintf("r%d-m%d", round, i), []byte("{}"))
		}
		// No consumer tag: Close cancels the consumer by the one it made up.
		src, err := idemamqp.NewSource(context.Background(), conn, idemamqp.SourceConfig{Queue: q.main, FetchWait: 200 * time.Millisecond})
		must(t, err)
		acked := 0
		brokertest.Within(t, 30*time.Second, fmt.Sprintf("close %d: %d messages fetched and acknowledged", round+1, perClose), func() bool {
			ds, err := src.Fetch(context.Background(), perClose-acked)
			must(t, err)
			for _, d := range ds {
				must(t, d.Ack(context.Background()))
				acked++
			}
			return acked == perClose
		})
		must(t, src.Close())
		brokertest.Within(t, 5*time.Second, fmt.Sprintf("close %d: the queue empty, every ack applied (%d messages are back)", round+1, q.ready(t, q.main)), func() bool {
			return q.ready(t, q.main) == 0
		})
	}
}
