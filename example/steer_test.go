package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Steering by hand: `idemgen ledger limit` (idemops.DB.SetLimits, the
// code the CLI and the operations page run) changes an effect's rate on
// every worker sharing the database while they run, and -reset puts the
// spec's back.

// steerDBs is one database seen by two workers' stores, each over its
// own handle or pool, and by the person on call's idemops.DB.
type steerDBs struct {
	workers [2]*billing.Store
	ops     *idemops.DB
}

func eachSteerDB(t *testing.T, fn func(t *testing.T, dbs steerDBs)) {
	ctx := context.Background()
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "steer.db")
		var dbs steerDBs
		for w := range dbs.workers {
			st, closeDB, err := openSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(closeDB)
			dbs.workers[w] = st
		}
		db, err := openSQLiteDB(path)
		if err != nil {
			t.Fatal(err)
		}
		st := billing.NewSQLiteStore(db)
		if dbs.ops, err = idemops.New(ctx, db, st.Runtime(), idemops.SQLite, billingOps, quiet); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dbs.ops.Close() })
		fn(t, dbs)
	})
	t.Run("postgres", func(t *testing.T) {
		pg := idemtest.OpenPostgres(t)
		schema := pg.NewSchema(t)
		var dbs steerDBs
		for w := range dbs.workers {
			st, pool, err := openPostgresConfig(ctx, pg.Config(schema))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(pool.Close)
			dbs.workers[w] = st
		}
		st, pool, err := openPostgresConfig(ctx, pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		if dbs.ops, err = idemops.New(ctx, stdlib.OpenDBFromPool(pool), st.Runtime(), idemops.Postgres, billingOps, quiet); err != nil {
			t.Fatal(err)
		}
		fn(t, dbs)
	})
}

// countedReceipts is a receipt provider that keeps when each worker's
// calls started.
type countedReceipts struct {
	worker int
	mu     *sync.Mutex
	starts *[]callStart
}

type callStart struct {
	worker int
	at     time.Time
}

func (p countedReceipts) SendReceipt(ctx context.Context, key string, pay billing.Payment) ([]byte, error) {
	p.mu.Lock()
	*p.starts = append(*p.starts, callStart{p.worker, time.Now()})
	p.mu.Unlock()
	return []byte("rcpt-" + pay.EventID), nil
}

// startsIn counts the calls that started in [from, to), per worker.
func startsIn(mu *sync.Mutex, starts *[]callStart, from, to time.Time) (total int, per [2]int) {
	mu.Lock()
	defer mu.Unlock()
	for _, s := range *starts {
		if !s.at.Before(from) && s.at.Before(to) {
			total++
			per[s.worker]++
		}
	}
	return total, per
}

// Two workers call send_receipt as fast as its rate, 20/s, lets them; the
// CLI's code path lowers it to 4/s and both follow within seconds with no
// restart (the pacing row is shared, so one worker still at 20/s would
// show as more than 4 starts a second); -reset brings 20/s back.
func TestLimitOverrideIsFollowedByEveryWorker(t *testing.T) {
	eachSteerDB(t, func(t *testing.T, dbs steerDBs) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		var mu sync.Mutex
		var starts []callStart
		f := newFixture()
		var next atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w, st := range dbs.workers {
			hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: countedReceipts{w, &mu, &starts}},
				idem.WithLogger(quiet), idem.WithEffectConcurrency(8), idem.WithOwner(fmt.Sprintf("worker-%d", w)),
				idemtest.WithJobEdit(func(j *idemrt.Job[billing.Payment]) { j.Effects[0].Rate = idemrt.Rate{N: 20, Per: time.Second} }))
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					var batch []billing.Payment
					for range 8 {
						batch = append(batch, payment(f, fmt.Sprintf("evt_%06d", next.Add(1)), 100))
					}
					if _, err := hook.Process(ctx, batch...); err != nil && ctx.Err() == nil {
						t.Logf("worker %d: %v", w, err) // a call that waits past half its lease: performed by a later drain
					}
				}
			})
		}
		defer func() { close(stop); wg.Wait() }()

		wait := func(d time.Duration) time.Time {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
			return time.Now()
		}
		begin := wait(time.Second) // both workers under way
		before, _ := startsIn(&mu, &starts, begin, wait(2*time.Second))
		if before < 30 {
			t.Fatalf("%d calls started in 2s at 20/s; want about 40: the workers are not calling as fast as the rate lets them", before)
		}

		rate, err := idemops.ParseRate("4/s")
		if err != nil {
			t.Fatal(err)
		}
		if err := dbs.ops.SetLimits(ctx, "payment_webhook", "send_receipt", idem.LimitOverride{Rate: rate, By: "oncall"}); err != nil {
			t.Fatal(err)
		}
		changed := time.Now()
		// Within seconds: a worker's view is at most a second old, and the
		// starts taken before it saw the change keep their places in the
		// queue of starts, which the 16 callers' starts (at most 250ms
		// apart) make at most 4s long.
		from := wait(4500 * time.Millisecond)
		after, per := startsIn(&mu, &starts, from, wait(3*time.Second))
		if after > 3*4+3 {
			t.Errorf("%d calls started in 3s from %s after the rate went down to 4/s; want at most 15 (12, and 3 for starts taken at the edges)", after, from.Sub(changed).Round(time.Millisecond))
		}
		if per[0] == 0 || per[1] == 0 {
			t.Errorf("calls per worker after the change: %v; want both workers calling (both measured)", per)
		}

		s, err := dbs.ops.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var shown string
		for _, js := range s.Jobs {
			for _, es := range js.Effects {
				if js.Job == "payment_webhook" && es.Override != nil {
					shown = es.Override.Text()
				}
			}
		}
		if !strings.Contains(shown, "rate 4/s") || !strings.Contains(shown, "by oncall since") {
			t.Errorf("status shows the override as %q; want its rate 4/s, who set it and since when", shown)
		}

		if had, err := dbs.ops.ResetLimits(ctx, "payment_webhook", "send_receipt", "oncall"); err != nil || !had {
			t.Fatalf("reset: had %v, err %v", had, err)
		}
		// A higher rate is followed once the starts taken under the lower
		// one have passed: at most the 16 callers' 250ms each, 4s.
		from = wait(5 * time.Second)
		again, _ := startsIn(&mu, &starts, from, wait(2*time.Second))
		if again < 30 {
			t.Errorf("%d calls started in 2s after -reset back to the spec's 20/s; want about 40", again)
		}
		t.Logf("starts: %d in 2s at 20/s, %d in 3s at 4/s (both workers: %v), %d in 2s after -reset", before, after, per, again)
	})
}

// A pause by hand holds an effect the spec gives no limits, on a worker
// that is already running: within a second of the CLI's pause its calls
// wait, uncounted; lift ends the pause early, and a drain performs them.
func TestPauseByHandHoldsAnEffectWithoutLimits(t *testing.T) {
	eachSteerDB(t, func(t *testing.T, dbs steerDBs) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var mu sync.Mutex
		var starts []callStart
		f := newFixture()
		hook, err := billing.NewPaymentWebhook(dbs.workers[0], billing.PaymentWebhookEffects{SendReceipt: countedReceipts{0, &mu, &starts}},
			idem.WithLogger(quiet), idem.WithOwner("worker-0"))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := hook.Process(ctx, payment(f, "evt_before", 100)); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("before the pause: %s, %v", rep, err)
		}
		if _, err := dbs.ops.PauseByHand(ctx, "payment_webhook", "send_receipt", time.Hour, "oncall"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // the worker's view of the steering is at most a second old
		rep, err := hook.Process(ctx, payment(f, "evt_paused", 100))
		if !errors.Is(err, idem.ErrWaiting) || rep.EffectsDone != 0 || rep.EffectsWaiting != 1 || !strings.Contains(err.Error(), "paused by hand by oncall") {
			t.Fatalf("during the pause: %s, %v; want the receipt waiting for the pause by hand", rep, err)
		}
		if n, _ := startsIn(&mu, &starts, time.Time{}, time.Now()); n != 1 {
			t.Fatalf("%d calls; want only the one before the pause", n)
		}
		if g, err := dbs.ops.Gate(ctx, "payment_webhook", "send_receipt"); err != nil || g == nil || g.By != "oncall" {
			t.Fatalf("gate: %+v, %v", g, err)
		}
		// Lifted early: the receipt that met the pause is owed again at
		// once, not at the hour's end.
		if lifted, err := dbs.ops.LiftGate(ctx, "payment_webhook", "send_receipt"); err != nil || !lifted {
			t.Fatalf("lift: %v, %v", lifted, err)
		}
		if rep, err = hook.Drain(ctx); err != nil || rep.EffectsDone != 1 {
			t.Fatalf("drain after the lift: %s, %v", rep, err)
		}
	})
}

// A concurrency set by hand bounds an effect the spec gives no limits,
// across two workers that would each make 8 calls at once.
func TestConcurrencySetByHandHoldsAcrossWorkers(t *testing.T) {
	eachSteerDB(t, func(t *testing.T, dbs steerDBs) {
		if err := dbs.ops.SetLimits(context.Background(), "payment_webhook", "send_receipt", idem.LimitOverride{Concurrency: 1, By: "oncall"}); err != nil {
			t.Fatal(err)
		}
		p := &pacedReceipts{hold: 40 * time.Millisecond}
		limitedWorkers(t, dbs.workers[0], p, 12, func(*idemrt.Effect[billing.Payment]) {})
		if p.maxIn != 1 {
			t.Fatalf("%d calls in flight at once; want 1, the concurrency set by hand", p.maxIn)
		}
	})
}
