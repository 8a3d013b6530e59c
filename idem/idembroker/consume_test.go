package idembroker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idembroker/brokersim"
	"github.com/idemgen/idemgen/idem/idembroker/brokertest"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

func settled(t *testing.T, b *brokersim.Broker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
}

// Acks lost after the commit, duplicates published, redeliveries out of
// order: every message comes again until acked, and each is deduped, so
// the provider is called once per key.
func TestLostAckRedeliveredDeduped(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		p := brokertest.NewProvider()
		e := brokertest.NewEngine(t, st, p, time.Minute)
		b := brokersim.New(1)
		b.Shuffle(true)
		b.LoseAcks(7)
		var keys []string
		for i := range 20 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: int64(100 + i)}
			b.Publish(brokertest.Body(u), nil)
			if i%4 == 0 {
				b.Publish(brokertest.Body(u), nil) // a duplicate the producer sent
			}
			keys = append(keys, brokertest.ChargeKey(u))
		}
		stop := brokertest.Consuming(t, e, b.Source())
		settled(t, b)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		p.AppliedOnce(t, keys...)
		lost, redelivered := 0, 0
		for _, s := range b.All() {
			if s.State != brokersim.StateAcked || s.Deads+s.Retries != 0 {
				t.Errorf("%s: %+v, want acked only", s.ID, s)
			}
			lost += s.LostAcks
			if s.Deliveries > 1 {
				redelivered++
			}
		}
		if lost != 7 || redelivered < 7 {
			t.Errorf("lost acks %d, redelivered messages %d: want 7 and at least 7", lost, redelivered)
		}
		for _, k := range keys {
			if calls, _ := p.Counts(k); calls != 1 {
				t.Errorf("provider called %d times for %s", calls, k)
			}
		}
		if bl := brokertest.Backlog(t, e); bl != (idemrt.Backlog{}) {
			t.Errorf("backlog %+v, want nothing owed or parked", bl)
		}
	})
}

// Poison never loops: a body that does not decode, an empty key and a
// payload mismatch are each parked once with the raw message and settled
// dead on their first delivery. A redelivery of a dead message (its Dead
// lost) is not parked twice. A person's retry of such a row is parked
// again by the next drain, with an error that says why.
func TestPoisonParkedOnce(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		p := brokertest.NewProvider()
		e := brokertest.NewEngine(t, st, p, time.Minute)
		b := brokersim.New(2)
		good := b.Publish(brokertest.Body(brokertest.Order{ID: "a", Amount: 5}), nil)
		notJSON := b.Publish([]byte("not json {"), map[string]string{"Nats-Msg-Id": "x1"})
		emptyKey := b.Publish(brokertest.Body(brokertest.Order{ID: "", Amount: 1}), nil)
		stop := brokertest.Consuming(t, e, b.Source())
		settled(t, b)
		mismatch := b.Publish(brokertest.Body(brokertest.Order{ID: "a", Amount: 6}), nil) // after "a" was written
		settled(t, b)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if s := b.Stats(good); s.State != brokersim.StateAcked {
			t.Errorf("good message: %+v", s)
		}
		for id, want := range map[string]string{notJSON: "invalid character", emptyKey: "key placeholder is empty", mismatch: "same key, different payload"} {
			s := b.Stats(id)
			if s.State != brokersim.StateDead || s.Deliveries != 1 || s.Deads != 1 || s.Acks+s.Retries != 0 {
				t.Errorf("%s: %+v, want dead on its first delivery", id, s)
			}
			row, ok := brokertest.Parked(t, st)["message:"+id]
			switch {
			case !ok:
				t.Errorf("%s: not in the parked table", id)
			case row.State != idem.UnitStateParked || row.Attempts != 1 || !strings.Contains(row.LastError, want):
				t.Errorf("%s: parked row %+v, want parked once with %q", id, row, want)
			}
		}
		if row := brokertest.Parked(t, st)["message:"+notJSON]; string(row.Payload) != `{"broker_message":{"id":"sim/2","text":"not json {","headers":{"Nats-Msg-Id":"x1"}}}` {
			t.Errorf("parked payload %s", row.Payload)
		}
		if row := brokertest.Parked(t, st)["message:"+mismatch]; !strings.Contains(string(row.Payload), `"body":{"id":"a","amount":6}`) {
			t.Errorf("parked mismatch payload %s", row.Payload)
		}
		p.AppliedOnce(t, "charge:a")

		// The same message parked again (its Dead was lost): one row, one attempt.
		raw := idemrt.RawMessage{ID: notJSON, Body: []byte("not json {"), Headers: map[string]string{"Nats-Msg-Id": "x1"}}
		if err := e.ParkMessage(context.Background(), "message:"+notJSON, raw, errors.New("again")); err != nil {
			t.Fatal(err)
		}
		if row := brokertest.Parked(t, st)["message:"+notJSON]; row.Attempts != 1 || strings.Contains(row.LastError, "again") {
			t.Errorf("parked twice: %+v", row)
		}

		// A person puts the rows back; the drain cannot write a message
		// as a unit, and parks each again with a clear error, once.
		ctx := context.Background()
		now, err := idemrt.StoreNow(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{notJSON, emptyKey, mismatch} {
			if _, err := idemrt.Retry(ctx, st, brokertest.JobName, "message:"+id, now); err != nil {
				t.Fatal(err)
			}
		}
		if row := brokertest.Parked(t, st)["message:"+notJSON]; row.State != idem.UnitStateRetry {
			t.Fatalf("after retry: %+v", row)
		}
		if _, err := e.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{notJSON, emptyKey, mismatch} {
			row := brokertest.Parked(t, st)["message:"+id]
			if row.State != idem.UnitStateParked || row.Attempts != 1 || !strings.Contains(row.LastError, "is not a unit") {
				t.Errorf("%s after retry and drain: %+v", id, row)
			}
		}
		if _, err := e.Drain(ctx); err != nil { // nothing left to retry: no loop
			t.Fatal(err)
		}
		// What the docs tell a person to do: forget the row (ledger reset).
		if _, err := idemrt.Forget(ctx, st, brokertest.JobName, "message:"+notJSON, now, false); err != nil {
			t.Fatal(err)
		}
		if _, ok := brokertest.Parked(t, st)["message:"+notJSON]; ok {
			t.Errorf("forgotten parked message still there")
		}
		if calls, _ := p.Counts("charge:"); calls != 0 {
			t.Errorf("a message was written as a unit of zero values: %d calls", calls)
		}
	})
}

// A unit whose write fails goes back to the broker after a backoff; after
// max_attempts (3) the engine parks it with its payload and the message
// is settled dead, never delivered again. The other units of its batches
// are written.
func TestWriteFailureRetriedThenParked(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		p := brokertest.NewProvider()
		e := brokertest.NewEngine(t, st, p, time.Minute)
		b := brokersim.New(3)
		b.DelayScale = 1
		broken := b.Publish(brokertest.Body(brokertest.Order{ID: "b", Amount: 1, Broken: true}), nil)
		fine := b.Publish(brokertest.Body(brokertest.Order{ID: "c", Amount: 2}), nil)
		stop := brokertest.Consuming(t, e, b.Source())
		settled(t, b)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if s := b.Stats(broken); s.State != brokersim.StateDead || s.Deliveries != 3 || s.Retries != 2 || s.Deads != 1 {
			t.Errorf("broken message: %+v, want 3 deliveries, 2 retries, then dead", s)
		}
		if s := b.Stats(fine); s.State != brokersim.StateAcked || s.Deliveries != 1 {
			t.Errorf("fine message: %+v", s)
		}
		rows := brokertest.Parked(t, st)
		row, ok := rows["order:b"]
		if !ok || row.State != idem.UnitStateParked || row.Attempts != 3 || !strings.Contains(row.LastError, brokertest.ErrBroken.Error()) {
			t.Errorf("parked unit %+v (found %v), want parked after 3 attempts", row, ok)
		}
		if _, ok := rows["message:"+broken]; ok || len(rows) != 1 {
			t.Errorf("parked rows %v, want the unit's only (not parked twice)", rows)
		}
		p.AppliedOnce(t, "charge:c")
	})
}

// A consumer killed while its charge is in flight: the broker redelivers
// the message to the next consumer, which finds the unit written and the
// charge held under the dead consumer's lease (owed: acknowledged), and
// its own drain performs the charge once the lease ran out, with the same
// key. The dead consumer's call never returned applied; nothing else is
// called twice.
func TestKilledConsumerOwedEffectDrainedByNext(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		const lease = 2 * time.Second
		dead := brokertest.NewProvider()
		inFlight := make(chan struct{})
		release := make(chan struct{})
		dead.Hold = func(ctx context.Context, key string) error {
			if key == "charge:slow" {
				close(inFlight)
				<-release // the process is gone: this call never returns applied
				return errors.New("killed")
			}
			return nil
		}
		first := brokertest.NewEngine(t, st, dead, lease)
		b := brokersim.New(4)
		slow := b.Publish(brokertest.Body(brokertest.Order{ID: "slow", Amount: 7}), nil)
		src1 := b.Source()
		// A killed process drains nothing more: the first consumer's drain never comes round.
		brokertest.Consuming(t, first, src1, idembroker.WithStopGrace(time.Hour), idembroker.WithDrainEvery(time.Hour))
		t.Cleanup(func() { close(release) }) // before the consumer's stop: cleanups run last first
		select {
		case <-inFlight:
		case <-time.After(30 * time.Second):
			t.Fatal("the first consumer never called the provider")
		}
		src1.Kill()
		killedAt := time.Now()

		next := brokertest.NewProvider()
		second := brokertest.NewEngine(t, st, next, lease)
		stop := brokertest.Consuming(t, second, b.Source())
		settled(t, b)
		if s := b.Stats(slow); s.State != brokersim.StateAcked || s.Deliveries != 2 {
			t.Errorf("message %+v, want acked on its second delivery", s)
		}
		brokertest.Within(t, 20*time.Second, "the second consumer's drain takes the charge over", func() bool {
			_, applied := next.Counts("charge:slow")
			return applied > 0
		})
		if took := time.Since(killedAt); took < lease-100*time.Millisecond {
			t.Errorf("the charge was taken over %s after the kill, inside its %s lease", took, lease)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		next.AppliedOnce(t, "charge:slow")
		if _, applied := dead.Counts("charge:slow"); applied != 0 {
			t.Errorf("the killed consumer's call applied")
		}
		if bl := brokertest.Backlog(t, second); bl.OwedEffects != 0 {
			t.Errorf("backlog %+v, want nothing owed", bl)
		}
	})
}

// On a graceful stop the consumer finishes the batch in hand (its
// effects included), settles it, closes its subscription and returns nil;
// what it had not fetched stays queued for the next.
func TestGracefulStop(t *testing.T) {
	brokertest.Stores(t, func(t *testing.T, st idemrt.Store) {
		p := brokertest.NewProvider()
		var started atomic.Int32
		inFlight := make(chan struct{})
		p.Hold = func(ctx context.Context, key string) error {
			if started.Add(1) == 1 {
				close(inFlight)
			}
			time.Sleep(50 * time.Millisecond)
			return ctx.Err()
		}
		e := brokertest.NewEngine(t, st, p, time.Minute)
		b := brokersim.New(5)
		var keys []string
		for i := range 30 {
			u := brokertest.Order{ID: fmt.Sprint(i), Amount: 1}
			b.Publish(brokertest.Body(u), nil)
			keys = append(keys, brokertest.ChargeKey(u))
		}
		stop := brokertest.Consuming(t, e, b.Source())
		<-inFlight
		if err := stop(); err != nil {
			t.Fatalf("Consume: %v", err)
		}
		acked, queued := 0, 0
		for _, s := range b.All() {
			switch s.State {
			case brokersim.StateAcked:
				acked++
				if s.Deliveries != 1 {
					t.Errorf("%+v", s)
				}
			case brokersim.StateQueued:
				queued++
				if s.Deliveries != 0 {
					t.Errorf("fetched and given back: %+v", s)
				}
			default:
				t.Errorf("left %+v", s)
			}
		}
		if acked == 0 || acked > 8 || acked+queued != 30 {
			t.Errorf("acked %d, queued %d: want the batch in hand (at most 8) acked, the rest queued", acked, queued)
		}
		applied := 0
		for _, k := range keys {
			_, n := p.Counts(k)
			applied += n
		}
		if applied != acked {
			t.Errorf("%d charges applied for %d acked messages", applied, acked)
		}
		// The next consumer takes the rest.
		stop = brokertest.Consuming(t, e, b.Source())
		settled(t, b)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		p.AppliedOnce(t, keys...)
	})
}

// A charge longer than the broker's ack wait: kept alive, its message is
// not redelivered to the other consumer meanwhile. Without keep-alive
// (the control) the other consumer gets it while the charge is in flight,
// finds the unit written and the charge leased (owed), and acks it: still
// one call, the ledger's doing.
func TestKeepAliveWhileEffectRuns(t *testing.T) {
	for _, tc := range []struct {
		name       string
		keepAlive  time.Duration
		deliveries int
	}{{"kept alive", 50 * time.Millisecond, 1}, {"control: not kept alive", time.Hour, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			st := brokertest.OpenSQLite(t)
			p := brokertest.NewProvider()
			p.Hold = func(ctx context.Context, key string) error {
				time.Sleep(1200 * time.Millisecond)
				return nil
			}
			b := brokersim.New(6)
			b.AckWait = 300 * time.Millisecond
			id := b.Publish(brokertest.Body(brokertest.Order{ID: "long", Amount: 3}), nil)
			one := brokertest.NewEngine(t, st, p, time.Minute)
			stop1 := brokertest.Consuming(t, one, b.Source(), idembroker.WithKeepAlive(tc.keepAlive))
			brokertest.Within(t, 10*time.Second, "the charge started", func() bool {
				calls, _ := p.Counts("charge:long")
				return calls == 1
			})
			other := brokertest.NewEngine(t, st, p, time.Minute)
			stop2 := brokertest.Consuming(t, other, b.Source(), idembroker.WithKeepAlive(tc.keepAlive))
			settled(t, b)
			brokertest.Within(t, 10*time.Second, "the charge applied", func() bool {
				_, applied := p.Counts("charge:long")
				return applied == 1
			})
			for _, stop := range []func() error{stop1, stop2} {
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			}
			s := b.Stats(id)
			if s.State != brokersim.StateAcked || s.Deliveries != tc.deliveries {
				t.Errorf("message %+v, want acked after %d deliveries", s, tc.deliveries)
			}
			if tc.deliveries == 1 && s.Progress == 0 {
				t.Errorf("never kept alive: %+v", s)
			}
			if calls, _ := p.Counts("charge:long"); calls != 1 {
				t.Errorf("provider called %d times", calls)
			}
		})
	}
}

// A Process call that fails as a whole (here its start fails, as with the
// database unreachable): every message of the batch is given back, none
// is acked or parked, and once the database is back each is applied once.
func TestBatchFailedAsAWhole(t *testing.T) {
	st := brokertest.OpenSQLite(t)
	p := brokertest.NewProvider()
	var down atomic.Bool
	down.Store(true)
	hook := func(ctx context.Context, at idemtest.CrashPoint, detail string) error {
		if at == idemtest.PointRunStart && down.Load() {
			return errors.New("dial tcp 127.0.0.1:5432: connection refused")
		}
		return nil
	}
	e := brokertest.NewEngine(t, st, p, time.Minute, idemtest.WithCrashHook(hook))
	b := brokersim.New(7)
	var ids, keys []string
	for i := range 3 {
		u := brokertest.Order{ID: fmt.Sprint(i), Amount: 1}
		ids = append(ids, b.Publish(brokertest.Body(u), nil))
		keys = append(keys, brokertest.ChargeKey(u))
	}
	stop := brokertest.Consuming(t, e, b.Source())
	brokertest.Within(t, 10*time.Second, "every message given back twice", func() bool {
		for _, id := range ids {
			if b.Stats(id).Retries < 2 {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if s := b.Stats(id); s.Acks+s.Deads != 0 {
			t.Errorf("settled while the database was down: %+v", s)
		}
	}
	if rows := brokertest.Parked(t, st); len(rows) != 0 {
		t.Errorf("parked while the database was down: %v", rows)
	}
	down.Store(false)
	settled(t, b)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	p.AppliedOnce(t, keys...)
}

// A subscription gone for good (a closed connection) ends Consume with an
// error wrapping ErrSourceClosed, so the service can connect again.
func TestSourceClosedEndsConsume(t *testing.T) {
	st := brokertest.OpenSQLite(t)
	e := brokertest.NewEngine(t, st, brokertest.NewProvider(), time.Minute)
	b := brokersim.New(8)
	src := b.Source()
	done := make(chan error, 1)
	go func() {
		done <- idembroker.Consume(context.Background(), e, src, brokertest.DecodeOrder, idembroker.Config{Job: brokertest.JobName},
			idembroker.WithLogger(brokertest.Logger()))
	}()
	time.Sleep(50 * time.Millisecond)
	src.Kill()
	select {
	case err := <-done:
		if !errors.Is(err, idembroker.ErrSourceClosed) {
			t.Errorf("Consume returned %v, want ErrSourceClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Consume went on after its subscription closed")
	}
}

// A decoder that panics on a body parks that message; the consumer goes on.
func TestDecoderPanicParks(t *testing.T) {
	st := brokertest.OpenSQLite(t)
	p := brokertest.NewProvider()
	e := brokertest.NewEngine(t, st, p, time.Minute)
	b := brokersim.New(9)
	bad := b.Publish([]byte("boom"), nil)
	b.Publish(brokertest.Body(brokertest.Order{ID: "ok", Amount: 1}), nil)
	decode := func(m idembroker.Message) (brokertest.Order, error) {
		if string(m.Body) == "boom" {
			panic("index out of range")
		}
		return brokertest.DecodeOrder(m)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		done <- idembroker.Consume(ctx, e, b.Source(), decode, idembroker.Config{Job: brokertest.JobName}, idembroker.WithLogger(brokertest.Logger()))
	}()
	settled(t, b)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(bad); s.State != brokersim.StateDead {
		t.Errorf("%+v", s)
	}
	if row := brokertest.Parked(t, st)["message:"+bad]; !strings.Contains(row.LastError, "the decoder panicked: index out of range") {
		t.Errorf("parked %+v", row)
	}
	p.AppliedOnce(t, "charge:ok")
}
