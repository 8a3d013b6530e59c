// Hand-written behaviour tests of the generated brokers package (idemgen
// leaves this file alone: it has no generated-code header). They are in
// the package itself, to reach the generated message decoders.
package brokers

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
)

// A message decodes from its JSON body by field name, and the fields the
// spec maps to headers come from the headers, over the body, each
// converted to its field's type; an empty header makes a nullable field null.
func TestDecodeBodyAndHeaders(t *testing.T) {
	trace := uuid.MustParse("33333333-3333-4333-8333-333333333333")
	m := idembroker.Message{
		ID:   "PAYMENTS/7",
		Body: []byte(`{"event_id": "from-the-body", "payment_id": "p-1", "amount_cents": 1250, "captured": true, "fee": 1.5}`),
		Headers: map[string]string{
			"Nats-Msg-Id":  "evt-1",
			"X-Attempt":    "3",
			"X-Settled-At": "2026-03-01T10:00:00+02:00",
			"X-Trace-Id":   trace.String(),
			"X-Fee":        "",
			"X-Unrelated":  "ignored",
		},
	}
	u, err := decodeSettlePayment(m)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 3, 1, 8, 0, 0, 0, time.UTC)
	switch {
	case u.EventID != "evt-1" || u.PaymentID != "p-1" || u.AmountCents != 1250 || !u.Captured:
		t.Errorf("body and string header: %+v", u)
	case u.Attempt == nil || *u.Attempt != 3:
		t.Errorf("attempt %v, want 3", u.Attempt)
	case u.SettledAt == nil || !u.SettledAt.Equal(at):
		t.Errorf("settled_at %v, want %v", u.SettledAt, at)
	case u.TraceID == nil || *u.TraceID != trace:
		t.Errorf("trace_id %v, want %v", u.TraceID, trace)
	case u.Fee != nil:
		t.Errorf("fee %v: an empty X-Fee header is null, over the body's 1.5", *u.Fee)
	}

	// A header wins over the body.
	m.Headers["X-Captured"] = "false"
	if u, err := decodeSettlePayment(m); err != nil || u.Captured {
		t.Errorf("X-Captured: false over the body's true: %+v, %v", u, err)
	}

	// Fields with no header and no body field stay unset; an empty body is
	// no fields at all.
	o, err := decodeOrderEvents(idembroker.Message{Headers: map[string]string{"order-status": "shipped"}})
	if err != nil || o != (OrderEvent{Status: "shipped"}) {
		t.Errorf("headers only: %+v, %v", o, err)
	}
	o, err = decodeOrderEvents(idembroker.Message{Body: []byte(` {"order_id": "o-9", "status": "paid"} `)})
	if err != nil || o.OrderID != "o-9" || o.Status != "paid" {
		t.Errorf("body only: %+v, %v", o, err)
	}
}

// A body or header that does not decode is an error that names what was
// wrong: the header and its field, or the body.
func TestDecodeRefuses(t *testing.T) {
	body := []byte(`{"payment_id": "p-1"}`)
	for _, tc := range []struct {
		name    string
		m       idembroker.Message
		wantErr string
	}{
		{"int32 header", idembroker.Message{Body: body, Headers: map[string]string{"X-Attempt": "three"}},
			`settle_payment: header "X-Attempt" for field attempt: "three" is not an int32`},
		{"int32 overflow", idembroker.Message{Body: body, Headers: map[string]string{"X-Attempt": "4294967296"}},
			`settle_payment: header "X-Attempt" for field attempt: "4294967296" is not an int32`},
		{"time header", idembroker.Message{Body: body, Headers: map[string]string{"X-Settled-At": "yesterday"}},
			`settle_payment: header "X-Settled-At" for field settled_at: "yesterday" is not an RFC 3339 time`},
		{"uuid header", idembroker.Message{Body: body, Headers: map[string]string{"X-Trace-Id": "not-a-uuid"}},
			`settle_payment: header "X-Trace-Id" for field trace_id: "not-a-uuid" is not a UUID`},
		{"bool header", idembroker.Message{Body: body, Headers: map[string]string{"X-Captured": "yes"}},
			`settle_payment: header "X-Captured" for field captured: "yes" is not a bool`},
		{"float header", idembroker.Message{Body: body, Headers: map[string]string{"X-Fee": "1,5"}},
			`settle_payment: header "X-Fee" for field fee: "1,5" is not a float64`},
		{"body", idembroker.Message{Body: []byte(`{"payment_id": 7}`)}, `settle_payment: message body: `},
		{"body not JSON", idembroker.Message{Body: []byte(`payment p-1`)}, `settle_payment: message body: `},
	} {
		_, err := decodeSettlePayment(tc.m)
		if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.wantErr)
		}
	}
}

// publisher records what a publishing effect hands its broker, and acks
// each publish with its sequence number.
type publisher struct {
	mu    sync.Mutex
	calls []published
}

type published struct {
	to, key string
	body    []byte
}

func (p *publisher) Publish(ctx context.Context, to, key string, body []byte) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, published{to, key, bytes.Clone(body)})
	return json.Marshal(map[string]any{"stream": "ORDERS", "seq": len(p.calls)})
}

// A publishing effect sends the unit, canonical, as JSON to its spec's
// destination under the effect key, and keeps the broker's ack as its
// result: a redelivered unit publishes nothing and returns the kept ack.
func TestPublishingEffect(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		var st *Store
		if db.Pool != nil {
			st = NewPostgresStore(db.Pool)
		} else {
			st = NewSQLiteStore(db.SQL)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		pub := &publisher{}
		j, err := NewOrderEvents(st, OrderEventsEffects{AnnounceOrder: pub}, idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		paris := time.FixedZone("CET", 3600)
		u := OrderEvent{OrderID: "o-1", Status: "paid", At: time.Date(2026, 3, 1, 11, 0, 0, 0, paris)}
		rep, err := j.Process(ctx, u)
		if err != nil || rep.EffectsDone != 1 {
			t.Fatalf("first delivery: %s, %v", rep, err)
		}
		want := published{"orders.announced", AnnounceOrderKey(u), []byte(`{"order_id":"o-1","status":"paid","at":"2026-03-01T10:00:00Z"}`)}
		if len(pub.calls) != 1 || pub.calls[0].to != want.to || pub.calls[0].key != want.key || !bytes.Equal(pub.calls[0].body, want.body) {
			t.Fatalf("published %q, want %q", pub.calls, want)
		}
		ack := `{"seq":1,"stream":"ORDERS"}`
		if got := rep.Units[0].Effects[0].Result; string(got) != ack {
			t.Errorf("kept result %s, want the ack %s", got, ack)
		}
		rep, err = j.Process(ctx, u)
		if err != nil || rep.Deduped != 1 || len(pub.calls) != 1 {
			t.Fatalf("redelivery: %s, %v, %d publishes", rep, err, len(pub.calls))
		}
		if got := rep.Units[0].Effects[0].Result; string(got) != ack {
			t.Errorf("redelivery's result %s, want the kept ack %s", got, ack)
		}
	})
}

// NewOrderEvents refuses a missing publisher, as it would a missing provider.
func TestPublisherRequired(t *testing.T) {
	st := NewSQLiteStore(testdb.SQLite(t))
	if _, err := NewOrderEvents(st, OrderEventsEffects{}); err == nil || !strings.Contains(err.Error(), `"announce_order"`) {
		t.Errorf("no publisher: %v", err)
	}
}
