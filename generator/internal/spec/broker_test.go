package spec

import (
	"strings"
	"testing"
)

const consumeSpec = `version: 1
package: billing
dialects: [sqlite]
jobs:
  - name: settle
    unit:
      type: Payment
      fields:
        - payment_id: string
        - amount_cents: int64
        - meta: json?
      key: "pay:{payment_id}"
    source:
      SOURCE
    consume: CONSUME
    effects:
      - name: charge
        key: "charge:{payment_id}"
        EFFECT
`

// TestConsumeKey pins what consume accepts and where a bad one is pointed at.
func TestConsumeKey(t *testing.T) {
	const none, ok = "none: {}", "lease: 5m"
	for _, tc := range []struct {
		source, consume, effect, want string
	}{
		{none, "{broker: nats, from: payments.settled, group: ledgerfeed}", ok, ""},
		{none, "{broker: rabbitmq, from: payments, group: ledger, batch: 20}", ok, ""},
		{none, "{broker: kafka, from: payments.v1, group: ledger, headers: {payment_id: Idempotency-Key, amount_cents: X-Amount}}", ok, ""},
		{none, "{broker: nats, from: 'payments.>', group: ledgerfeed, ack_wait: 2m}", "timeout: 30s", ""},
		{"watermark: {field: amount_cents, overlap: 1m}", "{broker: nats, from: p, group: g}", ok,
			`c.yaml:14:26: job "settle": watermark field amount_cents is int64, not time
c.yaml:15:14: job "settle": consume needs source: none (a consumer hands its units in); a watermark job fetches its own units`},
		{"cursor: {}", "{broker: nats, from: p, group: g}", ok, `c.yaml:15:14: job "settle": consume needs source: none (a consumer hands its units in); a cursor job fetches its own units`},
		{none, "{broker: natss, from: p, group: g}", ok, `c.yaml:15:23: job "settle": consume broker "natss" is not one of nats, rabbitmq, kafka (did you mean nats?)`},
		{none, "{broker: jetstream, from: p, group: g}", ok, `c.yaml:15:23: job "settle": consume broker "jetstream" is not one of nats, rabbitmq, kafka (did you mean nats?)`},
		{none, "{from: p, group: g}", ok, `c.yaml:15:14: job "settle": consume: missing broker (one of nats, rabbitmq, kafka)`},
		{none, "{broker: nats, from: '', group: g}", ok, `c.yaml:15:35: job "settle": consume from is empty; name the subject to consume`},
		{none, "{broker: kafka, group: g}", ok, `c.yaml:15:14: job "settle": consume: missing from (the topic to consume)`},
		{none, "{broker: rabbitmq, from: q, group: ''}", ok, `c.yaml:15:49: job "settle": consume group is empty; name the consumer tag`},
		{none, "{broker: kafka, from: q}", ok, `c.yaml:15:14: job "settle": consume: missing group (the consumer group, which keeps the consumer's place across restarts)`},
		{none, "{broker: kafka, from: 'pay ments', group: g}", ok, `c.yaml:15:36: job "settle": consume from "pay ments" is not a Kafka topic (letters, digits, '.', '_' and '-', at most 249)`},
		{none, "{broker: nats, from: p, group: a.b}", ok, `c.yaml:15:45: job "settle": consume group "a.b" is not a JetStream durable name (no spaces, dots, * or >)`},
		{none, "{broker: nats, from: p, group: g, batch: 0}", ok, `c.yaml:15:55: job "settle": consume batch must be between 1 and 2147483647, not 0`},
		{none, "{broker: nats, from: p, group: g, headers: {paymentid: Nats-Msg-Id}}", ok, `c.yaml:15:58: job "settle": consume headers field paymentid is not a unit field (did you mean payment_id?)`},
		{none, "{broker: nats, from: p, group: g, headers: {meta: X-Meta}}", ok, `c.yaml:15:58: job "settle": consume headers: field meta is json?, which a header's text does not carry; it decodes from the JSON body`},
		{none, "{broker: nats, from: p, group: g, headers: {payment_id: 'a b'}}", ok, `c.yaml:15:70: job "settle": consume headers: "a b" is not a header name (no spaces, colons or control characters)`},
		{none, "{broker: nats, from: p, group: g, headers: {payment_id: A, payment_id: B}}", ok, `c.yaml:15:73: consume headers: field payment_id is mapped twice (first at line 15)`},
		{none, "{broker: nats, from: p, grup: g}", ok, `c.yaml:15:38: consume: unknown key "grup" (did you mean group?)`},
		{none, "nats", ok, `c.yaml:15:14: consume must be a mapping such as {broker: nats, from: payments.settled, group: ledgerfeed}, not "nats"`},
		{none, "{broker: nats, from: p, group: g, ack_wait: 30s}", "timeout: 30s", `c.yaml:15:58: warning: job "settle": consume ack_wait 30s is not longer than effect "charge"'s timeout 30s: only the consumer's InProgress keep-alive stops JetStream redelivering a message while its effect runs; set ack_wait above the timeout`},
		{none, "{broker: kafka, from: p, group: g, ack_wait: 30s}", ok, `c.yaml:15:59: job "settle": consume ack_wait: Kafka has no redelivery timer (a partition waits for its offset's commit); ack_wait is for nats (AckWait) and rabbitmq (consumer_timeout)`},
		{none, "{broker: rabbitmq, from: q, group: g}", "lease: 25m\n        timeout: 10m", `c.yaml:15:14: warning: job "settle": consume: effect "charge"'s lease and timeout add up to 35m, longer than RabbitMQ's default consumer_timeout, 30m: RabbitMQ closes the channel of a delivery unacknowledged that long and redelivers every message on it; raise consumer_timeout (and say so in ack_wait) or shorten the lease`},
		{none, "{broker: rabbitmq, from: q, group: g, ack_wait: 2h}", "lease: 25m\n        timeout: 10m", ""},
		{none, "{broker: rabbitmq, from: q, group: g, ack_wait: 10m}", "lease: 9m\n        timeout: 2m", `c.yaml:15:62: warning: job "settle": consume: effect "charge"'s lease and timeout add up to 11m, longer than ack_wait 10m: RabbitMQ closes the channel of a delivery unacknowledged that long and redelivers every message on it; raise consumer_timeout (and say so in ack_wait) or shorten the lease`},
		{none, "{broker: nats, from: p, group: g, max_messages: 5, topic: x}", ok, `c.yaml:15:48: consume: unknown key "max_messages" (did you mean batch?)
c.yaml:15:65: consume: unknown key "topic" (did you mean from?)`},
	} {
		data := strings.NewReplacer("SOURCE", tc.source, "CONSUME", tc.consume, "EFFECT", tc.effect).Replace(consumeSpec)
		got := strings.TrimSpace(string(render(diagnose("c.yaml", []byte(data)))))
		if got != tc.want {
			t.Errorf("consume: %s / %s:\n got %s\nwant %s", tc.consume, tc.effect, got, tc.want)
		}
	}
}

const publishSpec = `version: 1
package: billing
dialects: [sqlite]
jobs:
  - name: invoice_sync
    unit:
      type: Invoice
      fields:
        - invoice_id: string
      key: "inv:{invoice_id}"
    source:
      none: {}
    effects:
      - name: announce
        key: "announce:{invoice_id}"
        publish: PUBLISH
`

// TestPublishKey pins what publish accepts and where a bad one is pointed at.
func TestPublishKey(t *testing.T) {
	for _, tc := range []struct{ publish, want string }{
		{"{broker: nats, to: invoices.new}", ""},
		{"{broker: rabbitmq, to: invoices}", ""},
		{"{broker: kafka, to: invoices.v1}", ""},
		{"{broker: nats, to: invoices.new}\n        keep_result: true", ""},
		{"{broker: kafak, to: invoices}", `p.yaml:16:27: job "invoice_sync": effect "announce": publish broker "kafak" is not one of nats, rabbitmq, kafka (did you mean kafka?)`},
		{"{broker: amqp, to: invoices}", `p.yaml:16:27: job "invoice_sync": effect "announce": publish broker "amqp" is not one of nats, rabbitmq, kafka (did you mean rabbitmq?)`},
		{"{to: invoices}", `p.yaml:16:18: job "invoice_sync": effect "announce": publish: missing broker (one of nats, rabbitmq, kafka)`},
		{"{broker: nats}", `p.yaml:16:18: job "invoice_sync": effect "announce": publish: missing to (the subject to publish to)`},
		{"{broker: nats, to: ''}", `p.yaml:16:37: job "invoice_sync": effect "announce": publish to is empty; name the subject to publish to`},
		{"{broker: nats, to: 'invoices.*'}", `p.yaml:16:37: job "invoice_sync": effect "announce": publish to "invoices.*" is a wildcard; a message is published to one subject`},
		{"{broker: nats, to: x}\n        keep_result: false", `p.yaml:17:22: job "invoice_sync": effect "announce": keep_result: false, but a publishing effect keeps the broker's acknowledgement as its result; leave keep_result out`},
		{"{broker: nats, subject: x}", `p.yaml:16:33: publish: unknown key "subject" (did you mean to?)`},
	} {
		data := strings.Replace(publishSpec, "PUBLISH", tc.publish, 1)
		got := strings.TrimSpace(string(render(diagnose("p.yaml", []byte(data)))))
		if got != tc.want {
			t.Errorf("publish: %s:\n got %s\nwant %s", tc.publish, got, tc.want)
		}
	}
}
