package main

// The brokers of the -only consumers measurement (consumers.go): for each,
// a lane (one run's own stream, queue or topic, and its consumer group)
// that the parent makes, fills and watches, the adapter's idembroker.Source
// that the generated consumer reads, and the hand-written consumer's loop
// on the broker's own client.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The brokers the measurement knows, in the order it runs them.
var consumerBrokers = []string{"nats", "rabbitmq", "kafka"}

// brokerAddr is where the measurement finds each broker: NATS and RabbitMQ
// from the environment (as the project's tests), Kafka an in-process kfake
// cluster the parent starts (startKafka).
func brokerAddr(broker string) string {
	switch broker {
	case "nats":
		if v := os.Getenv("IDEMGEN_TEST_NATS"); v != "" {
			return v
		}
		return nats.DefaultURL
	case "rabbitmq":
		if v := os.Getenv("IDEMGEN_TEST_AMQP"); v != "" {
			return v
		}
		return "amqp://guest:guest@127.0.0.1:5672/"
	}
	return ""
}

// startKafka starts franz-go's in-process Kafka on loopback ports, so that
// a child consumer process reaches it as it would a real cluster. Its
// sessions are short, so that a killed consumer's partitions go to the
// next one within a second or two, not a default session's 45 s.
func startKafka() (seeds string, stop func(), err error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		return "", nil, fmt.Errorf("start kfake: %w", err)
	}
	return strings.Join(c.ListenAddrs(), ","), c.Close, nil
}

// kafkaGroupOpts are a Kafka consumer's group settings in the measurement,
// ours and the hand-written one's alike: a short session, so that a killed
// member's partitions move within seconds.
func kafkaGroupOpts() []kgo.Opt {
	return []kgo.Opt{kgo.SessionTimeout(2 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond),
		kgo.RebalanceTimeout(5 * time.Second), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200 * time.Millisecond)}
}

// kafkaPartitions is the partitions of each run's topic.
const kafkaPartitions = 3

// natsAckWait is the redelivery timer of the measurement's JetStream
// consumers: above the charge effect's lease and timeout (idemgen.yaml's
// consume ack_wait says so to vet).
const natsAckWait = 10 * time.Second

// lane is one run's own place on a broker: a JetStream stream and subject
// with a durable consumer, a RabbitMQ queue with a consumer tag, or a
// Kafka topic with a consumer group. Every run gets a fresh one, named
// after this process and a sequence, so runs and other users of the
// broker never meet.
//
// Every lane has an announcement stream on NATS too, whatever its broker:
// order_consumer's announce_order effect publishes there (routed from the
// spec's subject to the lane's own, so that runs never share JetStream's
// dedupe window), and the parent reads it as a downstream subscriber.
type lane struct {
	ID     string `json:"id"` // names the lane's places, and its orders
	Broker string `json:"broker"`
	Addr   string `json:"addr"`   // NATS URL, AMQP URL, Kafka seed brokers
	From   string `json:"from"`   // subject, queue or topic
	Group  string `json:"group"`  // durable, consumer tag, consumer group
	Stream string `json:"stream"` // JetStream: the stream holding From

	NATS           string `json:"nats"`            // the NATS URL of the announcements
	Announce       string `json:"announce"`        // their subject
	AnnounceStream string `json:"announce_stream"` // the stream holding it
}

func newLane(ctx context.Context, broker, addr, natsAddr, name string) (*lane, error) {
	id := fmt.Sprintf("%d_%s_%s", os.Getpid(), name, broker)
	l := &lane{ID: id, Broker: broker, Addr: addr, Group: "bench_" + id, NATS: natsAddr,
		Announce: "idemgen.bench." + id + ".announced", AnnounceStream: "IDEMGEN_BENCH_" + id + "_ANNOUNCED"}
	if err := l.withNATS(func(js jetstream.JetStream) error {
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: l.AnnounceStream, Subjects: []string{l.Announce}})
		return err
	}); err != nil {
		return nil, fmt.Errorf("the announcements' stream: %w", err)
	}
	switch broker {
	case "nats":
		l.Stream, l.From = "IDEMGEN_BENCH_"+id, "idemgen.bench."+id+".orders"
		return l, l.withJetStream(func(js jetstream.JetStream) error {
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: l.Stream, Subjects: []string{l.From}})
			return err
		})
	case "rabbitmq":
		l.From = "idemgen.bench." + id + ".orders"
		return l, l.withChannel(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(l.From, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			return err
		})
	case "kafka":
		l.From = "idemgen.bench." + id + ".orders"
		return l, l.withAdmin(func(adm *kadm.Client) error {
			resp, err := adm.CreateTopic(ctx, kafkaPartitions, 1, nil, l.From)
			if err == nil {
				err = resp.Err
			}
			return err
		})
	}
	return nil, fmt.Errorf("no broker %q (want one of %s)", broker, strings.Join(consumerBrokers, ", "))
}

// withJetStream runs fn on the lane's broker, NATS.
func (l *lane) withJetStream(fn func(jetstream.JetStream) error) error {
	return withJetStream(l.Addr, fn)
}

// withNATS runs fn on the NATS of the lane's announcements.
func (l *lane) withNATS(fn func(jetstream.JetStream) error) error {
	return withJetStream(l.NATS, fn)
}

func withJetStream(addr string, fn func(jetstream.JetStream) error) error {
	nc, err := nats.Connect(addr, nats.Timeout(5*time.Second))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", addr, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	return fn(js)
}

// announced reads the lane's announcements as a downstream subscriber
// would, every one the stream holds, and counts them by Nats-Msg-Id.
func (l *lane) announced(ctx context.Context) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	seen := map[string]int{}
	err := l.withNATS(func(js jetstream.JetStream) error {
		s, err := js.Stream(ctx, l.AnnounceStream)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
		if err != nil {
			return err
		}
		for got := uint64(0); got < info.State.Msgs; {
			batch, err := c.Fetch(500, jetstream.FetchMaxWait(2*time.Second))
			if err != nil {
				return err
			}
			before := got
			for m := range batch.Messages() {
				seen[m.Headers().Get(jetstream.MsgIDHeader)]++
				got++
			}
			if got == before {
				return fmt.Errorf("read %d of the %d announcements; no more came (%v)", got, info.State.Msgs, batch.Error())
			}
		}
		return nil
	})
	return seen, err
}

func (l *lane) withChannel(fn func(*amqp.Channel) error) error {
	conn, err := amqp.DialConfig(l.Addr, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return fn(ch)
}

func (l *lane) withAdmin(fn func(*kadm.Client) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(l.Addr, ",")...))
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(kadm.NewClient(cl))
}

// drop removes the lane's stream, queue or topic.
func (l *lane) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = l.withNATS(func(js jetstream.JetStream) error { return js.DeleteStream(ctx, l.AnnounceStream) })
	switch l.Broker {
	case "nats":
		_ = l.withJetStream(func(js jetstream.JetStream) error { return js.DeleteStream(ctx, l.Stream) })
	case "rabbitmq":
		_ = l.withChannel(func(ch *amqp.Channel) error { _, err := ch.QueueDelete(l.From, false, false, false); return err })
	case "kafka":
		_ = l.withAdmin(func(adm *kadm.Client) error { _, err := adm.DeleteTopic(ctx, l.From); return err })
	}
}

// publish sends every body to the lane and waits for the broker to
// confirm each (JetStream's publish acks, RabbitMQ's publisher confirms,
// Kafka's produce responses). The duplicates carry no dedupe id: they
// stand for a producer that sent an order twice, which no broker catches.
func (l *lane) publish(ctx context.Context, bodies [][]byte) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	switch l.Broker {
	case "nats":
		return l.withJetStream(func(js jetstream.JetStream) error {
			acks := make([]jetstream.PubAckFuture, 0, len(bodies))
			for _, b := range bodies {
				f, err := js.PublishAsync(l.From, b)
				if err != nil {
					return err
				}
				acks = append(acks, f)
			}
			for i, f := range acks {
				select {
				case <-f.Ok():
				case err := <-f.Err():
					return fmt.Errorf("publish message %d: %w", i, err)
				case <-ctx.Done():
					return fmt.Errorf("publish message %d: %w", i, ctx.Err())
				}
			}
			return nil
		})
	case "rabbitmq":
		return l.withChannel(func(ch *amqp.Channel) error {
			if err := ch.Confirm(false); err != nil {
				return err
			}
			confirms := make([]*amqp.DeferredConfirmation, 0, len(bodies))
			for _, b := range bodies {
				c, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", l.From, false, false,
					amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: b})
				if err != nil {
					return err
				}
				confirms = append(confirms, c)
			}
			for i, c := range confirms {
				ok, err := c.WaitContext(ctx)
				if err != nil || !ok {
					return fmt.Errorf("publish message %d: not confirmed (%v)", i, err)
				}
			}
			return nil
		})
	case "kafka":
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(l.Addr, ",")...), kgo.DefaultProduceTopic(l.From))
		if err != nil {
			return err
		}
		defer cl.Close()
		recs := make([]*kgo.Record, len(bodies))
		for i, b := range bodies {
			recs[i] = &kgo.Record{Value: b}
		}
		return cl.ProduceSync(ctx, recs...).FirstErr()
	}
	return fmt.Errorf("no broker %q", l.Broker)
}

// backlog is how many of the lane's messages its group has not settled:
// JetStream's pending and unacknowledged messages of the durable consumer
// (all of them before the consumer exists); RabbitMQ's ready messages
// (unacknowledged ones are not counted while their consumer is connected,
// and count again once it is gone); Kafka's group lag against the topic's
// end offsets.
func (l *lane) backlog(ctx context.Context, published int) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n := 0
	var err error
	switch l.Broker {
	case "nats":
		err = l.withJetStream(func(js jetstream.JetStream) error {
			c, err := js.Consumer(ctx, l.Stream, l.Group)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				n = published
				return nil
			}
			if err != nil {
				return err
			}
			info, err := c.Info(ctx)
			if err != nil {
				return err
			}
			n = int(info.NumPending) + info.NumAckPending
			return nil
		})
	case "rabbitmq":
		err = l.withChannel(func(ch *amqp.Channel) error {
			q, err := ch.QueueDeclarePassive(l.From, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
			n = q.Messages
			return err
		})
	case "kafka":
		err = l.withAdmin(func(adm *kadm.Client) error {
			ends, err := adm.ListEndOffsets(ctx, l.From)
			if err != nil {
				return err
			}
			committed, err := adm.FetchOffsets(ctx, l.Group)
			if err != nil && !errors.Is(err, kadm.ErrEmpty) {
				return err
			}
			ends.Each(func(o kadm.ListedOffset) {
				at := int64(0)
				if c, ok := committed.Lookup(o.Topic, o.Partition); ok && c.Err == nil && c.At >= 0 {
					at = c.At
				}
				n += int(o.Offset - at)
			})
			return ends.Error()
		})
	default:
		err = fmt.Errorf("no broker %q", l.Broker)
	}
	if err != nil {
		return 0, fmt.Errorf("%s backlog of %s: %w", l.Broker, l.From, err)
	}
	return n, nil
}

// handFn handles one message's body in a hand-written consumer; an error
// stops the run (the baselines meet no failure: the provider never fails).
type handFn func(ctx context.Context, body []byte) error

// consumeByHand is the hand-written consumer's loop on the broker's own
// client, the way its documentation shows: messages fetched in batches of
// 50 (JetStream Fetch; RabbitMQ prefetch 50; Kafka PollRecords), each
// handled and then acknowledged on its own (Kafka: the polled records'
// offsets committed after them), until ctx ends. acked counts the
// messages settled. It returns once connected (ready), then runs in the
// background: wait returns its error.
func (l *lane) consumeByHand(ctx context.Context, handle handFn, acked func()) (wait func() error, err error) {
	done := make(chan error, 1)
	switch l.Broker {
	case "nats":
		nc, err := nats.Connect(l.Addr, nats.Timeout(5*time.Second))
		if err != nil {
			return nil, err
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, err
		}
		cons, err := js.CreateOrUpdateConsumer(ctx, l.Stream, jetstream.ConsumerConfig{Durable: l.Group, FilterSubject: l.From,
			AckPolicy: jetstream.AckExplicitPolicy, AckWait: natsAckWait})
		if err != nil {
			nc.Close()
			return nil, err
		}
		go func() {
			defer nc.Close()
			done <- func() error {
				for ctx.Err() == nil {
					batch, err := cons.Fetch(50, jetstream.FetchMaxWait(500*time.Millisecond))
					if err != nil {
						return err
					}
					for m := range batch.Messages() {
						if err := handle(ctx, m.Data()); err != nil {
							return err
						}
						if err := m.Ack(); err != nil {
							return err
						}
						acked()
					}
					if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && ctx.Err() == nil {
						return err
					}
				}
				return nil
			}()
		}()
	case "rabbitmq":
		conn, err := amqp.DialConfig(l.Addr, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return nil, err
		}
		ch, err := conn.Channel()
		if err == nil {
			err = ch.Qos(50, 0, false)
		}
		var deliveries <-chan amqp.Delivery
		if err == nil {
			deliveries, err = ch.Consume(l.From, l.Group, false, false, false, false, nil)
		}
		if err != nil {
			conn.Close()
			return nil, err
		}
		go func() {
			defer conn.Close()
			// The consumer's cancel is a round trip the acks before it
			// land ahead of: a quorum queue drops the acks still on their
			// way when the connection closes at once, and requeues
			// those messages (idemamqp.Source.Close does the same).
			defer func() { _ = ch.Cancel(l.Group, false) }()
			done <- func() error {
				for {
					select {
					case d, ok := <-deliveries:
						if !ok {
							return errors.New("the channel closed")
						}
						if err := handle(ctx, d.Body); err != nil {
							return err
						}
						if err := d.Ack(false); err != nil {
							return err
						}
						acked()
					case <-ctx.Done():
						return nil
					}
				}
			}()
		}()
	case "kafka":
		opts := append(kafkaGroupOpts(), kgo.SeedBrokers(strings.Split(l.Addr, ",")...),
			kgo.ConsumerGroup(l.Group), kgo.ConsumeTopics(l.From), kgo.DisableAutoCommit())
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return nil, err
		}
		go func() {
			defer cl.Close()
			done <- func() error {
				for ctx.Err() == nil {
					fetches := cl.PollRecords(ctx, 50)
					if ctx.Err() != nil {
						return nil
					}
					if err := fetches.Err(); err != nil {
						return err
					}
					for _, r := range fetches.Records() {
						if err := handle(ctx, r.Value); err != nil {
							return err
						}
					}
					if err := cl.CommitUncommittedOffsets(ctx); err != nil {
						return err
					}
					for range fetches.Records() {
						acked()
					}
				}
				return nil
			}()
		}()
	default:
		return nil, fmt.Errorf("no broker %q", l.Broker)
	}
	return func() error {
		err := <-done
		if ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
			return nil
		}
		return err
	}, nil
}
