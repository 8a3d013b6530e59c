package storetest

// Retention: purging done ledger rows and handed-in key records past
// their retention.

import (
	"slices"
	"testing"
	"time"
)

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
