package spec

import (
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"time"
)

// RabbitMQConsumerTimeout is RabbitMQ's default consumer_timeout: a
// delivery left unacknowledged longer closes its channel, and every
// message unacknowledged on it is redelivered.
const RabbitMQConsumerTimeout = 30 * time.Minute

// brokerNouns say what from, to and group name on each broker.
var brokerNouns = map[string]struct{ from, to, group string }{
	"nats":     {"subject", "subject", "durable consumer"},
	"rabbitmq": {"queue", "routing key", "consumer tag"},
	"kafka":    {"topic", "topic", "consumer group"},
}

// kafkaTopic is Kafka's own rule for topic names.
var kafkaTopic = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

// headerTypes are the field types a header's text converts to.
var headerTypes = []string{"string", "int32", "int64", "float64", "bool", "time", "uuid"}

// consume checks a job's consume: a handed-in job, a known broker, a
// subscription named, header fields that exist and convert from text, and
// a redelivery timer the effects fit in where the spec says what it is.
func (jc *jobCtx) consume() {
	c := jc.j.Consume
	if c == nil {
		return
	}
	if k := jc.j.Source.Kind; k.Set && k.Value != SourceNone {
		jc.errorf(c.Pos, "%sconsume needs source: none (a consumer hands its units in); a %s job fetches its own units", jc.prefix, k.Value)
	}
	broker := jc.broker(c.Broker, c.Pos, "consume")
	nouns, known := brokerNouns[broker]
	if !known {
		nouns = brokerNouns["nats"]
		nouns.from, nouns.group = "subject, queue or topic", "durable consumer, consumer tag or consumer group"
	}
	switch f := c.From; {
	case !f.Set && jc.givenBadly(c.Pos, "from"):
	case !f.Set:
		jc.errorf(c.Pos, "%sconsume: missing from (the %s to consume)", jc.prefix, nouns.from)
	case strings.TrimSpace(f.Value) == "":
		jc.errorf(f.Pos, "%sconsume from is empty; name the %s to consume", jc.prefix, nouns.from)
	case known:
		jc.brokerName(broker, f, "consume from", nouns.from, true)
	}
	switch g := c.Group; {
	case !g.Set && jc.givenBadly(c.Pos, "group"):
	case !g.Set:
		jc.errorf(c.Pos, "%sconsume: missing group (the %s, which keeps the consumer's place across restarts)", jc.prefix, nouns.group)
	case strings.TrimSpace(g.Value) == "":
		jc.errorf(g.Pos, "%sconsume group is empty; name the %s", jc.prefix, nouns.group)
	case broker == "nats" && strings.ContainsAny(g.Value, " \t.*>"):
		jc.errorf(g.Pos, "%sconsume group %q is not a JetStream durable name (no spaces, dots, * or >)", jc.prefix, g.Value)
	}
	jc.headerFields(c)
	if b := c.Batch; b.Set && (b.Value < 1 || b.Value > math.MaxInt32) {
		jc.errorf(b.Pos, "%sconsume batch must be between 1 and %d, not %d", jc.prefix, math.MaxInt32, b.Value)
	}
	jc.redeliveryTimer(c, broker)
}

// broker checks a broker name and returns it, or "" when it is missing or
// unknown (and reported).
func (jc *jobCtx) broker(b String, parent Pos, what string) string {
	switch {
	case !b.Set && jc.givenBadly(parent, "broker"):
	case !b.Set || b.Value == "":
		at := parent
		if b.Set {
			at = b.Pos
		}
		jc.errorf(at, "%s%s: missing broker (one of %s)", jc.prefix, what, strings.Join(Brokers, ", "))
	case !slices.Contains(Brokers, b.Value):
		jc.errorf(b.Pos, "%s%s broker %q is not one of %s%s", jc.prefix, what, b.Value, strings.Join(Brokers, ", "), brokerHint(b.Value))
	default:
		return b.Value
	}
	return ""
}

// brokerHint suggests the broker meant: by its alias, by edit distance,
// or by an alias misspelt (jetstrem is nats).
func brokerHint(b string) string {
	if hint := suggestWith(b, brokerAliases, Brokers); hint != "" {
		return hint
	}
	if a := Suggest(strings.ToLower(b), slices.Sorted(maps.Keys(brokerAliases))); a != "" {
		return fmt.Sprintf(" (did you mean %s?)", brokerAliases[a])
	}
	return ""
}

// brokerName checks a subject, queue, routing key or topic by the broker's
// own rules; a consumer may filter on a NATS wildcard, a publisher may not.
func (jc *jobCtx) brokerName(broker string, s String, what, noun string, consume bool) {
	v := s.Value
	switch {
	case broker == "kafka" && !kafkaTopic.MatchString(v):
		jc.errorf(s.Pos, "%s%s %q is not a Kafka topic (letters, digits, '.', '_' and '-', at most 249)", jc.prefix, what, v)
	case broker == "nats" && (strings.ContainsAny(v, " \t\r\n") || strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") || strings.Contains(v, "..")):
		jc.errorf(s.Pos, "%s%s %q is not a NATS subject (dot-separated tokens, no spaces)", jc.prefix, what, v)
	case broker == "nats" && !consume && strings.ContainsAny(v, "*>"):
		jc.errorf(s.Pos, "%s%s %q is a wildcard; a message is published to one %s", jc.prefix, what, v, noun)
	case broker == "rabbitmq" && len(v) > 255:
		jc.errorf(s.Pos, "%s%s is longer than RabbitMQ's 255 bytes", jc.prefix, what)
	}
}

// headerFields checks consume's headers: each a unit field whose type a
// header's text converts to, read from a header with a usable name.
func (jc *jobCtx) headerFields(c *Consume) {
	for _, h := range c.Headers {
		fld, ok := jc.field(h.Field, "consume headers field")
		if ok && typed(fld) != nil && !slices.Contains(headerTypes, baseType(fld.Type.Value)) {
			jc.errorf(h.Field.Pos, "%sconsume headers: field %s is %s, which a header's text does not carry; it decodes from the JSON body", jc.prefix, h.Field.Value, fld.Type.Value)
		}
		switch name := h.Header.Value; {
		case name == "":
			jc.errorf(h.Header.Pos, "%sconsume headers: field %s is mapped to an empty header name", jc.prefix, h.Field.Value)
		case strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r == ':' || r == 0x7f }):
			jc.errorf(h.Header.Pos, "%sconsume headers: %q is not a header name (no spaces, colons or control characters)", jc.prefix, name)
		}
	}
}

// redeliveryTimer holds the effects' calls to the broker's redelivery
// timer where the spec says what it is: a JetStream consumer's ack_wait,
// RabbitMQ's consumer_timeout (30m unless ack_wait says otherwise). Kafka
// has none: a partition's offset waits for its commit.
func (jc *jobCtx) redeliveryTimer(c *Consume, broker string) {
	switch broker {
	case "kafka":
		if c.AckWait.Set {
			jc.errorf(c.AckWait.Pos, "%sconsume ack_wait: Kafka has no redelivery timer (a partition waits for its offset's commit); ack_wait is for nats (AckWait) and rabbitmq (consumer_timeout)", jc.prefix)
		}
	case "nats":
		if !c.AckWait.Set {
			return
		}
		for i := range jc.j.Effects {
			e := &jc.j.Effects[i]
			if t := e.Timeout; t.Set && t.Value >= c.AckWait.Value {
				jc.warnf(c.AckWait.Pos, "%sconsume ack_wait %s is not longer than effect %q's timeout %s: only the consumer's InProgress keep-alive stops JetStream redelivering a message while its effect runs; set ack_wait above the timeout", jc.prefix, c.AckWait.Text, e.Name.Value, t.Text)
			}
		}
	case "rabbitmq":
		timer, timerText, at := RabbitMQConsumerTimeout, "RabbitMQ's default consumer_timeout, 30m", c.Pos
		if c.AckWait.Set {
			timer, timerText, at = c.AckWait.Value, "ack_wait "+c.AckWait.Text, c.AckWait.Pos
		}
		for i := range jc.j.Effects {
			e := &jc.j.Effects[i]
			lease := DefaultLease
			if e.Lease.Set {
				lease = e.Lease.Value
			}
			if hold := lease + e.Timeout.Value; hold > timer {
				jc.warnf(at, "%sconsume: effect %q's lease and timeout add up to %s, longer than %s: RabbitMQ closes the channel of a delivery unacknowledged that long and redelivers every message on it; raise consumer_timeout (and say so in ack_wait) or shorten the lease", jc.prefix, e.Name.Value, shortDuration(hold), timerText)
			}
		}
	}
}

// publish checks an effect's publish: a known broker, a destination by
// the broker's rules, and no keep_result: false (the broker's
// acknowledgement is the result it keeps).
func (jc *jobCtx) publish(e *Effect, prefix string) {
	pb := e.Publish
	if pb == nil {
		return
	}
	ejc := *jc
	ejc.prefix = prefix
	broker := ejc.broker(pb.Broker, pb.Pos, "publish")
	noun := "subject, routing key or topic"
	if n, ok := brokerNouns[broker]; ok {
		noun = n.to
	}
	switch to := pb.To; {
	case !to.Set && jc.givenBadly(pb.Pos, "to"):
	case !to.Set:
		jc.errorf(pb.Pos, "%spublish: missing to (the %s to publish to)", prefix, noun)
	case strings.TrimSpace(to.Value) == "":
		jc.errorf(to.Pos, "%spublish to is empty; name the %s to publish to", prefix, noun)
	case broker != "":
		ejc.brokerName(broker, to, "publish to", noun, false)
	}
	if k := e.KeepResult; k.Set && !k.Value {
		jc.errorf(k.Pos, "%skeep_result: false, but a publishing effect keeps the broker's acknowledgement as its result; leave keep_result out", prefix)
	}
}

// shortDuration writes d as a spec would: 35m, not 35m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
