package model

import (
	"fmt"
	"time"

	"github.com/idemgen/idemgen/generator/internal/spec"
)

// Broker is a message broker a job consumes from or an effect publishes to.
type Broker string

const (
	NATS     Broker = "nats"
	RabbitMQ Broker = "rabbitmq"
	Kafka    Broker = "kafka"
)

// Consume is where a handed-in job's units arrive from.
type Consume struct {
	Broker Broker
	From   string // NATS subject, RabbitMQ queue, Kafka topic
	Group  string // NATS durable consumer, RabbitMQ consumer tag, Kafka consumer group
	// Headers are the unit fields read from message headers, in the
	// spec's order; the rest decode from the JSON body.
	Headers []*HeaderField
	Batch   int           // messages per fetch; 0: the runtime's default
	AckWait time.Duration // the broker's redelivery timer as the spec states it; 0: not stated
}

// HeaderField is a unit field read from a message header.
type HeaderField struct {
	Field  *Field
	Header string
}

// Publish is where a publishing effect sends its unit.
type Publish struct {
	Broker Broker
	To     string // NATS subject, RabbitMQ routing key, Kafka topic
}

func resolveConsume(sc *spec.Consume, byName map[string]*Field) (*Consume, error) {
	c := &Consume{Broker: Broker(sc.Broker.Value), From: sc.From.Value, Group: sc.Group.Value, Batch: orInt(sc.Batch, 0), AckWait: sc.AckWait.Value}
	for _, h := range sc.Headers {
		f := byName[h.Field.Value]
		if f == nil {
			return nil, fmt.Errorf("consume headers: %q is not a unit field", h.Field.Value)
		}
		c.Headers = append(c.Headers, &HeaderField{Field: f, Header: h.Header.Value})
	}
	return c, nil
}
