// Package storetest is the one conformance suite of the runtime's stores:
// idem/idempg and idem/idemsqlite each run Exercise from a test of their
// own, so both dialects are held to the same expectations of the store
// contract (idem.Store, idemrt.Querier and the interfaces it embeds,
// idemrt.DBClock, and a caller's own transaction).
//
// Each test gets a store over a fresh database migrated as a generated
// package migrates it, and drives the store's queries directly, with times
// of its own (the contract takes "now" and lease ends as arguments), then
// checks the rows the store reads back.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Store is what the suite tests: a runtime store that reads its
// database's clock.
type Store interface {
	idem.Store
	idemrt.DBClock
}

// Opened is a store over a fresh, migrated database that lives as long as
// the test that opened it.
type Opened struct {
	Store Store
	// Begin starts a transaction the caller owns on the store's database
	// and returns the store's queries in it (idemrt.PgTxStore,
	// idemrt.SQLTxStore), with its commit and its rollback.
	Begin func(ctx context.Context, t *testing.T) (q idemrt.Querier, commit, rollback func() error)
	// Outside is the same database through a handle of its own (its own
	// pool or *sql.DB), for reading what a transaction Begin started
	// shows to others while it is open: reading through Store then would
	// ask the transaction's own pool for a second connection, which on a
	// pool of one waits forever.
	Outside Store
}

// Exercise runs every test of the suite, each on a store open returns.
func Exercise(t *testing.T, open func(t *testing.T) Opened) {
	tests := []struct {
		name string
		run  func(t *testing.T, o Opened)
	}{
		{"Progress", testProgress},
		{"See", testSee},
		{"Reserve", testReserve},
		{"ReserveLeased", testReserveLeased},
		{"Decided", testDecided},
		{"ClaimAndComplete", testClaimAndComplete},
		{"Statement", testStatement},
		{"Release", testRelease},
		{"PendingPages", testPendingPages},
		{"Purge", testPurge},
		{"PurgeSeen", testPurgeSeen},
		{"LedgerPages", testLedgerPages},
		{"ParkedUnits", testParkedUnits},
		{"Recovery", testRecovery},
		{"Limits", testLimits},
		{"Gate", testGate},
		{"Backlog", testBacklog},
		{"Transactions", testTransactions},
		{"CallerTransaction", testCallerTransaction},
		{"DBNow", testDBNow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, open(t))
		})
	}
}

// t0 is the suite's clock: every time it hands the store is t0 plus
// something, whole seconds in UTC, which both dialects store exactly.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const (
	job    = "invoice_sync"
	effect = "notify"
)

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// reservation is one effect's rows for the units, each keyed
// "<effect>:v<version>:<unit>" with payload "payload of <unit>".
func reservation(job, effect string, version int32, units ...string) idemrt.Reservations {
	r := idemrt.Reservations{Job: job, Effect: effect, EffectVersion: version, JobVersion: 1}
	for _, u := range units {
		r.Keys = append(r.Keys, key(effect, version, u))
		r.UnitKeys = append(r.UnitKeys, u)
		r.Payloads = append(r.Payloads, []byte("payload of "+u))
	}
	return r
}

func key(effect string, version int32, unit string) string {
	return fmt.Sprintf("%s:v%d:%s", effect, version, unit)
}

func reserve(t *testing.T, st Store, r idemrt.Reservations) {
	t.Helper()
	must(t, st.InTx(ctxOf(t), func(q idemrt.Querier) error { return q.Reserve(ctxOf(t), r, t0) }))
}

// entry reads key's ledger row as operators see it (LedgerPage).
func entry(t *testing.T, st Store, key string) (idem.LedgerEntry, bool) {
	t.Helper()
	all, err := st.Auto().Ledger(ctxOf(t))
	must(t, err)
	for _, e := range all {
		if e.Key == key {
			return e, true
		}
	}
	return idem.LedgerEntry{}, false
}

func mustEntry(t *testing.T, st Store, key string) idem.LedgerEntry {
	t.Helper()
	e, ok := entry(t, st, key)
	if !ok {
		t.Fatalf("ledger has no row %s", key)
	}
	return e
}

// keysOf returns the keys of a set, sorted.
func keysOf(set map[string]bool) []string {
	var out []string
	for k, ok := range set {
		if ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func wantKeys(t *testing.T, what string, got map[string]bool, want ...string) {
	t.Helper()
	if g := keysOf(got); !slices.Equal(g, want) {
		t.Errorf("%s: got keys %q, want %q", what, g, want)
	}
}

func claim(t *testing.T, st Store, owner string, now, until time.Time, keys ...string) map[string]bool {
	t.Helper()
	got, err := st.Auto().ClaimMany(ctxOf(t), keys, owner, now, until)
	must(t, err)
	return got
}

func complete(t *testing.T, st Store, owner string, now time.Time, keys ...string) map[string]bool {
	t.Helper()
	results := make([][]byte, len(keys))
	for i, k := range keys {
		results[i] = []byte("result of " + k)
	}
	got, err := st.Auto().CompleteMany(ctxOf(t), keys, results, owner, now)
	must(t, err)
	return got
}

func release(t *testing.T, st Store, r idemrt.Release) string {
	t.Helper()
	if r.Now.IsZero() {
		r.Now = t0
	}
	var state string
	must(t, st.InTx(ctxOf(t), func(q idemrt.Querier) (err error) {
		state, err = q.Release(ctxOf(t), r)
		return err
	}))
	return state
}

func pendingKeys(t *testing.T, st Store, job string, now time.Time) []string {
	t.Helper()
	rows, err := st.Auto().Pending(ctxOf(t), job, now, "", 1000)
	must(t, err)
	var out []string
	for _, r := range rows {
		out = append(out, r.Key)
	}
	return out
}

func testProgress(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	p, err := q.Progress(ctx, job)
	must(t, err)
	if p.Found {
		t.Fatalf("a job never saved has progress %+v", p)
	}
	must(t, q.SaveWatermark(ctx, job, at(time.Hour), 1, t0))
	must(t, q.SaveWatermark(ctx, job, at(time.Minute), 1, t0)) // an overlapping run that finished late
	p, err = q.Progress(ctx, job)
	must(t, err)
	if !p.Found || !p.HasMark || !p.Watermark.Equal(at(time.Hour)) || p.Cursor != "" || p.Position != 0 {
		t.Errorf("watermark after saving 1h then 1m: %+v, want 1h (it never moves back)", p)
	}
	must(t, q.SaveWatermark(ctx, job, at(2*time.Hour), 2, t0))
	if p, _ = q.Progress(ctx, job); !p.Watermark.Equal(at(2 * time.Hour)) {
		t.Errorf("watermark after saving 2h: %v", p.Watermark)
	}

	const cursorJob = "events"
	must(t, q.SaveCursor(ctx, cursorJob, "page-5", 5, 1, t0))
	must(t, q.SaveCursor(ctx, cursorJob, "page-3", 3, 1, t0)) // a slower run's older page
	p, err = q.Progress(ctx, cursorJob)
	must(t, err)
	if !p.Found || p.HasMark || p.Cursor != "page-5" || p.Position != 5 {
		t.Errorf("cursor after saving 5 then 3: %+v, want page-5 at 5", p)
	}
	must(t, q.SaveCursor(ctx, cursorJob, "page-9", 9, 1, t0))
	if p, _ = q.Progress(ctx, cursorJob); p.Cursor != "page-9" || p.Position != 9 {
		t.Errorf("cursor after saving 9: %+v", p)
	}
}

func testSee(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	seen, err := q.See(ctx, job, []string{"a", "b"}, [][]byte{[]byte("ha"), []byte("hb")}, 1, t0)
	must(t, err)
	if len(seen) != 0 {
		t.Errorf("first sight of a and b: seen %v, want none", seen)
	}
	seen, err = q.See(ctx, job, []string{"a", "c"}, [][]byte{[]byte("ha-changed"), []byte("hc")}, 1, t0)
	must(t, err)
	if len(seen) != 1 || string(seen["a"]) != "ha" {
		t.Errorf("a again and c: seen %q, want a with its first hash", seen)
	}
	seen, err = q.See(ctx, "other_job", []string{"a"}, [][]byte{[]byte("ha")}, 1, t0)
	must(t, err)
	if len(seen) != 0 {
		t.Errorf("another job's a: seen %v, want none (keys are per job)", seen)
	}
}

func testReserve(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	r := reservation(job, effect, 2, "u1", "u2")
	reserve(t, st, r)
	row, found, err := q.Effect(ctx, r.Keys[0])
	must(t, err)
	if !found || row.State != idem.StatePending || row.LastError != "" || row.Permanent || !row.NextAttemptAt.IsZero() {
		t.Errorf("reserved row: %+v (found %v), want pending", row, found)
	}
	e := mustEntry(t, st, r.Keys[0])
	if e.Job != job || e.Effect != effect || e.EffectVersion != 2 || e.UnitKey != "u1" || e.Attempts != 0 || e.LeaseOwner != "" {
		t.Errorf("reserved entry: %+v", e)
	}
	rows, err := q.Effects(ctx, []string{r.Keys[0], r.Keys[1], "missing"})
	must(t, err)
	if len(rows) != 2 || rows[r.Keys[1]].State != idem.StatePending {
		t.Errorf("Effects of two reserved keys and a missing one: %+v", rows)
	}
	if _, found, err := q.Effect(ctx, "missing"); err != nil || found {
		t.Errorf("Effect of a missing key: found %v, err %v", found, err)
	}
	pending, err := q.Pending(ctx, job, t0, "", 10)
	must(t, err)
	if len(pending) != 2 || pending[0].Key != r.Keys[0] || pending[0].UnitKey != "u1" || pending[0].Effect != effect ||
		string(pending[0].Payload) != "payload of u1" || pending[0].State != idem.StatePending {
		t.Errorf("Pending after reserving u1 and u2: %+v", pending)
	}

	// A key already in the ledger is left as it is: done stays done.
	wantKeys(t, "claim u1", claim(t, st, "A", t0, at(time.Minute), r.Keys[0]), r.Keys[0])
	wantKeys(t, "complete u1", complete(t, st, "A", t0, r.Keys[0]), r.Keys[0])
	again := reservation(job, effect, 2, "u1")
	again.Payloads[0] = []byte("another payload")
	reserve(t, st, again)
	row, _, err = q.Effect(ctx, r.Keys[0])
	must(t, err)
	if row.State != idem.StateDone || string(row.Result) != "result of "+r.Keys[0] {
		t.Errorf("a done key reserved again: %+v, want done with its result", row)
	}
}

func testReserveLeased(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	r := reservation(job, effect, 1, "u1", "u2")
	var leased map[string]bool
	must(t, st.InTx(ctx, func(q idemrt.Querier) (err error) {
		leased, err = q.ReserveLeased(ctx, r, t0, "A", at(5*time.Minute))
		return err
	}))
	wantKeys(t, "ReserveLeased of two new keys", leased, r.Keys...)
	for _, k := range r.Keys {
		if e := mustEntry(t, st, k); e.State != idem.StatePending || e.Attempts != 1 || e.LeaseOwner != "A" {
			t.Errorf("leased reservation %s: %+v, want pending, leased to A, one attempt", k, e)
		}
	}
	wantKeys(t, "B claims under A's live lease", claim(t, st, "B", at(time.Minute), at(6*time.Minute), r.Keys...))
	if p := pendingKeys(t, st, job, at(time.Minute)); len(p) != 0 {
		t.Errorf("Pending under a live lease: %q, want none", p)
	}
	wantKeys(t, "A completes its leased rows", complete(t, st, "A", at(time.Minute), r.Keys...), r.Keys...)

	// A key already there is left to the claim; only the new one is leased.
	r2 := reservation(job, effect, 1, "u1", "u3")
	must(t, st.InTx(ctx, func(q idemrt.Querier) (err error) {
		leased, err = q.ReserveLeased(ctx, r2, t0, "C", at(5*time.Minute))
		return err
	}))
	wantKeys(t, "ReserveLeased of a done key and a new one", leased, key(effect, 1, "u3"))
	if e := mustEntry(t, st, key(effect, 1, "u1")); e.State != idem.StateDone || e.LeaseOwner != "A" {
		t.Errorf("done key reserved leased again: %+v, want done as A left it", e)
	}

	// A rollback takes the lease away with the row.
	boom := errors.New("boom")
	err := st.InTx(ctx, func(q idemrt.Querier) error {
		if _, err := q.ReserveLeased(ctx, reservation(job, effect, 1, "u9"), t0, "A", at(5*time.Minute)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx returned %v, want the function's error", err)
	}
	if _, ok := entry(t, st, key(effect, 1, "u9")); ok {
		t.Error("a leased reservation outlived its rolled-back transaction")
	}
}

func testDecided(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	reserve(t, st, reservation(job, effect, 1, "u1"))
	reserve(t, st, reservation(job, effect, 2, "u2"))
	reserve(t, st, reservation(job, "other_effect", 1, "u3"))
	got, err := q.Decided(ctx, job, effect, []string{"u1", "u2", "u3", "u4"}, 2)
	must(t, err)
	wantKeys(t, "units decided by an earlier version than 2", got, "u1")
	got, err = q.Decided(ctx, job, effect, []string{"u1", "u2"}, 1)
	must(t, err)
	wantKeys(t, "units decided by an earlier version than 1", got)
	got, err = q.Decided(ctx, "other_job", effect, []string{"u1"}, 2)
	must(t, err)
	wantKeys(t, "another job's units", got)
}

func testClaimAndComplete(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	r := reservation(job, effect, 1, "u1", "u2", "u3")
	k1, k2, k3 := r.Keys[0], r.Keys[1], r.Keys[2]
	reserve(t, st, r)

	wantKeys(t, "A claims k1 and k2", claim(t, st, "A", t0, at(5*time.Minute), k1, k2), k1, k2)
	if e := mustEntry(t, st, k1); e.Attempts != 1 || e.LeaseOwner != "A" {
		t.Errorf("claimed row: %+v, want A's with one attempt", e)
	}
	wantKeys(t, "B claims k1 (A's, live) and k3", claim(t, st, "B", at(time.Minute), at(6*time.Minute), k1, k3), k3)
	wantKeys(t, "A completes k1 and k3 (B's)", complete(t, st, "A", at(2*time.Minute), k1, k3), k1)
	row, _, err := st.Auto().Effect(ctx, k1)
	must(t, err)
	if row.State != idem.StateDone || string(row.Result) != "result of "+k1 {
		t.Errorf("completed row: %+v", row)
	}
	wantKeys(t, "B claims k1, done", claim(t, st, "B", at(10*time.Minute), at(15*time.Minute), k1))
	wantKeys(t, "B completes k1 again", complete(t, st, "B", at(10*time.Minute), k1))

	// A lease that ran out is taken over, and its old owner is fenced off.
	wantKeys(t, "B claims k2 after A's lease ended", claim(t, st, "B", at(6*time.Minute), at(11*time.Minute), k2), k2)
	if e := mustEntry(t, st, k2); e.Attempts != 2 || e.LeaseOwner != "B" {
		t.Errorf("taken-over row: %+v, want B's with two attempts", e)
	}
	wantKeys(t, "A completes k2 after the takeover", complete(t, st, "A", at(7*time.Minute), k2))
	wantKeys(t, "B completes k2", complete(t, st, "B", at(7*time.Minute), k2), k2)
	wantKeys(t, "B completes k3", complete(t, st, "B", at(7*time.Minute), k3), k3)
}

// testStatement: a record, a read of many rows and a read of one row that
// is not there, each run as a one-statement transaction, answer as they do
// on their own; the function's own error comes back.
func testStatement(t *testing.T, o Opened) {
	st, ok := o.Store.(idemrt.StatementStore)
	if !ok {
		t.Skip("the store has no one-statement transactions: the engine runs these in InTx")
	}
	ctx := ctxOf(t)
	r := reservation(job, effect, 1, "u1")
	k := r.Keys[0]
	reserve(t, o.Store, r)
	wantKeys(t, "A claims k", claim(t, o.Store, "A", t0, at(5*time.Minute), k), k)
	var done map[string]bool
	must(t, st.InStatement(ctx, func(q idemrt.Querier) (err error) {
		done, err = q.CompleteMany(ctx, []string{k}, [][]byte{[]byte("result")}, "A", at(time.Minute))
		return err
	}))
	wantKeys(t, "A completes k in one statement", done, k)
	var rows map[string]idemrt.LedgerRow
	must(t, st.InStatement(ctx, func(q idemrt.Querier) (err error) {
		rows, err = q.Effects(ctx, []string{k, "no such key"})
		return err
	}))
	if len(rows) != 1 || rows[k].State != idem.StateDone || string(rows[k].Result) != "result" {
		t.Errorf("Effects in one statement: %+v, want k done with its result", rows)
	}
	var found bool
	must(t, st.InStatement(ctx, func(q idemrt.Querier) (err error) {
		_, found, err = q.Effect(ctx, "no such key")
		return err
	}))
	if found {
		t.Error("Effect in one statement found a key that is not there")
	}
	boom := errors.New("boom")
	if err := st.InStatement(ctx, func(idemrt.Querier) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("InStatement returned %v, want the function's error", err)
	}
}

func testRelease(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	r := reservation(job, effect, 1, "failed", "declined", "worn", "throttled", "taken")
	failed, declined, worn, throttled, taken := r.Keys[0], r.Keys[1], r.Keys[2], r.Keys[3], r.Keys[4]
	reserve(t, st, r)
	until := at(5 * time.Minute)

	// A failed attempt: pending again, claimable at once without a next attempt time.
	claim(t, st, "A", t0, until, failed)
	if s := release(t, st, idemrt.Release{Key: failed, Owner: "A", LastError: "provider down", MaxAttempts: 3}); s != idem.StatePending {
		t.Errorf("release of a first failure: %s, want pending", s)
	}
	row, _, err := st.Auto().Effect(ctx, failed)
	must(t, err)
	if row.State != idem.StatePending || row.LastError != "provider down" || row.Permanent || row.ParkedReason != "" || !row.NextAttemptAt.IsZero() {
		t.Errorf("released row: %+v", row)
	}
	wantKeys(t, "claim after a release without a wait", claim(t, st, "B", at(time.Second), until, failed), failed)

	// A permanent failure parks at once, stored as parked for every reader.
	claim(t, st, "A", t0, until, declined)
	if s := release(t, st, idemrt.Release{Key: declined, Owner: "A", LastError: "card declined", MaxAttempts: 3, Permanent: true}); s != idem.StateParked {
		t.Errorf("release of a permanent failure: %s, want parked", s)
	}
	row, _, err = st.Auto().Effect(ctx, declined)
	must(t, err)
	if row.State != idem.StateParked || !row.Permanent || row.ParkedReason != "permanent" || row.LastError != "card declined" {
		t.Errorf("permanently failed row: %+v", row)
	}
	if e := mustEntry(t, st, declined); e.State != idem.StateParked || !e.Permanent || e.ParkedReason != "permanent" || e.LeaseOwner != "" {
		t.Errorf("permanently failed entry: %+v", e)
	}

	// max_attempts failed attempts park it.
	for i := range 3 {
		claim(t, st, "A", at(time.Duration(i)*time.Hour), at(time.Duration(i)*time.Hour+time.Minute), worn)
		s := release(t, st, idemrt.Release{Key: worn, Owner: "A", LastError: fmt.Sprintf("failure %d", i+1), MaxAttempts: 3})
		if want := map[bool]string{true: idem.StateParked, false: idem.StatePending}[i == 2]; s != want {
			t.Errorf("release %d of 3: %s, want %s", i+1, s, want)
		}
	}
	if e := mustEntry(t, st, worn); e.State != idem.StateParked || e.Attempts != 3 || e.ParkedReason != "max_attempts" || e.Permanent || e.LastError != "failure 3" {
		t.Errorf("row parked at max_attempts: %+v", e)
	}
	wantKeys(t, "claim of parked rows", claim(t, st, "B", at(10*time.Hour), at(11*time.Hour), declined, worn))

	// "Not now": the attempt is given back, and no claim comes before the next attempt time.
	claim(t, st, "A", t0, until, throttled)
	var gotAttempts []int32
	s := release(t, st, idemrt.Release{Key: throttled, Owner: "A", LastError: "429", MaxAttempts: 1, NotCounted: true,
		NextAttempt: func(attempts int32) time.Time {
			gotAttempts = append(gotAttempts, attempts)
			return at(10 * time.Minute)
		}})
	if s != idem.StatePending || !slices.Equal(gotAttempts, []int32{0}) {
		t.Errorf("release not counted: %s, NextAttempt given attempts %v, want pending and [0]", s, gotAttempts)
	}
	row, _, err = st.Auto().Effect(ctx, throttled)
	must(t, err)
	if row.State != idem.StatePending || !row.NextAttemptAt.Equal(at(10*time.Minute)) || row.ParkedReason != "" {
		t.Errorf("row released as not now: %+v, want pending until 10m", row)
	}
	if e := mustEntry(t, st, throttled); e.Attempts != 0 {
		t.Errorf("attempts after a release not counted: %d, want 0", e.Attempts)
	}
	wantKeys(t, "claim before the next attempt time", claim(t, st, "B", at(9*time.Minute), at(15*time.Minute), throttled))
	if p := pendingKeys(t, st, job, at(9*time.Minute)); slices.Contains(p, throttled) {
		t.Errorf("Pending before the next attempt time lists %s", throttled)
	}
	if p := pendingKeys(t, st, job, at(10*time.Minute)); !slices.Contains(p, throttled) {
		t.Errorf("Pending at the next attempt time: %q, want %s in it", p, throttled)
	}
	wantKeys(t, "claim at the next attempt time", claim(t, st, "B", at(10*time.Minute), at(15*time.Minute), throttled), throttled)

	// A counted failure hands NextAttempt the attempts so far.
	gotAttempts = nil
	release(t, st, idemrt.Release{Key: throttled, Owner: "B", LastError: "500", MaxAttempts: 5,
		NextAttempt: func(attempts int32) time.Time {
			gotAttempts = append(gotAttempts, attempts)
			return at(20 * time.Minute)
		}})
	if !slices.Equal(gotAttempts, []int32{1}) {
		t.Errorf("NextAttempt after a counted failure given %v, want [1]", gotAttempts)
	}

	// Only the lease's owner releases; another worker changes nothing.
	claim(t, st, "A", t0, until, taken)
	if s := release(t, st, idemrt.Release{Key: taken, Owner: "B", LastError: "not mine", MaxAttempts: 1, Permanent: true}); s != idem.StatePending {
		t.Errorf("release by a worker that holds no lease: %s, want pending (the holder decides)", s)
	}
	if e := mustEntry(t, st, taken); e.State != idem.StatePending || e.LeaseOwner != "A" || e.Attempts != 1 || e.LastError != "" || e.Permanent {
		t.Errorf("row after another worker's release: %+v, want A's lease untouched", e)
	}
}

func testPendingPages(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	reserve(t, st, reservation(job, effect, 1, "u1", "u2", "u3", "u4", "u5"))
	reserve(t, st, reservation("other_job", effect, 1, "x1"))
	var pages [][]string
	after := ""
	for range 10 {
		rows, err := st.Auto().Pending(ctx, job, t0, after, 2)
		must(t, err)
		if len(rows) == 0 {
			break
		}
		var page []string
		for _, r := range rows {
			page = append(page, r.UnitKey)
			if r.Job != job {
				t.Errorf("Pending(%s) row of job %q", job, r.Job)
			}
		}
		pages = append(pages, page)
		after = rows[len(rows)-1].Key
	}
	if got := fmt.Sprint(pages); got != "[[u1 u2] [u3 u4] [u5]]" {
		t.Errorf("Pending in pages of 2: %s", got)
	}
	claim(t, st, "A", t0, at(time.Minute), key(effect, 1, "u1"))
	complete(t, st, "A", t0, key(effect, 1, "u1"))
	claim(t, st, "A", t0, at(time.Minute), key(effect, 1, "u2"))
	if p := pendingKeys(t, st, job, at(30*time.Second)); fmt.Sprint(p) != fmt.Sprint([]string{key(effect, 1, "u3"), key(effect, 1, "u4"), key(effect, 1, "u5")}) {
		t.Errorf("Pending with u1 done and u2 leased: %q", p)
	}
	if p := pendingKeys(t, st, job, at(2*time.Minute)); len(p) != 4 {
		t.Errorf("Pending once u2's lease ended: %q, want u2 to u5", p)
	}
}

func testPurge(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	r := reservation(job, effect, 1, "u1", "u2", "u3")
	reserve(t, st, r)
	reserve(t, st, reservation(job, "kept_effect", 1, "u1"))
	claim(t, st, "A", t0, at(time.Minute), r.Keys[0], r.Keys[1], key("kept_effect", 1, "u1"))
	complete(t, st, "A", t0, r.Keys[0], r.Keys[1], key("kept_effect", 1, "u1"))

	n, err := q.Purge(ctx, job, effect, at(-time.Second), 10)
	must(t, err)
	if n != 0 {
		t.Errorf("purge before anything was done: %d rows, want 0", n)
	}
	var counts []int64
	for range 3 {
		n, err := q.Purge(ctx, job, effect, at(time.Second), 1)
		must(t, err)
		counts = append(counts, n)
	}
	if !slices.Equal(counts, []int64{1, 1, 0}) {
		t.Errorf("purges of at most one row: %v, want [1 1 0]", counts)
	}
	for _, k := range []string{r.Keys[2], key("kept_effect", 1, "u1")} {
		if _, ok := entry(t, st, k); !ok {
			t.Errorf("purge of %s's done rows removed %s", effect, k)
		}
	}
	if _, ok := entry(t, st, r.Keys[0]); ok {
		t.Errorf("%s outlived its purge", r.Keys[0])
	}
}

func testPurgeSeen(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	_, err := q.See(ctx, job, []string{"u1", "u2", "u3"}, [][]byte{[]byte("h1"), []byte("h2"), []byte("h3")}, 1, t0)
	must(t, err)
	_, err = q.See(ctx, job, []string{"u4"}, [][]byte{[]byte("h4")}, 1, at(time.Hour))
	must(t, err)
	reserve(t, st, reservation(job, effect, 1, "u1")) // u1 still has a ledger row

	n, err := q.PurgeSeen(ctx, job, at(time.Minute), 1)
	must(t, err)
	m, err := q.PurgeSeen(ctx, job, at(time.Minute), 10)
	must(t, err)
	if n != 1 || m != 1 {
		t.Errorf("PurgeSeen at most 1, then at most 10: %d and %d rows, want 1 and 1 (u2, u3)", n, m)
	}
	seen, err := q.See(ctx, job, []string{"u1", "u2", "u3", "u4"}, [][]byte{[]byte("x"), []byte("x"), []byte("x"), []byte("x")}, 1, at(2*time.Hour))
	must(t, err)
	if len(seen) != 2 || string(seen["u1"]) != "h1" || string(seen["u4"]) != "h4" {
		t.Errorf("keys seen after the purge: %q, want u1 (a ledger row left) and u4 (seen after before)", seen)
	}
}

func testLedgerPages(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	reserve(t, st, reservation(job, effect, 1, "u3", "u1"))
	reserve(t, st, reservation("other_job", "a_effect", 1, "u2"))
	all, err := q.Ledger(ctx)
	must(t, err)
	var keys []string
	for _, e := range all {
		keys = append(keys, e.Key)
	}
	want := []string{"a_effect:v1:u2", key(effect, 1, "u1"), key(effect, 1, "u3")}
	if !slices.Equal(keys, want) {
		t.Errorf("Ledger: %q, want every job's rows in key order %q", keys, want)
	}
	page, err := q.LedgerPage(ctx, "", 2)
	must(t, err)
	next, err := q.LedgerPage(ctx, page[len(page)-1].Key, 2)
	must(t, err)
	if len(page) != 2 || page[0].Key != want[0] || len(next) != 1 || next[0].Key != want[2] {
		t.Errorf("LedgerPage in pages of 2: %+v then %+v", page, next)
	}
}

func testParkedUnits(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	mark := at(-time.Hour)
	fail := func(unit, why string, when time.Time) {
		t.Helper()
		f := idemrt.UnitFailure{Job: job, UnitKey: unit, Payload: []byte(`{"id":"` + unit + `"}`), Hash: []byte("hash of " + unit),
			LastError: why, Mark: &mark, JobVersion: 1}
		must(t, st.InTx(ctx, func(q idemrt.Querier) error { return q.RecordUnitFailure(ctx, f, when) }))
	}
	settle := func(unit string) (string, int32) {
		t.Helper()
		state, attempts, err := q.SettleUnitFailure(ctx, job, unit, 3)
		must(t, err)
		return state, attempts
	}

	if got, err := q.LookupUnitFailures(ctx, job, []string{"u1"}); err != nil || len(got) != 0 {
		t.Errorf("LookupUnitFailures on an empty table: %v, %v", got, err)
	}
	fail("u1", "first", t0)
	state, hash, found, err := q.LookupUnitFailure(ctx, job, "u1")
	must(t, err)
	if !found || state != idem.UnitStateFailing || string(hash) != "hash of u1" {
		t.Errorf("a unit failed once: %s %q found %v, want failing", state, hash, found)
	}
	if s, n := settle("u1"); s != idem.UnitStateFailing || n != 1 {
		t.Errorf("settled after one failure: %s %d, want failing 1", s, n)
	}
	fail("u1", "second", at(time.Minute))
	fail("u1", "third", at(2*time.Minute))
	if s, n := settle("u1"); s != idem.UnitStateParked || n != 3 {
		t.Errorf("settled after three failures of three: %s %d, want parked 3", s, n)
	}
	got, err := q.LookupUnitFailures(ctx, job, []string{"u1", "u2"})
	must(t, err)
	if len(got) != 1 || got["u1"].State != idem.UnitStateParked || string(got["u1"].Hash) != "hash of u1" {
		t.Errorf("LookupUnitFailures(u1, u2): %+v", got)
	}
	units, err := q.UnitFailures(ctx)
	must(t, err)
	if len(units) != 1 || units[0].Key != "u1" || units[0].Job != job || units[0].Attempts != 3 || units[0].LastError != "third" ||
		units[0].State != idem.UnitStateParked || units[0].Mark == nil || !units[0].Mark.Equal(mark) ||
		string(units[0].Payload) != `{"id":"u1"}` || units[0].JobVersion != 1 || !units[0].FirstFailedAt.Equal(t0) {
		t.Errorf("UnitFailures: %+v", units)
	}
	if r, err := q.RetryingUnits(ctx, job, "", 10); err != nil || len(r) != 0 {
		t.Errorf("RetryingUnits with nothing put back: %+v, %v", r, err)
	}

	ok, err := q.RetryUnit(ctx, job, "u1", at(time.Hour))
	must(t, err)
	if missing, err := q.RetryUnit(ctx, job, "nobody", at(time.Hour)); !ok || missing || err != nil {
		t.Errorf("RetryUnit of u1 and of a key never parked: %v %v (%v), want true false", ok, missing, err)
	}
	retrying, err := q.RetryingUnits(ctx, job, "", 10)
	must(t, err)
	if len(retrying) != 1 || retrying[0].UnitKey != "u1" || string(retrying[0].Payload) != `{"id":"u1"}` {
		t.Errorf("RetryingUnits after RetryUnit(u1): %+v", retrying)
	}
	fail("u1", "fourth", at(2*time.Hour))
	if s, n := settle("u1"); s != idem.UnitStateRetry || n != 1 {
		t.Errorf("a unit put back that failed once more: %s %d, want retry 1 (attempts count from 0)", s, n)
	}

	for i := range 3 {
		fail("u2", "again", at(time.Duration(i)*time.Minute))
	}
	settle("u2")
	fail("u3", "once", t0)
	settle("u3")
	page, err := q.ParkedPage(ctx, job, "", 2)
	must(t, err)
	next, err := q.ParkedPage(ctx, job, "u2", 2)
	must(t, err)
	if len(page) != 2 || page[0].Key != "u1" || page[1].Key != "u2" || len(next) != 1 || next[0].Key != "u3" {
		t.Errorf("ParkedPage in pages of 2: %+v then %+v", page, next)
	}
	n, err := q.RetryParkedUnits(ctx, job, at(3*time.Hour))
	must(t, err)
	if n != 1 {
		t.Errorf("RetryParkedUnits: %d rows, want 1 (u2; u1 is put back already, u3 failing)", n)
	}
	if s, _, _, _ := q.LookupUnitFailure(ctx, job, "u2"); s != idem.UnitStateRetry {
		t.Errorf("u2 after RetryParkedUnits: %s, want retry", s)
	}

	must(t, q.ClearUnitFailure(ctx, job, "u1"))
	if _, _, found, err := q.LookupUnitFailure(ctx, job, "u1"); found || err != nil {
		t.Errorf("u1 after ClearUnitFailure: found %v (%v)", found, err)
	}
}

func testRecovery(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	r := reservation(job, effect, 1, "u1", "u2")
	parked, owed := r.Keys[0], r.Keys[1]
	reserve(t, st, r)
	claim(t, st, "A", t0, at(time.Minute), parked)
	release(t, st, idemrt.Release{Key: parked, Owner: "A", LastError: "declined", MaxAttempts: 3, Permanent: true})
	for range 3 {
		must(t, q.RecordUnitFailure(ctx, idemrt.UnitFailure{Job: job, UnitKey: "u1", Payload: []byte("{}"), Hash: []byte("h"), LastError: "bad", JobVersion: 1}, t0))
	}
	if _, _, err := q.SettleUnitFailure(ctx, job, "u1", 3); err != nil {
		t.Fatal(err)
	}
	_, err := q.See(ctx, job, []string{"u1"}, [][]byte{[]byte("h")}, 1, t0)
	must(t, err)

	var byEffect, byUnit, inJob idemrt.Held
	must(t, st.InTx(ctx, func(q idemrt.Querier) (err error) {
		if byEffect, err = q.LockUnderKey(ctx, parked); err != nil {
			return err
		}
		if byUnit, err = q.LockUnderKey(ctx, "u1"); err != nil {
			return err
		}
		inJob, err = q.LockParked(ctx, job)
		return err
	}))
	if len(byEffect.Effects) != 1 || byEffect.Effects[0].Key != parked || byEffect.Effects[0].State != idem.StateParked ||
		byEffect.Effects[0].Job != job || byEffect.Effects[0].Effect != effect || byEffect.Effects[0].Attempts != 1 ||
		len(byEffect.Units) != 0 || len(byEffect.HandedIn) != 0 {
		t.Errorf("LockUnderKey(%s): %+v", parked, byEffect)
	}
	if len(byUnit.Effects) != 0 || len(byUnit.Units) != 1 || byUnit.Units[0] != (idemrt.HeldUnit{Job: job, Key: "u1", State: idem.UnitStateParked, Attempts: 3}) ||
		len(byUnit.HandedIn) != 1 || byUnit.HandedIn[0].Job != job || byUnit.HandedIn[0].Key != "u1" {
		t.Errorf("LockUnderKey(u1): %+v", byUnit)
	}
	if len(inJob.Effects) != 1 || inJob.Effects[0].Key != parked || len(inJob.Units) != 1 || inJob.Units[0].Key != "u1" {
		t.Errorf("LockParked(%s): %+v, want the parked effect and the parked unit", job, inJob)
	}

	ok, err := q.RetryEffect(ctx, parked, at(time.Hour))
	must(t, err)
	again, err := q.RetryEffect(ctx, parked, at(time.Hour))
	must(t, err)
	if !ok || again {
		t.Errorf("RetryEffect of a parked row, then of the same row owed: %v %v, want true false", ok, again)
	}
	if e := mustEntry(t, st, parked); e.State != idem.StatePending || e.Attempts != 0 || e.Permanent || e.ParkedReason != "" || !e.NextAttemptAt.IsZero() || e.LastError != "declined" {
		t.Errorf("row put back: %+v, want pending as reserved, its last error kept", e)
	}

	claim(t, st, "B", at(time.Hour), at(time.Hour+5*time.Minute), owed)
	if gone, err := q.ForgetEffect(ctx, owed, at(time.Hour+time.Minute)); gone || err != nil {
		t.Errorf("ForgetEffect under a live lease: %v (%v), want false", gone, err)
	}
	if gone, err := q.ForgetEffect(ctx, owed, at(time.Hour+6*time.Minute)); !gone || err != nil {
		t.Errorf("ForgetEffect once the lease ended: %v (%v), want true", gone, err)
	}
	if _, ok := entry(t, st, owed); ok {
		t.Error("a forgotten effect is still in the ledger")
	}
	for _, forget := range []func(context.Context, string, string) (bool, error){q.ForgetUnit, q.ForgetHandedIn} {
		first, err := forget(ctx, job, "u1")
		must(t, err)
		second, err := forget(ctx, job, "u1")
		must(t, err)
		if !first || second {
			t.Errorf("forgetting u1 twice: %v %v, want true false", first, second)
		}
	}
	seen, err := q.See(ctx, job, []string{"u1"}, [][]byte{[]byte("new")}, 1, at(2*time.Hour))
	must(t, err)
	if len(seen) != 0 {
		t.Errorf("a forgotten handed-in key is still seen: %q", seen)
	}
}

func testLimits(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	must(t, q.EnsureLimitSlot(ctx, job, effect, -1, t0))
	must(t, q.EnsureLimitSlot(ctx, job, effect, -1, at(time.Hour))) // added once: the first stays
	for slot := range int32(3) {
		must(t, q.EnsureLimitSlot(ctx, job, effect, slot, time.Time{}))
		must(t, q.EnsureLimitSlot(ctx, job, effect, slot, time.Time{}))
	}
	pace, err := q.Pace(ctx, job, effect)
	must(t, err)
	if !pace.Equal(t0) {
		t.Errorf("Pace: %v, want the first pacing row's %v", pace, t0)
	}
	if moved, err := q.MovePace(ctx, job, effect, t0, at(time.Second)); !moved || err != nil {
		t.Errorf("MovePace from the start read: %v (%v), want true", moved, err)
	}
	if moved, err := q.MovePace(ctx, job, effect, t0, at(2*time.Second)); moved || err != nil {
		t.Errorf("MovePace from a start another worker took: %v (%v), want false", moved, err)
	}
	if pace, _ = q.Pace(ctx, job, effect); !pace.Equal(at(time.Second)) {
		t.Errorf("Pace after moving it: %v", pace)
	}

	take := func(owner string, now time.Time) (int32, bool) {
		t.Helper()
		slot, ok, err := q.TakeSlot(ctx, job, effect, 2, owner, now, now.Add(time.Minute))
		must(t, err)
		return slot, ok
	}
	a, okA := take("A", t0)
	b, okB := take("B", t0)
	_, okC := take("C", t0)
	if !okA || !okB || a == b || a < 0 || a > 1 || b < 0 || b > 1 || okC {
		t.Errorf("three takers of two slots: A %d %v, B %d %v, C %v; want A and B in slots 0 and 1, C none", a, okA, b, okB, okC)
	}
	must(t, q.FreeSlot(ctx, job, effect, a, "B")) // not B's
	if _, ok := take("C", t0); ok {
		t.Error("a slot freed by a worker that did not hold it was taken")
	}
	must(t, q.FreeSlot(ctx, job, effect, a, "A"))
	if slot, ok := take("C", at(time.Second)); !ok || slot != a {
		t.Errorf("after A freed slot %d: C took %d %v", a, slot, ok)
	}
	if slot, ok := take("D", at(2*time.Minute)); !ok || slot < 0 || slot > 1 {
		t.Errorf("once the holders' leases ended: D took %d %v, want a slot below 2", slot, ok)
	}
}

// testGate: an effect's gate (idem/idemrt/gate.go) pauses, opens after the
// failures in a row, lets one probe through, and is lifted by hand.
func testGate(t *testing.T, o Opened) {
	ctx, q := ctxOf(t), o.Store.Auto()
	if _, found, err := q.Gate(ctx, job, effect); found || err != nil {
		t.Fatalf("Gate before its row: found %v (%v)", found, err)
	}
	must(t, q.EnsureLimitSlot(ctx, job, effect, -2, time.Time{}))
	gate := func() idemrt.EffectGate {
		t.Helper()
		g, found, err := q.Gate(ctx, job, effect)
		must(t, err)
		if !found {
			t.Fatal("the gate row is gone")
		}
		return g
	}
	if g := gate(); g.State != idemrt.GateClosed || g.Shut(t0) || g.Failures != 0 {
		t.Errorf("a new gate: %+v, want closed", g)
	}
	// A pause, then a shorter one: the later end stays, since the first.
	must(t, q.PauseGate(ctx, job, effect, t0, at(time.Minute), "429 a"))
	must(t, q.PauseGate(ctx, job, effect, at(time.Second), at(30*time.Second), "429 b"))
	if g := gate(); g.State != idemrt.GatePaused || !g.Until.Equal(at(time.Minute)) || !g.Since.Equal(t0) || g.Reason != "429 b" || !g.Shut(at(59*time.Second)) || g.Shut(at(time.Minute)) {
		t.Errorf("paused twice: %+v, want paused since t0 until +1m, the last answer", g)
	}
	if ok, err := q.TakeProbe(ctx, job, effect, "P", at(2*time.Minute), at(3*time.Minute)); ok || err != nil {
		t.Errorf("a probe of a paused, not open, gate: %v (%v)", ok, err)
	}
	// Two failures in a row of three: closed; the third opens it.
	for i, want := range []string{idemrt.GatePaused, idemrt.GatePaused, idemrt.GateOpen} {
		state, until, err := q.FailGate(ctx, job, effect, 3, at(2*time.Minute), at(3*time.Minute), "503")
		must(t, err)
		if state != want || want == idemrt.GateOpen && !until.Equal(at(3*time.Minute)) {
			t.Errorf("failure %d of 3: %s until %v, want %s", i+1, state, until, want)
		}
	}
	if g := gate(); g.Opens != 1 || !g.Since.Equal(at(2*time.Minute)) {
		t.Errorf("opened: %+v, want one opening since +2m", g)
	}
	if ok, _ := q.TakeProbe(ctx, job, effect, "P", at(150*time.Second), at(4*time.Minute)); ok {
		t.Error("a probe taken inside the cool-down")
	}
	okP, err := q.TakeProbe(ctx, job, effect, "P", at(3*time.Minute), at(4*time.Minute))
	must(t, err)
	okQ, err := q.TakeProbe(ctx, job, effect, "Q", at(3*time.Minute), at(4*time.Minute))
	must(t, err)
	if !okP || okQ {
		t.Errorf("two takers of the probe: P %v, Q %v; want P only", okP, okQ)
	}
	if ok, _ := q.ReopenGate(ctx, job, effect, "Q", at(5*time.Minute), "x"); ok {
		t.Error("a probe reopened by a worker that did not hold it")
	}
	if ok, _ := q.ReopenGate(ctx, job, effect, "P", at(5*time.Minute), "503 again"); !ok {
		t.Error("the probe's holder could not reopen the circuit")
	}
	if g := gate(); g.State != idemrt.GateOpen || g.Opens != 2 || !g.Until.Equal(at(5*time.Minute)) {
		t.Errorf("reopened: %+v", g)
	}
	// The probe's worker dies: once its lease ends, another takes it over.
	if ok, _ := q.TakeProbe(ctx, job, effect, "R", at(5*time.Minute), at(6*time.Minute)); !ok {
		t.Error("no probe after the second cool-down")
	}
	if ok, _ := q.TakeProbe(ctx, job, effect, "S", at(6*time.Minute), at(7*time.Minute)); !ok {
		t.Error("a dead probe's lease ended, and no other worker could take the probe")
	}
	if ok, _ := q.CloseGate(ctx, job, effect, "R"); ok {
		t.Error("the circuit closed by a probe taken over")
	}
	if ok, _ := q.CloseGate(ctx, job, effect, "S"); !ok {
		t.Error("the probe's success did not close the circuit")
	}
	if g := gate(); g.State != idemrt.GateClosed || g.Failures != 0 || g.Opens != 0 {
		t.Errorf("closed: %+v", g)
	}
	_, _, err = q.FailGate(ctx, job, effect, 3, at(8*time.Minute), at(9*time.Minute), "503")
	must(t, err)
	must(t, q.ResetGateFailures(ctx, job, effect))
	if g := gate(); g.Failures != 0 {
		t.Errorf("failures after a success: %d", g.Failures)
	}
	must(t, q.PauseGate(ctx, job, effect, at(10*time.Minute), at(time.Hour), "maintenance"))
	if ok, err := q.LiftGate(ctx, job, effect); !ok || err != nil {
		t.Errorf("LiftGate of a paused effect: %v (%v)", ok, err)
	}
	if g := gate(); g.Shut(at(10*time.Minute)) || g.Reason != "maintenance" {
		t.Errorf("lifted: %+v, want closed, the last answer kept", g)
	}
	if ok, _ := q.LiftGate(ctx, job, effect); ok {
		t.Error("LiftGate of a closed gate says it lifted something")
	}
}

func testBacklog(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	counter, ok := st.Auto().(interface {
		Backlog(ctx context.Context, job string) (owedEffects, parkedEffects, parkedUnits int64, err error)
	})
	if !ok {
		t.Fatal("the store's querier counts no backlog")
	}
	r := reservation(job, effect, 1, "u1", "u2", "u3")
	reserve(t, st, r)
	reserve(t, st, reservation("other_job", effect, 1, "x1"))
	claim(t, st, "A", t0, at(time.Minute), r.Keys[0], r.Keys[1])
	complete(t, st, "A", t0, r.Keys[0])
	release(t, st, idemrt.Release{Key: r.Keys[1], Owner: "A", MaxAttempts: 1, LastError: "x"})
	must(t, st.Auto().RecordUnitFailure(ctx, idemrt.UnitFailure{Job: job, UnitKey: "v", Payload: []byte("{}"), Hash: []byte("h"), LastError: "bad"}, t0))
	if _, _, err := st.Auto().SettleUnitFailure(ctx, job, "v", 1); err != nil {
		t.Fatal(err)
	}
	owed, parkedFx, parkedUnits, err := counter.Backlog(ctx, job)
	must(t, err)
	if owed != 1 || parkedFx != 1 || parkedUnits != 1 {
		t.Errorf("Backlog: owed %d, parked effects %d, parked units %d; want 1 1 1", owed, parkedFx, parkedUnits)
	}
}

func testTransactions(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	committed := reservation(job, effect, 1, "committed")
	must(t, st.InTx(ctx, func(q idemrt.Querier) error { return q.Reserve(ctx, committed, t0) }))
	boom := errors.New("boom")
	err := st.InTx(ctx, func(q idemrt.Querier) error {
		if err := q.Reserve(ctx, reservation(job, effect, 1, "also-committed"), t0); err != nil {
			return err
		}
		return q.SaveWatermark(ctx, job, t0, 1, t0)
	})
	must(t, err)
	err = st.InTx(ctx, func(q idemrt.Querier) error {
		if err := q.Reserve(ctx, reservation(job, effect, 1, "rolled-back"), t0); err != nil {
			return err
		}
		if err := q.SaveWatermark(ctx, job, at(time.Hour), 1, t0); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx returned %v, want the function's error", err)
	}
	for k, want := range map[string]bool{committed.Keys[0]: true, key(effect, 1, "also-committed"): true, key(effect, 1, "rolled-back"): false} {
		if _, ok := entry(t, st, k); ok != want {
			t.Errorf("row %s there: %v, want %v", k, ok, want)
		}
	}
	if p, _ := st.Auto().Progress(ctx, job); !p.Watermark.Equal(t0) {
		t.Errorf("watermark after a rolled-back save: %v, want %v", p.Watermark, t0)
	}
}

func testCallerTransaction(t *testing.T, o Opened) {
	st := o.Store
	ctx := ctxOf(t)
	for _, commit := range []bool{true, false} {
		unit := map[bool]string{true: "committed", false: "rolled-back"}[commit]
		q, commitTx, rollbackTx := o.Begin(ctx, t)
		must(t, q.Reserve(ctx, reservation(job, effect, 1, unit), t0))
		if _, ok := entry(t, o.Outside, key(effect, 1, unit)); ok {
			t.Errorf("%s: the caller's uncommitted reservation is visible outside its transaction", unit)
		}
		if commit {
			must(t, commitTx())
		} else {
			must(t, rollbackTx())
		}
		if _, ok := entry(t, st, key(effect, 1, unit)); ok != commit {
			t.Errorf("%s: row there after the caller's transaction ended: %v, want %v", unit, ok, commit)
		}
	}
}

func testDBNow(t *testing.T, o Opened) {
	st := o.Store
	now, err := st.DBNow(ctxOf(t))
	must(t, err)
	if d := time.Since(now); d > time.Minute || d < -time.Minute {
		t.Errorf("DBNow is %v away from this machine's clock", d)
	}
}
