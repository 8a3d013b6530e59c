package crashsim

import (
	"context"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Backoff length (the failk family): after each run in which the failing
// key's call failed and its row waits for the next attempt, the wait it
// was given must lie within [½, 1] of its step: the spec's retry initial
// after the first failure, doubling with each one up to its max (the
// runtime's default retry when the spec sets none). Only RetryAfter's
// named time was checked before; a jitter that waits far less than the
// backoff, or a doubling that stops early, passed.

// simBackoffSlack absorbs the databases' time precision (SQLite keeps
// milliseconds).
const simBackoffSlack = time.Millisecond

// checkBackoff reads the failing key's row after a run; checked holds
// the attempt counts already checked.
func (r *simRun[U]) checkBackoff(ctx context.Context, checked map[int]bool) {
	r.prov.mu.Lock()
	key := ""
	if r.sc.call >= 0 && r.sc.call < len(r.prov.order) {
		key = r.prov.order[r.sc.call]
	}
	r.prov.mu.Unlock()
	if key == "" {
		return
	}
	rows, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("failk: read the ledger: %v", err)
		return
	}
	i := slices.IndexFunc(rows, func(e idem.LedgerEntry) bool { return e.Key == key })
	if i < 0 {
		return
	}
	row := rows[i]
	if row.State != idem.StatePending || row.NextAttemptAt.IsZero() || row.Attempts < 1 || checked[row.Attempts] {
		return
	}
	checked[row.Attempts] = true
	fx := r.effectOf(key)
	initial, most := specRetry(fx.Retry)
	step := backoffStep(initial, most, row.Attempts)
	// The run's clock stood still: the release read it as r.now().
	wait := row.NextAttemptAt.Sub(r.now())
	if wait < step/2-simBackoffSlack || wait > step+simBackoffSlack {
		r.violate("failk: %s waits %s after %d failed attempts; its backoff step is %s (retry %s..%s), so the wait must lie in [%s, %s]",
			key, wait, row.Attempts, step, initial, most, step/2, step)
	}
}

// specRetry is the spec's retry, or the runtime's default retry where the
// spec sets none.
func specRetry(b idemrt.Backoff) (initial, most time.Duration) {
	initial, most = b.Initial, b.Max
	if initial <= 0 {
		initial = idemrt.DefaultRetry.Initial
	}
	if most <= 0 {
		most = max(idemrt.DefaultRetry.Max, initial)
	}
	return initial, most
}

// backoffStep is the step after attempts failures, worked out here from
// the spec's words, not the runtime's code: initial, doubled with each
// failure after the first, at most most.
func backoffStep(initial, most time.Duration, attempts int) time.Duration {
	step := initial
	for range attempts - 1 {
		if step >= most {
			break
		}
		step *= 2
	}
	return min(step, most)
}
