package idemrt_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// The receipt provider of these tests counts its calls and the calls in
// flight at once; answer decides each call's outcome by its number (1..).
type countingReceipts struct {
	calls, inFlight, maxInFlight atomic.Int32
	answer                       func(ctx context.Context, n int32) error
}

func (c *countingReceipts) SendReceipt(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
	n := c.calls.Add(1)
	now := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		old := c.maxInFlight.Load()
		if now <= old || c.maxInFlight.CompareAndSwap(old, now) {
			break
		}
	}
	if err := c.answer(ctx, n); err != nil {
		return nil, err
	}
	return []byte("rcpt-" + p.EventID), nil
}

func effectOf(t *testing.T, rep idem.Report) idem.EffectResult {
	t.Helper()
	if len(rep.Units) != 1 || len(rep.Units[0].Effects) != 1 {
		t.Fatalf("report %s %+v: want one unit with one effect", rep, rep.Units)
	}
	return rep.Units[0].Effects[0]
}

// A provider that says "not now" (HTTP 429 with Retry-After) more times
// than max_attempts: no attempt is counted, no call comes before the time
// it named, however often the payment is redelivered, and the receipt is
// sent once it answers.
func TestRetryAfterWaitsAndBurnsNoAttempt(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		const throttles = 5 // send_receipt has max_attempts: 3
		rc := &countingReceipts{answer: func(_ context.Context, n int32) error {
			if n <= throttles {
				return idem.RetryAfter(2*time.Minute, errors.New("429 Too Many Requests"))
			}
			return nil
		}}
		hook := f.Hook(t, st, rc)
		p := f.Payment("evt_1", 500)
		rep, err := hook.Process(ctx, p)
		if er := effectOf(t, rep); er.Outcome != idem.EffectWaiting || rep.EffectsWaiting != 1 ||
			!errors.Is(err, idem.ErrWaiting) || !errors.Is(err, idem.ErrRetryAfter) {
			t.Fatalf("first delivery: %s %+v, %v; want the receipt waiting, the provider's RetryAfter in err", rep, er, err)
		}
		for i := 0; i < 3; i++ { // redeliveries within the two minutes
			f.Clock.Advance(30 * time.Second)
			rep, err := hook.Process(ctx, p)
			if er := effectOf(t, rep); er.Outcome != idem.EffectWaiting || !errors.Is(err, idem.ErrWaiting) || rc.calls.Load() != 1 {
				t.Fatalf("redelivery %d before the time named: %+v, %v, %d calls; want waiting and no call", i, er, err, rc.calls.Load())
			}
		}
		for want := int32(2); want <= throttles+1; want++ {
			f.Clock.Advance(2*time.Minute + time.Second)
			if _, err := hook.Drain(ctx); err != nil && want > throttles {
				t.Fatalf("drain %d: %v", want, err)
			}
			if got := rc.calls.Load(); got != want {
				t.Fatalf("after drain: %d calls, want %d (one per Retry-After)", got, want)
			}
		}
		entries, err := st.Ledger(ctx)
		if err != nil || len(entries) != 1 || entries[0].State != idem.StateDone || entries[0].Attempts != 1 {
			t.Fatalf("ledger %+v, %v; want done after 1 counted attempt", entries, err)
		}
	})
}

// A provider call past the effect's timeout is cancelled and counts as a
// failed attempt; the effect waits out its backoff (retry), then the same
// key is sent again, and never are two calls of it in flight.
func TestEffectTimeoutRetriesLaterWithTheSameKey(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		var keys sync.Map
		rc := &countingReceipts{answer: func(ctx context.Context, n int32) error {
			if n == 1 {
				<-ctx.Done() // a provider that hangs, but honours its context
				return ctx.Err()
			}
			return nil
		}}
		short := idemtest.WithJobEdit(func(j *idemrt.Job[billing.Payment]) {
			j.Effects[0].Timeout = 50 * time.Millisecond // the spec says 20s; the test does not wait that long
			call := j.Effects[0].Call
			j.Effects[0].Call = func(ctx context.Context, key string, u billing.Payment) ([]byte, error) {
				keys.Store(key, true)
				return call(ctx, key, u)
			}
		})
		hook := f.Hook(t, st, rc, short)
		p := f.Payment("evt_1", 500)
		rep, err := hook.Process(ctx, p)
		if er := effectOf(t, rep); er.Outcome != idem.EffectFailed || !errors.Is(err, idem.ErrCallTimeout) || !errors.Is(err, idem.ErrEffectFailed) {
			t.Fatalf("first delivery: %+v, %v; want failed with ErrCallTimeout", er, err)
		}
		rep, err = hook.Process(ctx, p)
		if er := effectOf(t, rep); er.Outcome != idem.EffectWaiting || !errors.Is(err, idem.ErrWaiting) || rc.calls.Load() != 1 {
			t.Fatalf("redelivery within the backoff: %+v, %v, %d calls; want waiting, no call", er, err, rc.calls.Load())
		}
		f.Clock.Advance(31 * time.Second) // retry.initial is 30s (drawn in 15s..30s)
		rep, err = hook.Process(ctx, p)
		if er := effectOf(t, rep); er.Outcome != idem.EffectDone || err != nil || string(er.Result) != "rcpt-evt_1" {
			t.Fatalf("redelivery after the backoff: %+v, %v; want the receipt sent", er, err)
		}
		n := 0
		keys.Range(func(any, any) bool { n++; return true })
		if rc.calls.Load() != 2 || rc.maxInFlight.Load() != 1 || n != 1 {
			t.Fatalf("%d calls, %d at most in flight, %d keys; want 2 calls, one at a time, one key", rc.calls.Load(), rc.maxInFlight.Load(), n)
		}
		entries, _ := st.Ledger(ctx)
		if len(entries) != 1 || entries[0].Attempts != 2 || entries[0].State != idem.StateDone {
			t.Fatalf("ledger %+v; want done after 2 attempts", entries)
		}
	})
}

// A failed effect is not tried again before its backoff: a Drain right
// after the failure calls nothing, and the row shows when it will be.
func TestFailedEffectBacksOff(t *testing.T) {
	billingtest.EachDB(t, func(t *testing.T, db billingtest.DB) {
		st := db.Store
		ctx := context.Background()
		f := billingtest.NewFixture()
		rc := &countingReceipts{answer: func(_ context.Context, n int32) error {
			if n == 1 {
				return errors.New("503 Service Unavailable")
			}
			return nil
		}}
		hook := f.Hook(t, st, rc)
		failedAt := f.Clock.Now()
		if rep, _ := hook.Process(ctx, f.Payment("evt_1", 500)); rep.EffectsFailed != 1 {
			t.Fatalf("first delivery: %s", rep)
		}
		entries, _ := st.Ledger(ctx)
		if len(entries) != 1 {
			t.Fatalf("ledger %+v", entries)
		}
		next := entries[0].NextAttemptAt
		if next.Before(failedAt.Add(15*time.Second)) || next.After(failedAt.Add(30*time.Second)) {
			t.Fatalf("next attempt at %s, want 15s..30s after %s (retry.initial 30s, jittered)", next, failedAt)
		}
		if rep, err := hook.Drain(ctx); err != nil || rep.EffectsDone != 0 || rc.calls.Load() != 1 {
			t.Fatalf("drain within the backoff: %s, %v, %d calls; want nothing", rep, err, rc.calls.Load())
		}
		f.Clock.Advance(31 * time.Second)
		if rep, err := hook.Drain(ctx); err != nil || rep.EffectsDone != 1 || rc.calls.Load() != 2 {
			t.Fatalf("drain after the backoff: %s, %v, %d calls", rep, err, rc.calls.Load())
		}
	})
}
