package idemrt

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestPurgePause(t *testing.T) {
	for _, c := range []struct {
		took  time.Duration
		share float64
		want  time.Duration
	}{
		{100 * time.Millisecond, 0.25, 300 * time.Millisecond},
		{100 * time.Millisecond, 0.5, 100 * time.Millisecond},
		{100 * time.Millisecond, 1, 0},
	} {
		if got := purgePause(c.took, c.share); got != c.want {
			t.Errorf("purgePause(%v, %v) = %v, want %v", c.took, c.share, got, c.want)
		}
	}
	var o options
	for _, share := range []float64{0, -1, 2} {
		WithPurgeShare(share)(&o)
		if o.purgeShare != 1 {
			t.Errorf("WithPurgeShare(%v): share %v, want 1", share, o.purgeShare)
		}
	}
}

// TestPurgeInBatchesPaces: full batches are followed by a pause as long as
// the share asks (here as long as the batch), the last short batch by none,
// and a cancel during a pause ends the purge at once with what it deleted.
func TestPurgeInBatchesPaces(t *testing.T) {
	const took = 20 * time.Millisecond
	calls := 0
	batch := func(limit int32) (int64, error) {
		calls++
		time.Sleep(took)
		if calls < 3 {
			return int64(limit), nil
		}
		return 1, nil
	}
	start := time.Now()
	n, err := purgeInBatches(t.Context(), 10, 0.5, batch)
	elapsed := time.Since(start)
	if err != nil || n != 21 || calls != 3 {
		t.Fatalf("purgeInBatches = %d, %v after %d calls; want 21 rows in 3", n, err, calls)
	}
	// Three batches and two pauses of at least took each.
	if elapsed < 5*took {
		t.Errorf("took %v for 3 batches of %v at share 0.5: the pauses are missing", elapsed, took)
	}

	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	slow := func(limit int32) (int64, error) {
		calls++
		time.AfterFunc(took, cancel) // during the pause that follows
		time.Sleep(took)
		return int64(limit), nil
	}
	start = time.Now()
	n, err = purgeInBatches(ctx, 10, 0.01, slow) // a pause of 99 × took
	if !errors.Is(err, context.Canceled) || n != 10 || calls != 1 {
		t.Errorf("cancelled during a pause: %d rows, %v after %d calls; want 10 rows, context.Canceled, 1 call", n, err, calls)
	}
	if elapsed := time.Since(start); elapsed > 40*took {
		t.Errorf("cancel during the pause took %v to end the purge", elapsed)
	}
}
