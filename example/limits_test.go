package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// A receipt provider that keeps when each call started and how many were
// in flight at once; each call takes hold.
type pacedReceipts struct {
	hold     time.Duration
	inFlight atomic.Int32
	mu       sync.Mutex
	starts   []time.Time
	maxIn    int32
	calls    map[string]int
}

func (p *pacedReceipts) SendReceipt(ctx context.Context, key string, pay billing.Payment) ([]byte, error) {
	now := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	p.mu.Lock()
	p.starts = append(p.starts, time.Now())
	p.maxIn = max(p.maxIn, now)
	if p.calls == nil {
		p.calls = map[string]int{}
	}
	p.calls[key]++
	p.mu.Unlock()
	time.Sleep(p.hold)
	return []byte("rcpt-" + pay.EventID), nil
}

// limitedWorkers runs two workers (two engines, each 8 calls at a time of
// its own) over one database, each processing its half of n payments at
// once, with send_receipt limited by edit.
func limitedWorkers(t *testing.T, st *billing.Store, p *pacedReceipts, n int, edit func(*idemrt.Effect[billing.Payment])) time.Duration {
	t.Helper()
	f := newFixture()
	var workers [2]*billing.PaymentWebhook
	for w := range workers {
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: p},
			idem.WithLogger(quiet), idem.WithEffectConcurrency(8), idem.WithOwner(fmt.Sprintf("worker-%d", w)),
			idemtest.WithJobEdit(func(j *idemrt.Job[billing.Payment]) { edit(&j.Effects[0]) }))
		if err != nil {
			t.Fatal(err)
		}
		workers[w] = hook
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w, hook := range workers {
		var mine []billing.Payment
		for i := w; i < n; i += 2 {
			mine = append(mine, payment(f, fmt.Sprintf("evt_%03d", i), 100))
		}
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if rep, err := hook.Process(ctx, mine...); err != nil || rep.EffectsDone != len(mine) {
				t.Errorf("worker %d: %s, %v", w, rep, err)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	for k, c := range p.calls {
		if c != 1 {
			t.Errorf("receipt %s sent %d times", k, c)
		}
	}
	if len(p.calls) != n {
		t.Errorf("%d receipts sent, want %d", len(p.calls), n)
	}
	return took
}

// concurrency: 2 holds across two workers that would each make 8 calls at
// once, and both slots are used.
func TestConcurrencyHoldsAcrossWorkers(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		p := &pacedReceipts{hold: 40 * time.Millisecond}
		limitedWorkers(t, st, p, 24, func(fx *idemrt.Effect[billing.Payment]) { fx.Concurrency = 2 })
		if p.maxIn != 2 {
			t.Fatalf("%d calls in flight at once; want 2, the effect's concurrency across both workers", p.maxIn)
		}
	})
}

// rate: 20/s holds across two workers: call starts are spaced 50ms apart
// fleet-wide, so no 200ms holds more than 4 of them (two more for starts
// the scheduler delayed into later ones' time: the full suite on two cores
// delayed two at once), and 16 calls start over at least 14 spacings (the
// first start may be late). This is the rate on real clocks; the crash
// simulation's rate family proves the pacing row's compare-and-set
// deterministically, two workers racing for one start by design.
func TestRateHoldsAcrossWorkers(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		p := &pacedReceipts{}
		limitedWorkers(t, st, p, 16, func(fx *idemrt.Effect[billing.Payment]) { fx.Rate = idemrt.Rate{N: 20, Per: time.Second} })
		slices.SortFunc(p.starts, func(a, b time.Time) int { return a.Compare(b) })
		const spacing, window, slack = 50 * time.Millisecond, 200 * time.Millisecond, 5 * time.Millisecond
		for i := range p.starts {
			in := 0
			for _, s := range p.starts[i:] {
				if s.Sub(p.starts[i]) < window-slack {
					in++
				}
			}
			if in > 6 {
				t.Errorf("%d calls started within %s of call %d; the rate allows 4 (6 with delayed starts)", in, window, i)
			}
		}
		// 16 starts are 15 spacings apart; a late first start or a loaded
		// machine takes up to a spacing and a half off what the test sees.
		if span, min := p.starts[len(p.starts)-1].Sub(p.starts[0]), 14*spacing-spacing/2; span < min {
			t.Fatalf("16 calls at 20/s started within %s; at least %s", span, min)
		}
	})
}

// A call that finds no slot in the first half of its lease gives its claim
// back, uncounted: the effect waits (ErrWaiting) and a later call performs
// it. Here one worker's two calls meet concurrency 1, and the first holds
// its slot past the second's half lease.
func TestNoRoomWithinTheLeaseWaitsUncounted(t *testing.T) {
	eachDB(t, func(t *testing.T, st *billing.Store) {
		ctx := context.Background()
		p := &pacedReceipts{hold: 300 * time.Millisecond}
		hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: p},
			idem.WithLogger(quiet), idem.WithEffectConcurrency(2),
			idemtest.WithJobEdit(func(j *idemrt.Job[billing.Payment]) {
				j.Effects[0].Concurrency, j.Effects[0].Lease = 1, 400*time.Millisecond
			}))
		if err != nil {
			t.Fatal(err)
		}
		f := newFixture()
		rep, err := hook.Process(ctx, payment(f, "evt_1", 100), payment(f, "evt_2", 100))
		if rep.EffectsDone != 1 || rep.EffectsWaiting != 1 || !errors.Is(err, idem.ErrWaiting) {
			t.Fatalf("Process: %s, %v; want one receipt sent and one waiting for room", rep, err)
		}
		entries, err := st.Ledger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.State == idem.StatePending && (e.Attempts != 0 || e.NextAttemptAt.IsZero()) {
				t.Fatalf("the waiting row %+v: want no attempt counted and a next attempt time", e)
			}
		}
		if len(p.calls) != 1 {
			t.Fatalf("%d calls; want 1", len(p.calls))
		}
	})
}
