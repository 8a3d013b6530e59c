package storetest

// Progress and handed-in keys: the watermark and cursor a job saves, and
// the keys See records for a job that hands its units in.

import (
	"testing"
	"time"
)

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
