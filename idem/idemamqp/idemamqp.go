// Package idemamqp is a placeholder for the RabbitMQ adapter of
// idembroker (helper H1 builds the real one): it has the real one's
// constructors so that generated code compiles against it, and every
// method fails.
package idemamqp

import (
	"context"
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemgen/idemgen/idem/idembroker"
)

var errPlaceholder = errors.New("idemamqp: placeholder, not built yet")

// SourceConfig names the queue and the consumer tag.
type SourceConfig struct {
	Queue       string
	ConsumerTag string
}

// Source consumes a queue.
type Source struct{}

// NewSource starts consuming a queue on conn.
func NewSource(ctx context.Context, conn *amqp.Connection, cfg SourceConfig) (*Source, error) {
	return nil, errPlaceholder
}

// Fetch implements idembroker.Source.
func (s *Source) Fetch(ctx context.Context, max int) ([]idembroker.Delivery, error) {
	return nil, errPlaceholder
}

// Close implements idembroker.Source.
func (s *Source) Close() error { return nil }

// Publisher publishes to an exchange with message-id and confirms.
type Publisher struct{}

// NewPublisher returns a publisher to exchange on conn.
func NewPublisher(ctx context.Context, conn *amqp.Connection, exchange string) (*Publisher, error) {
	return nil, errPlaceholder
}

// Publish implements idembroker.Publisher.
func (p *Publisher) Publish(ctx context.Context, to, key string, body []byte) ([]byte, error) {
	return nil, errPlaceholder
}
