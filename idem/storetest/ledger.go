package storetest

// The effect ledger: reservations (plain and leased), the version lookup,
// claims and completion (also in one statement, where the store has it),
// release after a failure, and the pages of owed and of all rows.

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

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
