package storetest

// Parked units and effects: recording and settling a unit's failures,
// recovery by a person, and the backlog count of what is owed and parked.

import (
	"context"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

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
