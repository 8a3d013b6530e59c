package spec

import (
	"go.yaml.in/yaml/v3"
)

// Brokers a job may consume from and an effect may publish to.
var Brokers = []string{"nats", "rabbitmq", "kafka"}

// brokerAliases are the names people reach for, for the suggestions edit
// distance cannot make.
var brokerAliases = map[string]string{
	"jetstream": "nats", "nats_jetstream": "nats", "nats-jetstream": "nats",
	"amqp": "rabbitmq", "rabbit": "rabbitmq", "rabbit_mq": "rabbitmq", "amqp091": "rabbitmq",
	"redpanda": "kafka", "franz": "kafka", "franz-go": "kafka",
}

// Consume says where a handed-in job's units arrive from: a broker's
// subscription the generated consumer reads until its context ends.
type Consume struct {
	Pos    Pos
	Broker String
	// From is the NATS subject, the RabbitMQ queue or the Kafka topic.
	From String
	// Group is the NATS durable consumer, the RabbitMQ consumer tag or the
	// Kafka consumer group.
	Group String
	// Headers maps unit fields to the message headers they are read from;
	// the other fields decode from the JSON body by name.
	Headers    []HeaderField
	HeadersPos Pos // zero when headers was not given
	// Batch is how many messages one fetch takes (one Process call).
	Batch Int
	// AckWait is the broker's redelivery timer as the service configures
	// it (the JetStream consumer's AckWait, RabbitMQ's consumer_timeout),
	// for vet to hold the effects' lease and timeout to.
	AckWait Duration
}

// HeaderField is one unit field read from a message header.
type HeaderField struct {
	Field  String
	Header String
}

// Publish makes an effect publish its unit to a broker instead of calling
// code the service writes.
type Publish struct {
	Pos    Pos
	Broker String
	// To is the NATS subject, the RabbitMQ routing key or the Kafka topic.
	To String
}

// consume reads a job's consume: {broker, from, group, headers, batch, ack_wait}.
func (p *parser) consume(n *yaml.Node) *Consume {
	c := &Consume{Pos: pos(n)}
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "consume must be a mapping such as {broker: nats, from: payments.settled, group: ledgerfeed}, not %s", kindName(n))
		return c
	}
	p.fields(n, "consume", map[string]func(*yaml.Node){
		"broker": func(v *yaml.Node) { p.str(v, "consume broker", &c.Broker) },
		"from":   func(v *yaml.Node) { p.str(v, "consume from", &c.From) },
		"group":  func(v *yaml.Node) { p.str(v, "consume group", &c.Group) },
		"headers": func(v *yaml.Node) {
			c.HeadersPos = pos(v)
			c.Headers = p.headers(v)
		},
		"batch":    func(v *yaml.Node) { p.integer(v, "consume batch", &c.Batch) },
		"ack_wait": func(v *yaml.Node) { p.duration(v, "consume ack_wait", &c.AckWait) },
	})
	return c
}

// headers reads consume's headers: a mapping of unit fields to header names.
func (p *parser) headers(n *yaml.Node) []HeaderField {
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "consume headers must be a mapping of unit fields to header names such as {event_id: Nats-Msg-Id}, not %s", kindName(n))
		return nil
	}
	var out []HeaderField
	seen := firstSeen{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		var h HeaderField
		p.str(n.Content[i], "consume headers field", &h.Field)
		p.str(n.Content[i+1], "consume headers header", &h.Header)
		if !h.Field.Set || !h.Header.Set {
			continue
		}
		if first, dup := seen.repeat(h.Field.Value, h.Field.Pos); dup {
			p.errorf(h.Field.Pos, "consume headers: field %s is mapped twice (first at line %d)", h.Field.Value, first.Line)
			continue
		}
		out = append(out, h)
	}
	return out
}

// publish reads an effect's publish: {broker, to}.
func (p *parser) publish(n *yaml.Node) *Publish {
	pb := &Publish{Pos: pos(n)}
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "publish must be a mapping such as {broker: nats, to: invoices.new}, not %s", kindName(n))
		return pb
	}
	p.fields(n, "publish", map[string]func(*yaml.Node){
		"broker": func(v *yaml.Node) { p.str(v, "publish broker", &pb.Broker) },
		"to":     func(v *yaml.Node) { p.str(v, "publish to", &pb.To) },
	})
	return pb
}
