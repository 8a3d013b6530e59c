// Package idembroker runs a generated handed-in job as a consumer of a
// message broker, and lets an effect publish to one. It knows no broker:
// the adapters idemnats (JetStream), idemamqp (RabbitMQ) and idemkafka
// (franz-go) implement Source and Publisher on each broker's own client, so
// a service that consumes from no broker links none of them.
//
// The contract, for every broker:
//
//   - A batch of fetched messages is decoded into units (Decode) and handed
//     to the job's Process in one call. A message is settled with its broker
//     only after Process returned, that is after its unit's transaction
//     committed: written, deduped, a mismatch or parked.
//   - How a message is settled follows its unit's idemrt.Settlement:
//     SettleDone and SettleOwed are acknowledged (an owed effect is in the
//     ledger, reserved in the unit's own transaction, and the consumer's own
//     drain performs it, or takes it over from a dead consumer once its lease
//     ran out); SettleRetry goes back to the broker for redelivery after a
//     backoff; SettleDead is parked once with its raw body and headers and
//     then settled so that it never loops (Delivery.Dead).
//   - A message that does not decode is parked the same way, under the key
//     "message:" + Message.ID.
//   - While Process runs, each message of the batch is kept alive with the
//     broker (Delivery.InProgress) so a long effect does not make the broker
//     redeliver it.
//   - Consume returns when ctx ends, after it has settled what it fetched.
package idembroker

import (
	"context"
	"errors"
	"time"
)

// Message is one delivery as the broker handed it.
type Message struct {
	// ID names the message at its broker, for logs and for parking a
	// message that does not decode: "stream/seq" on JetStream, the
	// message-id (or "tag/N") on RabbitMQ, "topic/partition/offset" on Kafka.
	ID      string
	Body    []byte
	Headers map[string]string
	// Deliveries counts the broker's deliveries of this message, this one
	// included, where the broker says (JetStream, RabbitMQ quorum queues);
	// 1 where it does not.
	Deliveries int
}

// Delivery is one fetched message with its broker's ways to settle it.
// Exactly one of Ack, Retry and Dead is called per delivery.
type Delivery interface {
	Message() Message
	// Ack settles the message for good: never redelivered.
	Ack(ctx context.Context) error
	// Retry gives the message back for redelivery no sooner than delay
	// (JetStream `NakWithDelay`; RabbitMQ reject with requeue once delay has
	// passed; Kafka: fetched again in place).
	Retry(ctx context.Context, delay time.Duration) error
	// Dead settles a message that can never succeed, so that it never loops
	// (JetStream `Term`; RabbitMQ reject without requeue, to the queue's
	// dead-letter exchange when it has one; Kafka: committed past).
	Dead(ctx context.Context, reason error) error
	// InProgress tells the broker the message is still being worked on
	// (JetStream `InProgress`); a no-op where the broker has no such timer.
	InProgress(ctx context.Context) error
}

// ErrSourceClosed is what a Source's Fetch wraps when its subscription is
// gone for good (its connection or channel closed): Consume then returns
// it, so that the service can connect again and start a new consumer.
var ErrSourceClosed = errors.New("the subscription is closed")

// Source is one subscription a consumer fetches from.
type Source interface {
	// Fetch returns up to max deliveries, waiting a bounded time for the
	// first; none (and no error) when nothing came.
	Fetch(ctx context.Context, max int) ([]Delivery, error)
	// Close ends the subscription; deliveries not settled are redelivered
	// by the broker later.
	Close() error
}

// Committer is a Source that settles acknowledgements in batches (Kafka's
// offsets): Commit is called after each batch's deliveries were settled.
type Committer interface {
	Commit(ctx context.Context) error
}

// Publisher publishes one message for an effect whose spec says publish.
type Publisher interface {
	// Publish sends body to destination to (a subject, an exchange's routing
	// key, a topic) with key as the broker's dedupe id (JetStream
	// Nats-Msg-Id; AMQP message-id; Kafka's record key and an
	// idempotency-key header) and returns the broker's acknowledgement as
	// JSON (stream and sequence, offset), kept as the effect's result.
	Publish(ctx context.Context, to, key string, body []byte) ([]byte, error)
}
