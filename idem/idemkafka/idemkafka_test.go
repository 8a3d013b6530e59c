package idemkafka_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idembroker/brokertest"
	"github.com/idemgen/idemgen/idem/idemkafka"
	"github.com/idemgen/idemgen/idem/idemrt"
)

const topic = "orders"

// cluster is an in-process Kafka (kfake) with the orders topic in 3
// partitions, closed when t ends.
func cluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// produce writes records keyed by their order id (so a key's records stay
// in one partition, in order).
func produce(t *testing.T, addrs []string, bodies ...[]byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rs []*kgo.Record
	for _, b := range bodies {
		var u brokertest.Order
		_ = json.Unmarshal(b, &u)
		rs = append(rs, &kgo.Record{Topic: topic, Key: []byte(u.ID), Value: b})
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func source(t *testing.T, addrs []string) *idemkafka.Source {
	t.Helper()
	src, err := idemkafka.NewSource(context.Background(), idemkafka.SourceConfig{Topic: topic, Group: "ledgerfeed", FetchWait: 200 * time.Millisecond},
		kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// counting is a decoder that counts the messages it sees, by ID.
type counting struct {
	mu   sync.Mutex
	seen map[string]int
}

func (c *counting) decode(m idembroker.Message) (brokertest.Order, error) {
	c.mu.Lock()
	c.seen[m.ID]++
	c.mu.Unlock()
	return brokertest.DecodeOrder(m)
}

func (c *counting) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.seen {
		n += v
	}
	return n
}

// consume runs Consume with decode until stop is called.
func consume(t *testing.T, e *idemrt.Engine[brokertest.Order], src idembroker.Source, decode func(idembroker.Message) (brokertest.Order, error), opts ...idembroker.Option) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	opts = append([]idembroker.Option{idembroker.WithLogger(brokertest.Logger()), idembroker.WithRetryBackoff(time.Millisecond, 5*time.Millisecond),
		idembroker.WithDrainEvery(100 * time.Millisecond), idembroker.WithBatch(8)}, opts...)
	go func() {
		done <- idembroker.Consume(ctx, e, src, decode, idembroker.Config{Job: brokertest.JobName, Broker: "kafka", From: topic, Group: "ledgerfeed"}, opts...)
	}()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				err = errors.New("Consume did not return within a minute")
			}
		})
		return err
	}
	// Whatever stop answers here, the test has judged: a consumer it killed
	// ends with its closed source, and one it stopped has said already.
	t.Cleanup(func() { _ = stop() })
	return stop
}

// Duplicates, poison and a unit whose write keeps failing, on a real
// Kafka protocol (kfake): each key charged once; the poison parked and
// committed past; the failing record fetched again in place until its 3
// attempts park it, and committed past then. A new member of the group
// afterwards is handed nothing: every offset was committed.
func TestConsume(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		addrs := cluster(t)
		var bodies [][]byte
		var keys []string
		for i := range 30 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: int64(i + 1)}
			bodies = append(bodies, brokertest.Body(u))
			if i%3 == 0 {
				bodies = append(bodies, brokertest.Body(u)) // the producer's retry
			}
			keys = append(keys, brokertest.ChargeKey(u))
		}
		bodies = append(bodies, []byte("{not json"), brokertest.Body(brokertest.Order{ID: "b", Amount: 1, Broken: true}))
		produce(t, addrs, bodies...)
		p := brokertest.NewProvider()
		e := brokertest.NewEngine(t, st, p, time.Minute)
		seen := &counting{seen: map[string]int{}}
		began := time.Now()
		stop := consume(t, e, source(t, addrs), seen.decode)
		brokertest.Within(t, 60*time.Second, "every charge applied, the poison and the broken unit parked", func() bool {
			applied := 0
			for _, k := range keys {
				_, n := p.Counts(k)
				applied += n
			}
			parked := brokertest.Parked(t, st)
			return applied >= len(keys) && len(parked) == 2 && parked["order:b"].State == idem.UnitStateParked
		})
		t.Logf("settled after %s", time.Since(began))
		time.Sleep(300 * time.Millisecond) // the batch that parked the broken unit commits
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		p.AppliedOnce(t, keys...)
		parked := brokertest.Parked(t, st)
		if row := parked["order:b"]; row.Attempts != 3 {
			t.Errorf("broken unit %+v, want parked after 3 attempts", row)
		}
		poison := 0
		for k, row := range parked {
			if k != "order:b" && row.State == idem.UnitStateParked && row.Attempts == 1 {
				poison++
			}
		}
		if poison != 1 {
			t.Errorf("parked %v, want the poison parked once", parked)
		}

		// A new member finds every offset committed.
		again := &counting{seen: map[string]int{}}
		stop = consume(t, e, source(t, addrs), again.decode)
		time.Sleep(2 * time.Second)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("done after %s", time.Since(began))
		if n := again.total(); n != 0 {
			t.Errorf("the next member was handed %d records: %v", n, again.seen)
		}
	})
}

// A member killed with a charge in flight (its client closed before it
// settled or committed anything of its batch), and a new member: the
// group hands the partitions over from the last commit; the new member
// acks the redelivered records (the held charge is owed) and its drain
// performs the charge after the dead one's lease. Each key applied once.
func TestConsumerKilledMidBatch(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		const lease = 2 * time.Second
		addrs := cluster(t)
		var bodies [][]byte
		var keys []string
		for i := range 12 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: 1}
			bodies = append(bodies, brokertest.Body(u))
			keys = append(keys, brokertest.ChargeKey(u))
		}
		produce(t, addrs, bodies...)
		dead := brokertest.NewProvider()
		inFlight, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		dead.Hold = func(ctx context.Context, key string) error {
			once.Do(func() { close(inFlight) })
			<-release // the first batch's calls never return: the process is gone
			return errors.New("killed")
		}
		first := brokertest.NewEngine(t, st, dead, lease)
		src1 := source(t, addrs)
		seen1 := &counting{seen: map[string]int{}}
		consume(t, first, src1, seen1.decode, idembroker.WithStopGrace(time.Hour), idembroker.WithDrainEvery(time.Hour))
		t.Cleanup(func() { close(release) })
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("the first member never called the provider")
		}
		if err := src1.Close(); err != nil { // killed: it leaves the group with nothing of its batch committed
			t.Fatal(err)
		}

		next := brokertest.NewProvider()
		second := brokertest.NewEngine(t, st, next, lease)
		stop := consume(t, second, source(t, addrs), (&counting{seen: map[string]int{}}).decode)
		brokertest.Within(t, 60*time.Second, "every charge applied", func() bool {
			applied := 0
			for _, k := range keys {
				_, a := next.Counts(k)
				applied += a
			}
			return applied == len(keys)
		})
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			_, a1 := dead.Counts(k)
			_, a2 := next.Counts(k)
			if a1+a2 != 1 {
				t.Errorf("%s applied %d times", k, a1+a2)
			}
		}
		if n := seen1.total(); n == 0 {
			t.Errorf("the first member fetched %d records", n)
		}
		if bl := brokertest.Backlog(t, second); bl != (idemrt.Backlog{}) {
			t.Errorf("backlog %+v", bl)
		}
	})
}

// The publisher writes the effect key as the record key and an
// idempotency-key header, and returns where the record went.
func TestPublish(t *testing.T) {
	addrs := cluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pub := idemkafka.NewPublisher(cl)
	res, err := pub.Publish(context.Background(), topic, "receipt:v1:e1", []byte(`{"id":"e1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var ack struct {
		Topic     string `json:"topic"`
		Partition int32  `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	if err := json.Unmarshal(res, &ack); err != nil || ack.Topic != topic || ack.Offset != 0 {
		t.Fatalf("result %s (%v)", res, err)
	}
	rd, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fs := rd.PollRecords(ctx, 10)
	var got []*kgo.Record
	fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	if len(got) != 1 || string(got[0].Key) != "receipt:v1:e1" || got[0].Partition != ack.Partition ||
		len(got[0].Headers) != 1 || got[0].Headers[0].Key != "idempotency-key" || string(got[0].Headers[0].Value) != "receipt:v1:e1" {
		t.Errorf("records %+v", got)
	}
}
