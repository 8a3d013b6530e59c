package storetest

// Transactions and the clock: the store's own InTx, a caller's transaction
// (Opened.Begin), and the database's clock.

import (
	"errors"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

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
