package idemrt_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
)

// skewed is a worker's wall clock, off by skew.
func skewed(skew time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(skew) }
}

// Leases run on the database's clock: a worker whose own clock is minutes
// off, behind or ahead, neither takes over a live lease nor has its own
// taken over. Worker A holds send_receipt (its provider call blocks);
// worker B, a process of its own, tries to take it while A's lease (2m)
// is live on the database. On each worker's own clock the lease has long
// expired (A behind by 10m, or B ahead by 10m).
func TestLeasesRunOnTheDatabaseClock(t *testing.T) {
	for _, tc := range []struct {
		name         string
		skewA, skewB time.Duration
	}{
		{"holder 10m behind", -10 * time.Minute, 0},
		{"taker 10m ahead", 0, 10 * time.Minute},
		{"both off, opposite ways", -7 * time.Minute, 7 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachCallerDB(t, func(t *testing.T, db callerDB) {
				ctx := context.Background()
				var mu sync.Mutex
				holders, calls := 0, map[string]int{}
				entered, release := make(chan struct{}), make(chan struct{})
				provider := func(name string, block bool) billing.SendReceipt {
					return billing.SendReceiptFunc(func(_ context.Context, key string, p billing.Payment) ([]byte, error) {
						mu.Lock()
						holders++
						calls[key]++
						if holders > 1 {
							t.Errorf("%s called the provider while another worker was in it", name)
						}
						mu.Unlock()
						if block {
							close(entered)
							<-release
						}
						mu.Lock()
						holders--
						mu.Unlock()
						return []byte("rcpt-" + p.EventID), nil
					})
				}
				a, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: provider("A", true)},
					idem.WithClock(skewed(tc.skewA)), idem.WithOwner("worker-a"), idem.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				b, err := billing.NewPaymentWebhook(db.open(t), billing.PaymentWebhookEffects{SendReceipt: provider("B", false)},
					idem.WithClock(skewed(tc.skewB)), idem.WithOwner("worker-b"), idem.WithLogger(quiet))
				if err != nil {
					t.Fatal(err)
				}
				p := billing.Payment{EventID: "evt_skew", InvoiceID: "inv-1", AmountCents: 100, PaidAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
				done := make(chan error, 1)
				go func() {
					_, err := a.Process(ctx, p)
					done <- err
				}()
				<-entered
				rep, err := b.Process(ctx, p)
				if !errors.Is(err, idem.ErrBusy) || rep.EffectsBusy != 1 || rep.EffectsDone != 0 {
					t.Errorf("B's Process while A holds the lease: %s, %v; want the effect busy", rep, err)
				}
				if rep, err := b.Drain(ctx); err != nil || rep.EffectsDone != 0 {
					t.Errorf("B's Drain while A holds the lease: %s, %v; want nothing performed", rep, err)
				}
				close(release)
				if err := <-done; err != nil {
					t.Fatalf("A: %v", err)
				}
				if rep, err := b.Process(ctx, p); err != nil || rep.EffectsDeduped != 1 {
					t.Errorf("B's replay after A finished: %s, %v; want the kept receipt", rep, err)
				}
				if got, want := fmt.Sprint(calls), fmt.Sprintf("map[%s:1]", billing.SendReceiptKey(p)); got != want {
					t.Errorf("provider calls %s, want %s", got, want)
				}
			})
		})
	}
}
