package idemnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idembroker/brokertest"
	"github.com/idemgen/idemgen/idem/idemnats"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// EnvNATS names the NATS server (with JetStream) the tests run against.
const envNATS = "IDEMGEN_TEST_NATS"

// connect opens a connection to the test server, or skips t.
func connect(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	url := os.Getenv(envNATS)
	if url == "" {
		t.Skip(envNATS + " is not set; set it to a NATS URL with JetStream (nats://127.0.0.1:4222) to run this test")
	}
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatalf("%s is set, but NATS cannot be reached: %v", envNATS, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// newStream creates a stream of its own for t, deleted when t ends, and
// returns its name and subject.
func newStream(t *testing.T) (stream, subject string) {
	t.Helper()
	_, js := connect(t) // a connection of its own, that outlives the consumers' (cleanups run last first)
	id := fmt.Sprintf("%d", time.Now().UnixNano())
	stream, subject = "IDEMT_"+id, "idemt."+id+".orders"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, stream); err != nil {
			t.Logf("delete stream %s: %v", stream, err)
		}
	})
	return stream, subject
}

func publish(t *testing.T, js jetstream.JetStream, subject string, body []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subject, body); err != nil {
		t.Fatal(err)
	}
}

func source(t *testing.T, js jetstream.JetStream, subject string) *idemnats.Source {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	src, err := idemnats.NewSource(ctx, js, idemnats.SourceConfig{Subject: subject, Durable: "orders", AckWait: 2 * time.Second, FetchWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// consumerInfo reads the durable consumer's state at the server.
func consumerInfo(t *testing.T, js jetstream.JetStream, stream string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, stream, "orders")
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// Duplicates and poison through a real JetStream consumer: each key is
// charged once, the poison is parked once and terminated (not redelivered),
// and the consumer ends with nothing pending or unacknowledged.
func TestConsume(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		_, js := connect(t)
		stream, subject := newStream(t)
		p := brokertest.NewProvider()
		e := brokertest.NewEngine(t, st, p, time.Minute)
		var keys []string
		for i := range 30 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: int64(i + 1)}
			publish(t, js, subject, brokertest.Body(u))
			if i%3 == 0 {
				publish(t, js, subject, brokertest.Body(u)) // the producer's retry
			}
			keys = append(keys, brokertest.ChargeKey(u))
		}
		publish(t, js, subject, []byte("{not json"))
		stop := brokertest.Consuming(t, e, source(t, js, subject))
		brokertest.Within(t, 30*time.Second, "every message settled", func() bool {
			info := consumerInfo(t, js, stream)
			return info.NumPending == 0 && info.NumAckPending == 0
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		p.AppliedOnce(t, keys...)
		for _, k := range keys {
			if calls, _ := p.Counts(k); calls != 1 {
				t.Errorf("%s called %d times", k, calls)
			}
		}
		parked := brokertest.Parked(t, st)
		poison := fmt.Sprintf("message:%s/%d", stream, 41)
		if row, ok := parked[poison]; !ok || row.State != idem.UnitStateParked || row.Attempts != 1 || len(parked) != 1 {
			t.Errorf("parked rows %v, want %s parked once", parked, poison)
		}
		if info := consumerInfo(t, js, stream); info.NumRedelivered != 0 {
			t.Errorf("%d messages redelivered", info.NumRedelivered)
		}
		if bl := brokertest.Backlog(t, e); bl.OwedEffects != 0 || bl.ParkedEffects != 0 {
			t.Errorf("backlog %+v", bl)
		}
	})
}

// A consumer whose connection dies mid-batch (its charge in flight) and a
// new one on the same durable: the server redelivers after AckWait, the
// new consumer acks (the unit is written; the charge it finds leased is
// owed) and its drain performs the charge after the dead one's lease.
// Every unit is applied, each key once.
func TestConsumerKilledMidBatch(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		const lease = 2 * time.Second
		nc, js := connect(t)
		stream, subject := newStream(t)
		var keys []string
		for i := range 10 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: 1}
			publish(t, js, subject, brokertest.Body(u))
			keys = append(keys, brokertest.ChargeKey(u))
		}
		dead := brokertest.NewProvider()
		inFlight, release := make(chan struct{}), make(chan struct{})
		dead.Hold = func(ctx context.Context, key string) error {
			if key == brokertest.ChargeKey(brokertest.Order{ID: "3"}) {
				close(inFlight)
				<-release
				return errors.New("killed")
			}
			return nil
		}
		first := brokertest.NewEngine(t, st, dead, lease)
		brokertest.Consuming(t, first, source(t, js, subject), idembroker.WithStopGrace(time.Hour), idembroker.WithDrainEvery(time.Hour))
		t.Cleanup(func() { close(release) })
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("the first consumer never called the provider")
		}
		nc.Close() // killed: nothing it fetched is settled from now on

		_, js2 := connect(t)
		next := brokertest.NewProvider()
		second := brokertest.NewEngine(t, st, next, lease)
		stop := brokertest.Consuming(t, second, source(t, js2, subject), idembroker.WithKeepAlive(500*time.Millisecond))
		brokertest.Within(t, 30*time.Second, "every message settled and every charge applied", func() bool {
			info := consumerInfo(t, js2, stream)
			applied := 0
			for _, k := range keys {
				_, a1 := dead.Counts(k)
				_, a2 := next.Counts(k)
				applied += min(a1+a2, 1)
			}
			return info.NumPending == 0 && info.NumAckPending == 0 && applied == len(keys)
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
		if _, applied := next.Counts(brokertest.ChargeKey(brokertest.Order{ID: "3"})); applied != 1 {
			t.Errorf("the charge in flight at the kill was not taken over by the next consumer")
		}
		if bl := brokertest.Backlog(t, second); bl != (idemrt.Backlog{}) {
			t.Errorf("backlog %+v", bl)
		}
	})
}

// Publishing the same key twice inside the stream's duplicate window
// stores one message; the second publish answers with the first's
// sequence, marked duplicate.
func TestPublishDedupe(t *testing.T) {
	_, js := connect(t)
	stream, subject := newStream(t)
	pub := idemnats.NewPublisher(js)
	ctx := context.Background()
	type ack struct {
		Stream    string `json:"stream"`
		Seq       uint64 `json:"seq"`
		Duplicate bool   `json:"duplicate"`
	}
	var acks []ack
	for range 2 {
		res, err := pub.Publish(ctx, subject, "receipt:v1:e1", []byte(`{"event_id":"e1"}`))
		if err != nil {
			t.Fatal(err)
		}
		var a ack
		if err := json.Unmarshal(res, &a); err != nil {
			t.Fatalf("result %s: %v", res, err)
		}
		acks = append(acks, a)
	}
	if acks[0] != (ack{stream, 1, false}) || acks[1] != (ack{stream, 1, true}) {
		t.Errorf("acks %+v", acks)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Errorf("stream holds %d messages, want 1", info.State.Msgs)
	}
	msg, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Header.Get(jetstream.MsgIDHeader); got != "receipt:v1:e1" || !strings.Contains(string(msg.Data), "e1") {
		t.Errorf("stored message: id %q, body %s", got, msg.Data)
	}
}
