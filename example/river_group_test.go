package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The River worker writes the jobs it has in hand in groups (idemriver's
// group.go). These tests queue every job with the worker stopped, in one
// transaction, and give River more workers than jobs, so one fetch hands
// them out together and the worker groups them.
//
// Bugs planted in group.go and caught; the first three are in the
// mutation check (generator/internal/mutation, riverMutants), the last
// was planted by hand and reverted:
//   - a unit whose write failed reported written (writeUnits' write-failure
//     branch settling the job nil): TestRiverGroupKeepsOutcomesPerJob (the
//     refused and mismatched payments' jobs completed, the good ones'
//     receipts never called);
//   - the crash point before the commit ignored, the group reported written
//     and never committed: TestRiverGroupCrash's error case before the
//     commit (no payment written, every job completed);
//   - a group's last unit skipped in its write, its job still reported
//     written: TestRiverGroupCrash, five of its seven cases (19 payments);
//   - Work waiting for its outcome without its ctx:
//     TestRiverGroupWaitIsBounded (the jobs' errors do not say where they
//     were stuck).

// lockedBuffer is a log a worker's goroutines write at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// groupRiver is fastRiver with room for every job of a test at once.
func groupRiver(name string) riverTiming {
	tm := fastRiver(name, quiet)
	tm.MaxWorkers = 64
	return tm
}

func groupPayment(id string, cents int64) billing.Payment {
	return billing.Payment{EventID: id, InvoiceID: "inv-1", AmountCents: cents, PaidAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// queueGroupPayments queues n payments (evt-00, evt-01, ...) as River jobs
// of client in one transaction, with the client stopped, so that one
// fetch hands them out together once it starts.
func queueGroupPayments(t *testing.T, db riverDB, client *river.Client[pgxTx], prov billing.SendReceipt, n int) []billing.Payment {
	t.Helper()
	ctx := context.Background()
	hook, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	var units []billing.Payment
	for i := range n {
		units = append(units, groupPayment(fmt.Sprintf("evt-%02d", i), int64(100+i)))
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := hook.InsertManyTx(ctx, client, tx, units...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return units
}

// checkPaidOnce holds the end of a run to its units: one payment row each,
// and each receipt called and applied once.
//
// A receipt in flight when worker A died (called by A, its row not done
// when A's sessions were killed: inFlight) may be called once more by the
// worker that takes it over, as docs/guarantees.md says a kill can repeat
// a call; it is still applied once.
func checkPaidOnce(t *testing.T, db riverDB, prov *keyedProvider, units []billing.Payment, inFlight map[string]bool) {
	t.Helper()
	var rows, keys int
	if err := db.pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT event_id) FROM payments").Scan(&rows, &keys); err != nil {
		t.Fatal(err)
	}
	if rows != len(units) || keys != rows {
		t.Fatalf("payments: %d rows, %d keys; want %d, one each", rows, keys, len(units))
	}
	for _, p := range units {
		key := billing.SendReceiptKey(p)
		calls, applied := prov.counts(key)
		switch {
		case inFlight[key] && (calls < 1 || calls > 2 || applied != 1):
			t.Errorf("%s: %d receipt calls, %d applied; want 1 or 2 calls (its call was in flight when A died), 1 applied", p.EventID, calls, applied)
		case !inFlight[key] && (calls != 1 || applied != 1):
			t.Errorf("%s: %d receipt calls, %d applied; want 1 each", p.EventID, calls, applied)
		}
	}
}

// dyingProvider is worker A's provider in a crash test: once A is dead
// (die), a call of A never reaches the provider, as a killed process
// makes none: it waits for its context to end.
type dyingProvider struct {
	*keyedProvider
	mu   sync.Mutex
	dead bool
}

func (d *dyingProvider) SendReceipt(ctx context.Context, key string, u billing.Payment) ([]byte, error) {
	d.mu.Lock()
	if d.dead {
		d.mu.Unlock()
		<-ctx.Done()
		return nil, ctx.Err()
	}
	defer d.mu.Unlock()
	return d.keyedProvider.SendReceipt(ctx, key, u)
}

// die ends A's calls and returns the keys it called (every call so far
// is A's: B starts later).
func (d *dyingProvider) die() map[string]bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dead = true
	d.keyedProvider.mu.Lock()
	defer d.keyedProvider.mu.Unlock()
	called := map[string]bool{}
	for k, n := range d.keyedProvider.calls {
		if n > 0 {
			called[k] = true
		}
	}
	return called
}

// inFlightAtDeath are the keys A called whose ledger rows were not done
// once its sessions were killed: their calls were in flight.
func inFlightAtDeath(t *testing.T, db riverDB, called map[string]bool) map[string]bool {
	t.Helper()
	rows, err := db.pool.Query(context.Background(), "SELECT effect_key FROM billing_idem_ledger WHERE state = 'done'")
	if err != nil {
		t.Fatal(err)
	}
	done, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	inFlight := maps.Clone(called)
	for _, k := range done {
		delete(inFlight, k)
	}
	return inFlight
}

// riverJobsByEvent reads each payment River job's state and attempt, by
// the event id of the unit it holds.
func riverJobsByEvent(t *testing.T, db riverDB) map[string]string {
	t.Helper()
	rows, err := db.pool.Query(context.Background(), "SELECT args->'unit'->>'event_id', state::text, attempt FROM river_job WHERE kind = $1",
		billing.PaymentWebhookArgs{}.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, state string
		var attempt int
		if err := rows.Scan(&id, &state, &attempt); err != nil {
			t.Fatal(err)
		}
		out[id] = fmt.Sprintf("%s/%d", state, attempt)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A group holding units that cannot be written keeps each job's outcome
// its own. 24 good payments are queued in one transaction together with
// three bad ones: a payment already processed with another amount (a
// mismatch), one whose key is empty (queued as a raw River job: the
// generated InsertTx refuses it), and one whose insert a trigger refuses
// (a write failure). River hands them out together; the group is rolled
// back, the mismatch and the empty key are cancelled at once, the poisoned
// payment fails alone, is retried and cancelled once parked (its third
// attempt), and every good job completes at its first attempt with its
// payment written once and its receipt sent once.
func TestRiverGroupKeepsOutcomesPerJob(t *testing.T) {
	db := newRiverDB(t)
	ctx := context.Background()
	prov := newKeyedProvider()
	for _, stmt := range []string{
		`CREATE FUNCTION poison_payment() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.event_id = 'evt-poison' THEN RAISE EXCEPTION 'poisoned payment'; END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER poison BEFORE INSERT ON payments FOR EACH ROW EXECUTE FUNCTION poison_payment()`,
	} {
		if _, err := db.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	hook, err := billing.NewPaymentWebhook(db.store, billing.PaymentWebhookEffects{SendReceipt: prov}, idem.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	changed := groupPayment("evt-changed", 100)
	if _, err := hook.Process(ctx, changed); err != nil {
		t.Fatal(err)
	}
	changed.AmountCents++
	var good []billing.Payment
	for i := range 24 {
		good = append(good, groupPayment(fmt.Sprintf("evt-good-%02d", i), int64(100+i)))
	}
	units := append(append(append([]billing.Payment(nil), good[:12]...), changed, groupPayment("evt-poison", 1)), good[12:]...)

	var log lockedBuffer
	logger := slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, _ := db.workerTimed(t, "worker-1", prov, groupRiver("worker-1"), idem.WithLogger(logger),
		idemtest.WithJobEdit(func(j *idemrt.Job[billing.Payment]) { j.MaxAttempts = 3 })) // parked at the third attempt
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := hook.InsertManyTx(ctx, c, tx, units...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.InsertTx(ctx, tx, billing.PaymentWebhookArgs{Key: "raw-empty", Unit: groupPayment("", 1)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	waitRiver(t, db, 60*time.Second)
	waitPerformed(t, db, 30*time.Second)

	jobs := riverJobsByEvent(t, db)
	want := map[string]string{"evt-changed": "cancelled/1", "": "cancelled/1", "evt-poison": "cancelled/3"}
	for _, p := range good {
		want[p.EventID] = "completed/1"
	}
	for id, w := range want {
		if jobs[id] != w {
			t.Errorf("River job of %q: %s; want %s", id, jobs[id], w)
		}
	}
	if len(jobs) != len(want) {
		t.Errorf("River jobs %v; want %d", jobs, len(want))
	}
	for _, p := range good {
		if calls, applied := prov.counts(billing.SendReceiptKey(p)); calls != 1 || applied != 1 {
			t.Errorf("%s: %d receipt calls, %d applied; want 1 each", p.EventID, calls, applied)
		}
	}
	if calls, _ := prov.counts(billing.SendReceiptKey(changed)); calls != 1 {
		t.Errorf("evt-changed: %d receipt calls; want the first payment's one", calls)
	}
	if calls, _ := prov.counts(billing.SendReceiptKey(groupPayment("evt-poison", 1))); calls != 0 {
		t.Errorf("evt-poison: %d receipt calls; want none", calls)
	}
	var rows, keys int
	var cents int64
	if err := db.pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT event_id), (SELECT amount_cents FROM payments WHERE event_id = 'evt-changed') FROM payments").
		Scan(&rows, &keys, &cents); err != nil {
		t.Fatal(err)
	}
	if rows != len(good)+1 || keys != rows || cents != 100 {
		t.Errorf("payments: %d rows, %d keys, evt-changed at %d cents; want %d rows, one each, the first amount", rows, keys, cents, len(good)+1)
	}
	if n := ledgerCount(t, db, idem.StatePending); n != 0 {
		t.Errorf("%d receipts still owed", n)
	}
	for _, line := range []string{"a group of River jobs was rolled back", "unit parked after max attempts; River job cancelled"} {
		if !strings.Contains(log.String(), line) {
			t.Errorf("the worker's log lacks %q: the bad units were not met in a group:\n%s", line, log.String())
		}
	}
}

// The group's transaction under crashes. 20 payments are queued together
// and worker A takes them in groups (how many in each is River's timing).
// A crash point is hit for each unit
// of the group: idemtest.PointUnitBeforeCommit twice (inside the engine's
// write, then by the worker just before its commit), idemtest.PointUnitAfterCommit
// once, after it. At the at-th unit to hit the point (the nth hit of its
// key), A crashes in one of two ways:
//
//   - park: A stops there for good and its sessions are killed on the
//     server, as if the process died; worker B, a new process, recovers
//     once River calls A's jobs stuck. Before the commit the crashed
//     unit is not written and its River job is still running; after it
//     the crashed unit is written, and every unit its transaction wrote
//     (its group) still has its River job running: B's redelivery finds
//     them written and performs what they owe.
//   - error: the hook returns an error (a crash the worker lives through):
//     the group's jobs fail and River retries them on A.
//
// Either way, in the end: 20 payment rows, one each, every River job
// completed, every receipt sent once (no call was in flight at a crash),
// nothing owed, and some transaction wrote two or more payments.
func TestRiverGroupCrash(t *testing.T) {
	// River runs on PostgreSQL alone; the level names the database, as the
	// crash tests' do (the mutation check runs Test.../postgres).
	t.Run("postgres", func(t *testing.T) { riverGroupCrash(t) })
}

func riverGroupCrash(t *testing.T) {
	for _, tc := range []struct {
		point     idemtest.CrashPoint
		nth, at   int
		park      bool
		committed bool // the group's transaction committed before the crash
	}{
		{idemtest.PointUnitBeforeCommit, 1, 5, true, false},
		{idemtest.PointUnitBeforeCommit, 2, 1, true, false},
		{idemtest.PointUnitBeforeCommit, 2, 5, true, false},
		{idemtest.PointUnitAfterCommit, 1, 1, true, true},
		{idemtest.PointUnitAfterCommit, 1, 5, true, true},
		{idemtest.PointUnitBeforeCommit, 2, 5, false, false},
		{idemtest.PointUnitAfterCommit, 1, 5, false, true},
	} {
		mode := "error"
		if tc.park {
			mode = "park"
		}
		t.Run(fmt.Sprintf("%s-hit%d-unit%d-%s", tc.point, tc.nth, tc.at, mode), func(t *testing.T) {
			t.Parallel()
			db := newRiverDB(t)
			ctx := context.Background()
			prov := newKeyedProvider()
			crashed := make(chan struct{})
			var mu sync.Mutex
			hits := map[string]int{} // the point's hits by key
			var before []string      // the keys that hit it (for the nth time) up to the crash, in order
			crashKey := ""
			hook := func(_ context.Context, p idemtest.CrashPoint, key string) error {
				if p != tc.point {
					return nil
				}
				mu.Lock()
				hits[key]++
				crash := false
				if hits[key] == tc.nth && crashKey == "" {
					before = append(before, key)
					if len(before) == tc.at {
						crash, crashKey = true, key
					}
				}
				mu.Unlock()
				if !crash {
					return nil
				}
				close(crashed)
				if tc.park {
					select {} // parked for good: a dead process runs nothing more
				}
				return errors.New("crash simulated at " + string(p))
			}
			nameA := "group-crash-a-" + db.schema
			tmA := groupRiver(nameA)
			if tc.park {
				tmA = dying(tmA)
			}
			provA := &dyingProvider{keyedProvider: prov}
			a, _ := db.workerTimed(t, nameA, provA, tmA, idemtest.WithCrashHook(hook))
			t.Cleanup(func() {
				stop, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_ = a.Stop(stop) // a parked A never stops: bounded
			})
			units := queueGroupPayments(t, db, a, prov, 20)
			if err := a.Start(ctx); err != nil {
				t.Fatal(err)
			}
			select {
			case <-crashed:
			case <-time.After(20 * time.Second):
				t.Fatal("worker A never reached the crash point")
			}
			eventOf := func(key string) string { return strings.TrimPrefix(key, "payments:event:") }

			var inFlight map[string]bool
			if tc.park {
				// A dies: its other groups' calls in flight end with it.
				called := provA.die()
				stop, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_ = a.Stop(stop)
				cancel()
				if _, err := db.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", nameA); err != nil {
					t.Fatal(err)
				}
				inFlight = inFlightAtDeath(t, db, called)
				mu.Lock()
				keys := append([]string(nil), before...)
				mu.Unlock()
				jobs := riverJobsByEvent(t, db)
				if !tc.committed {
					// The crashed unit is not written, nor are the others of
					// its group: they were in the one transaction that never
					// committed, and their River jobs are left running.
					var unwritten []string
					for _, p := range units {
						var n int
						if err := db.pool.QueryRow(ctx, "SELECT count(*) FROM payments WHERE event_id = $1", p.EventID).Scan(&n); err != nil {
							t.Fatal(err)
						}
						if n == 0 && strings.HasPrefix(jobs[p.EventID], "running/") {
							unwritten = append(unwritten, p.EventID)
						}
					}
					if !slices.Contains(unwritten, eventOf(crashKey)) {
						t.Fatalf("after a crash before the group's commit at %s: unwritten with their River job running: %v; want it among them, with the rest of its group (River jobs %v, keys that hit the point: %v)",
							eventOf(crashKey), unwritten, jobs, keys)
					}
				} else {
					// The crashed unit was committed with the rest of its
					// group (one transaction: one xmin), none of whose River
					// jobs is completed.
					rows, err := db.pool.Query(ctx, "SELECT event_id FROM payments WHERE xmin::text = (SELECT xmin::text FROM payments WHERE event_id = $1)", eventOf(crashKey))
					if err != nil {
						t.Fatal(err)
					}
					group, err := pgx.CollectRows(rows, pgx.RowTo[string])
					if err != nil {
						t.Fatal(err)
					}
					if !slices.Contains(group, eventOf(crashKey)) {
						t.Fatalf("after a crash past the commit: %s is not written (its transaction wrote %v)", eventOf(crashKey), group)
					}
					for _, id := range group {
						if !strings.HasPrefix(jobs[id], "running/") {
							t.Fatalf("after a crash past the commit: River job of %s is %s; want running, for River to rescue", id, jobs[id])
						}
					}
				}
				// B: a new process, once River calls A's jobs stuck. Its
				// lease clock is three minutes on, past A's leases.
				time.Sleep(groupRiver("").RescueAfter + 200*time.Millisecond)
				b, _ := db.workerTimed(t, "group-crash-b-"+db.schema, prov, groupRiver("group-crash-b-"+db.schema),
					idemtest.WithLeaseClock(func() time.Time { return time.Now().Add(3 * time.Minute) }))
				if err := b.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = b.Stop(context.Background()) })
			}

			states := waitRiver(t, db, 60*time.Second)
			waitPerformed(t, db, 30*time.Second)
			if states["completed"] != len(units) || len(states) != 1 {
				t.Fatalf("River jobs %v; want %d completed", states, len(units))
			}
			checkPaidOnce(t, db, prov, units, inFlight)
			if n := ledgerCount(t, db, idem.StateDone); n != len(units) {
				t.Errorf("%d receipts done in the ledger; want %d", n, len(units))
			}
			// Groups formed: some transaction wrote two or more payments.
			// (How River hands out the 20 jobs decides the groups' sizes: a
			// loaded machine can give the crashed unit a group of its own, so
			// the size is checked over the whole run, not at the crash.)
			var writes int
			if err := db.pool.QueryRow(ctx, "SELECT count(DISTINCT xmin::text) FROM payments").Scan(&writes); err != nil {
				t.Fatal(err)
			}
			if writes >= len(units) {
				t.Errorf("the %d payments were written in %d transactions: no group of two or more formed", len(units), writes)
			}
			if !tc.park {
				// The crashed unit's job failed with its group and was retried.
				if jobs := riverJobsByEvent(t, db); jobs[eventOf(crashKey)] != "completed/2" {
					t.Errorf("River job of the crashed unit %s: %s; want completed at its second attempt", eventOf(crashKey), jobs[eventOf(crashKey)])
				}
			}
		})
	}
}

// A job waits for its group on its own ctx, and says where it was stuck.
// Worker A's group of 20 payments stops at a crash point (a hook that
// blocks until its ctx ends) and River's JobTimeout of one second ends
// every job's ctx: each Work call returns an error naming its group and
// the stage it was stuck at, and the group's ctx ends too (its deadline is
// its jobs' latest, and it is cancelled once every job of the group has
// left; the hook sees it end). River retries the jobs, which then
// complete: one payment each, one receipt each, within the test's bounds.
//
//   - before commit: the hook fails at idemtest.PointUnitBeforeCommit, so the
//     group's transaction rolls back and the retries write the units.
//   - after commit: the hook returns at idemtest.PointUnitAfterCommit once
//     the ctx has ended, so the group committed its units with their
//     reservations leased to it and then has no ctx to call under. It
//     gives the leases back: the retries find the units written and
//     perform the receipts at once, not after the receipt's 2m lease.
func TestRiverGroupWaitIsBounded(t *testing.T) {
	// River runs on PostgreSQL alone; the level names the database, as the
	// crash tests' do (the mutation check runs Test.../postgres).
	t.Run("postgres", func(t *testing.T) {
		t.Run("before commit", func(t *testing.T) {
			t.Parallel()
			riverGroupWaitIsBounded(t, idemtest.PointUnitBeforeCommit, func(ctx context.Context) error { return ctx.Err() })
		})
		t.Run("after commit", func(t *testing.T) {
			t.Parallel()
			riverGroupWaitIsBounded(t, idemtest.PointUnitAfterCommit, func(context.Context) error { return nil })
		})
	})
}

// riverGroupWaitIsBounded blocks the first hit of point until its ctx
// ends, then returns what then says.
func riverGroupWaitIsBounded(t *testing.T, point idemtest.CrashPoint, then func(ctx context.Context) error) {
	db := newRiverDB(t)
	ctx := context.Background()
	prov := newKeyedProvider()
	var once sync.Once
	groupCancelled := make(chan error, 1)
	hook := func(ctx context.Context, p idemtest.CrashPoint, _ string) error {
		if p != point {
			return nil
		}
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil
		}
		select {
		case <-ctx.Done():
			groupCancelled <- nil
			return then(ctx)
		case <-time.After(20 * time.Second):
			groupCancelled <- errors.New("the group's ctx was not cancelled within 20s of its jobs' timeout")
			return errors.New("stuck")
		}
	}
	tm := groupRiver("worker-1")
	tm.JobTimeout = time.Second
	c, _ := db.workerTimed(t, "worker-1", prov, tm, idemtest.WithCrashHook(hook))
	units := queueGroupPayments(t, db, c, prov, 20)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	select {
	case err := <-groupCancelled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the group never reached the crash point")
	}
	states := waitRiver(t, db, 60*time.Second)
	waitPerformed(t, db, 30*time.Second)
	if states["completed"] != len(units) || len(states) != 1 {
		t.Fatalf("River jobs %v; want %d completed", states, len(units))
	}
	rows, err := db.pool.Query(ctx, "SELECT args->'unit'->>'event_id', attempt, coalesce(errors[1]->>'error', '') FROM river_job WHERE kind = $1",
		billing.PaymentWebhookArgs{}.Kind())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stuck := 0
	for rows.Next() {
		var id, msg string
		var attempt int
		if err := rows.Scan(&id, &attempt, &msg); err != nil {
			t.Fatal(err)
		}
		if attempt == 1 {
			continue // not in the stuck group
		}
		stuck++
		if !strings.Contains(msg, "for its group of") || !strings.Contains(msg, "stuck writing the group's units") || !strings.Contains(msg, "deadline exceeded") {
			t.Errorf("River job of %s, stuck in its group: first error %q; want where it was stuck", id, msg)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if stuck == 0 {
		t.Errorf("no River job was retried; want the stuck group's")
	}
	checkPaidOnce(t, db, prov, units, nil)
}
