// Package idemnats is a placeholder for the JetStream adapter of
// idembroker (helper H1 builds the real one): it has the real one's
// constructors so that generated code compiles against it, and every
// method fails.
package idemnats

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemgen/idemgen/idem/idembroker"
)

var errPlaceholder = errors.New("idemnats: placeholder, not built yet")

// SourceConfig names the stream subject and the durable consumer.
type SourceConfig struct {
	Subject string
	Durable string
}

// Source fetches from a durable JetStream consumer.
type Source struct{}

// NewSource binds a durable consumer on js.
func NewSource(ctx context.Context, js jetstream.JetStream, cfg SourceConfig) (*Source, error) {
	return nil, errPlaceholder
}

// Fetch implements idembroker.Source.
func (s *Source) Fetch(ctx context.Context, max int) ([]idembroker.Delivery, error) {
	return nil, errPlaceholder
}

// Close implements idembroker.Source.
func (s *Source) Close() error { return nil }

// Publisher publishes to JetStream with Nats-Msg-Id.
type Publisher struct{}

// NewPublisher returns a publisher on js.
func NewPublisher(js jetstream.JetStream) *Publisher { return &Publisher{} }

// Publish implements idembroker.Publisher.
func (p *Publisher) Publish(ctx context.Context, to, key string, body []byte) ([]byte, error) {
	return nil, errPlaceholder
}
