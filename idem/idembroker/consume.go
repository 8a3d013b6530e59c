package idembroker

import (
	"context"
	"errors"
	"log/slog"
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

// Option tunes a consumer at run time.
type Option func(*options)

type options struct {
	log        *slog.Logger
	batch      int
	drainEvery time.Duration
}

// WithLogger sends the consumer's logs to l (default: the job's logger).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithBatch overrides the spec's batch: messages per fetch, one Process call.
func WithBatch(n int) Option { return func(o *options) { o.batch = n } }

// WithDrainEvery sets how often the consumer performs owed effects (its own
// and a dead consumer's, once their lease ran out); default: from the
// effects' leases.
func WithDrainEvery(d time.Duration) Option { return func(o *options) { o.drainEvery = d } }

// Consume runs e as a consumer of src until ctx ends, decoding each message
// with decode. It returns nil when ctx ended and everything fetched was
// settled, or the error that stopped it.
func Consume[U any](ctx context.Context, e *idemrt.Engine[U], src Source, decode func(Message) (U, error), cfg Config, opts ...Option) error {
	return errors.New("idembroker: Consume is not built yet")
}
