// Package idemkafka is a placeholder for the Kafka (franz-go) adapter of
// idembroker (helper H1 builds the real one): it has the real one's
// constructors so that generated code compiles against it, and every
// method fails.
package idemkafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/idem/idembroker"
)

var errPlaceholder = errors.New("idemkafka: placeholder, not built yet")

// SourceConfig names the topic and the consumer group.
type SourceConfig struct {
	Topic string
	Group string
}

// Source consumes a topic in a group.
type Source struct{}

// NewSource joins the group on a new client made with opts.
func NewSource(ctx context.Context, cfg SourceConfig, opts ...kgo.Opt) (*Source, error) {
	return nil, errPlaceholder
}

// Fetch implements idembroker.Source.
func (s *Source) Fetch(ctx context.Context, max int) ([]idembroker.Delivery, error) {
	return nil, errPlaceholder
}

// Close implements idembroker.Source.
func (s *Source) Close() error { return nil }

// Publisher produces records with the key and an idempotency-key header.
type Publisher struct{}

// NewPublisher returns a publisher on client.
func NewPublisher(client *kgo.Client) *Publisher { return &Publisher{} }

// Publish implements idembroker.Publisher.
func (p *Publisher) Publish(ctx context.Context, to, key string, body []byte) ([]byte, error) {
	return nil, errPlaceholder
}
