// Hand-written behaviour tests of the generated none_nodest package (idemgen
// leaves this file alone: it has no generated-code header).
package none_nodest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/none_nodest"
)

func open(t *testing.T, db testdb.DB) *none_nodest.Store {
	t.Helper()
	var st *none_nodest.Store
	if db.Pool != nil {
		st = none_nodest.NewPostgresStore(db.Pool)
	} else {
		st = none_nodest.NewSQLiteStore(db.SQL)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

type acker struct {
	calls   testdb.Calls
	failing bool
}

func (a *acker) MessageAckEffect(ctx context.Context, key string, m none_nodest.MessageAck) error {
	a.calls.Add(key)
	if a.failing {
		return errors.New("ack refused")
	}
	return nil
}

var (
	m1 = none_nodest.MessageAck{MessageID: uuid.MustParse("11111111-1111-4111-8111-111111111111"), Body: json.RawMessage(`{"n":1}`)}
	m2 = none_nodest.MessageAck{MessageID: uuid.MustParse("22222222-2222-4222-8222-222222222222"), Body: json.RawMessage(`[1,2]`)}
)

// With no destination, when: always decides the effect once per key: a
// redelivery is deduped, a changed payload under the same key is a mismatch.
func TestAlwaysEffectOncePerKey(t *testing.T) {
	if got := none_nodest.MessageAckEffectKey(m1); got != "ack:v1:11111111-1111-4111-8111-111111111111" {
		t.Fatalf("ack key %q", got)
	}
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		clk := testdb.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		a := &acker{}
		j, err := none_nodest.NewMessageAckJob(st, none_nodest.MessageAckJobEffects{MessageAckEffect: a}, idem.WithClock(clk.Now), idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := j.Process(ctx, m1, m2)
		if err != nil || rep.Accepted != 2 || rep.EffectsDone != 2 {
			t.Fatalf("first delivery: %s, %v", rep, err)
		}
		// The same body with other whitespace is the same payload.
		again := m1
		again.Body = json.RawMessage(`{ "n" : 1 }`)
		rep, err = j.Process(ctx, again, m2)
		if err != nil || rep.Deduped != 2 || rep.EffectsDone != 0 || rep.EffectsDeduped != 2 {
			t.Fatalf("redelivery: %s, %v", rep, err)
		}
		changed := m1
		changed.Body = json.RawMessage(`{"n":2}`)
		rep, err = j.Process(ctx, changed)
		if !errors.Is(err, idem.ErrPayloadMismatch) || rep.Mismatched != 1 || !errors.Is(rep.Units[0].Err, idem.ErrPayloadMismatch) || rep.EffectsDone+rep.EffectsDeduped != 0 {
			t.Fatalf("changed payload: %s, %+v", rep, rep.Units)
		}
		if a.calls.Total() != 2 || a.calls.Keys() != 2 {
			t.Fatalf("provider calls %d over %d keys, want 2 over 2", a.calls.Total(), a.calls.Keys())
		}
		// Retention (24h) purges done ledger rows once they are old enough,
		// and with them the handed-in key records: 2 of each.
		if n, err := j.Purge(ctx); err != nil || n != 0 {
			t.Fatalf("early purge: %d, %v", n, err)
		}
		clk.Advance(25 * time.Hour)
		if n, err := j.Purge(ctx); err != nil || n != 4 {
			t.Fatalf("purge after retention: %d, %v; want 2 ledger rows and 2 key records", n, err)
		}
		// Forgotten: the changed payload is no mismatch now, and is new.
		rep, err = j.Process(ctx, changed)
		if err != nil || rep.Mismatched != 0 || rep.EffectsDone != 1 {
			t.Fatalf("after retention: %s, %v; want the key processed as new", rep, err)
		}
	})
}

// A failed effect is owed: Drain performs it later, once.
func TestFailedEffectIsDrained(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		a := &acker{failing: true}
		clk := testdb.NewClock(time.Now())
		j, err := none_nodest.NewMessageAckJob(st, none_nodest.MessageAckJobEffects{MessageAckEffect: a}, idem.WithLogger(testdb.Quiet), idemtest.WithLeaseClock(clk.Now))
		if err != nil {
			t.Fatal(err)
		}
		if rep, _ := j.Process(ctx, m1); rep.Accepted != 1 || rep.EffectsFailed != 1 {
			t.Fatalf("failing provider: %s", rep)
		}
		a.failing = false
		clk.Advance(time.Hour) // past the retry backoff
		if rep, err := j.Drain(ctx); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("drain: %s, %v", rep, err)
		}
		if rep, err := j.Drain(ctx); err != nil || rep.EffectsDone != 0 {
			t.Fatalf("second drain: %s, %v", rep, err)
		}
		if got := a.calls.Of(none_nodest.MessageAckEffectKey(m1)); got != 2 {
			t.Fatalf("provider calls %d, want 2 (one failed, one done)", got)
		}
	})
}
