package crashsim

import (
	"context"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

type failkFamily[U any] struct {
	baseFamily[U]
	backoffs map[int]bool // the attempt counts whose wait was checked
}

func (*failkFamily[U]) about() familyAbout {
	return familyAbout{name: "failk", guarantees: []int{8},
		what: "an effect fails `max_attempts - 1` times and ends done; `max_attempts` times and ends " +
			"parked; after each failure the wait it is given lies within [½, 1] of its step (the spec's " +
			"`retry` initial, doubling with each failure up to its max)"}
}

// plan: each effect's first call fails max_attempts-1 times (it ends
// done), and max_attempts times (parked).
func (*failkFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		c := d.firstCallOf(fx.Name)
		if c < 0 {
			continue
		}
		for _, times := range []int{fx.MaxAttempts - 1, fx.MaxAttempts} {
			if times < 1 {
				continue
			}
			sc := newScenario("failk")
			sc.call, sc.times = c, times
			plan = append(plan, sc)
		}
	}
	return plan
}

func (*failkFamily[U]) sample(all []simScenario) []simScenario { return all }

// setup: the scenario's call's key fails sc.times times.
func (*failkFamily[U]) setup(r *simRun[U]) {
	r.prov.failCall, r.prov.failTimes = r.sc.call, r.sc.times
}

func (*failkFamily[U]) exactCalls(simScenario) bool { return true }

// convergenceStep: each run must find the failing effect past its
// backoff, which grows with every attempt up to the effect's retry max.
func (*failkFamily[U]) convergenceStep(r *simRun[U], step time.Duration) time.Duration {
	for _, fx := range r.job.Effects {
		step = max(step, r.job.Lease+time.Minute+fx.Retry.Longest())
	}
	return step
}

func (*failkFamily[U]) convergenceRuns(r *simRun[U]) int {
	n := 0
	for _, fx := range r.job.Effects {
		n = max(n, fx.MaxAttempts+2)
	}
	return n
}

func (*failkFamily[U]) runsAll() bool { return true }

// afterCleanRun checks the failing key's wait (checkBackoff).
func (f *failkFamily[U]) afterCleanRun(ctx context.Context, r *simRun[U]) {
	if f.backoffs == nil {
		f.backoffs = map[int]bool{}
	}
	r.checkBackoff(ctx, f.backoffs)
}

// expect: the failing key's calls; max_attempts failures park it.
func (*failkFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	k := r.callKey(r.sc.call)
	if e.calls == nil || k == "" {
		return
	}
	max := r.effectOf(k).MaxAttempts
	if r.sc.times >= max {
		e.calls[k] = max
		e.parked[k] = true
		delete(e.must, k)
	} else {
		e.calls[k] = r.sc.times + 1
	}
}

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
