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
	// due is when the failing key's next call is due at the latest (the
	// clock of the next clean run; zero: no wait measured), and calls the
	// calls of it made before that run.
	due   time.Time
	calls int
	pairs int // the failing key's calls whose next call was judged
}

func (*failkFamily[U]) about() familyAbout {
	return familyAbout{name: "failk", guarantees: []int{8},
		what: "an effect fails `max_attempts - 1` times and ends done; `max_attempts` times and ends " +
			"parked; after each failure the wait it is given lies within [½, 1] of its step (the spec's " +
			"`retry` initial, doubling with each failure up to its max), the first failure's too; on " +
			"the simulated clock, a run just before half the step calls nothing, and a run just after " +
			"the whole step calls the key again"}
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

// convergenceStep: a run whose clock beforeCleanRun set to the failing
// key's latest due time runs then; any other must find the failing effect
// past its backoff, which grows with every attempt up to the effect's
// retry max.
func (f *failkFamily[U]) convergenceStep(r *simRun[U], step time.Duration) time.Duration {
	if !f.due.IsZero() {
		return 0
	}
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

// beforePhase checks the wait the failing key was given in the phase
// before (its first failure's is met nowhere else).
func (f *failkFamily[U]) beforePhase(r *simRun[U], phase int) {
	if phase > 0 {
		f.checkWait(r)
	}
}

// beforeCleanRun measures the failing key's wait on the simulated clock
// while its row waits for its next attempt: a run just before the least
// wait its step allows (half of it) must not call it (checkRetryCalls
// judges every call's time), and the run that follows, just after the
// whole step, must.
func (f *failkFamily[U]) beforeCleanRun(r *simRun[U]) {
	f.due = time.Time{}
	key, row, last, ok := r.failingRow(context.Background())
	if !ok {
		return
	}
	initial, most := specRetry(r.effectOf(key).Retry)
	step := backoffStep(initial, most, row.Attempts)
	if early := last.Add(step/2 - simBackoffProbe); early.After(r.now()) {
		r.setClock(early)
		r.cleanRun(len(r.phases) - 1)
	}
	f.due = last.Add(step + simBackoffProbe)
	if f.due.After(r.now()) {
		r.setClock(f.due)
	}
	r.prov.mu.Lock()
	f.calls = len(r.prov.callsAt[key])
	r.prov.mu.Unlock()
}

// afterCleanRun checks the failing key's wait (checkBackoff), and that a
// run past its whole step called it.
func (f *failkFamily[U]) afterCleanRun(_ context.Context, r *simRun[U]) {
	if !f.due.IsZero() {
		key := r.callKey(r.sc.call)
		r.prov.mu.Lock()
		calls := len(r.prov.callsAt[key])
		r.prov.mu.Unlock()
		if calls == f.calls {
			r.violate("failk: %s was not called again by a run at %s, past the whole backoff step after its failure: its wait is longer than its retry allows",
				key, f.due.Format(time.RFC3339Nano))
		}
	}
	f.checkWait(r)
}

// checkWait checks the failing key's wait as its row holds it
// (checkBackoff), and each call's time (checkRetryCalls).
func (f *failkFamily[U]) checkWait(r *simRun[U]) {
	if f.backoffs == nil {
		f.backoffs = map[int]bool{}
	}
	r.checkBackoff(context.Background(), f.backoffs)
	r.checkRetryCalls(&f.pairs)
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
// milliseconds); simBackoffProbe is how far before half the step, and
// after the whole step, the runs that measure a wait run.
const (
	simBackoffSlack = time.Millisecond
	simBackoffProbe = 5 * time.Millisecond
)

// failingRow is the failing key's ledger row while it waits for its next
// attempt, and the time of its last call on the simulated clock (the
// release read the clock then: it stands still within a run).
func (r *simRun[U]) failingRow(ctx context.Context) (key string, row idem.LedgerEntry, last time.Time, ok bool) {
	r.prov.mu.Lock()
	if r.sc.call >= 0 && r.sc.call < len(r.prov.order) {
		key = r.prov.order[r.sc.call]
	}
	if calls := r.prov.callsAt[key]; len(calls) > 0 {
		last = calls[len(calls)-1]
	}
	r.prov.mu.Unlock()
	if key == "" || last.IsZero() {
		return "", row, last, false
	}
	rows, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("failk: read the ledger: %v", err)
		return "", row, last, false
	}
	i := slices.IndexFunc(rows, func(e idem.LedgerEntry) bool { return e.Key == key })
	if i < 0 {
		return "", row, last, false
	}
	row = rows[i]
	return key, row, last, row.State == idem.StatePending && !row.NextAttemptAt.IsZero() && row.Attempts >= 1
}

// checkBackoff reads the failing key's row; checked holds the attempt
// counts already checked.
func (r *simRun[U]) checkBackoff(ctx context.Context, checked map[int]bool) {
	key, row, last, ok := r.failingRow(ctx)
	if !ok || checked[row.Attempts] {
		return
	}
	checked[row.Attempts] = true
	fx := r.effectOf(key)
	initial, most := specRetry(fx.Retry)
	step := backoffStep(initial, most, row.Attempts)
	wait := row.NextAttemptAt.Sub(last)
	if wait < step/2-simBackoffSlack || wait > step+simBackoffSlack {
		r.violate("failk: %s waits %s after %d failed attempts; its backoff step is %s (retry %s..%s), so the wait must lie in [%s, %s]",
			key, wait, row.Attempts, step, initial, most, step/2, step)
	}
}

// checkRetryCalls measures, on the simulated clock, the time from each
// failed call of the failing key to its next call: at least half the
// step its failures had reached (the spec's retry); pairs holds how many
// were judged.
func (r *simRun[U]) checkRetryCalls(pairs *int) {
	key := r.callKey(r.sc.call)
	r.prov.mu.Lock()
	calls := slices.Clone(r.prov.callsAt[key])
	r.prov.mu.Unlock()
	if key == "" {
		return
	}
	initial, most := specRetry(r.effectOf(key).Retry)
	for ; *pairs+1 < len(calls) && *pairs < r.sc.times; *pairs++ {
		i := *pairs
		step := backoffStep(initial, most, i+1)
		if gap := calls[i+1].Sub(calls[i]); gap < step/2-simBackoffSlack {
			r.violate("failk: %s was called again %s after its failed attempt %d (at %s); its backoff step is %s (retry %s..%s): no retry may come before %s",
				key, gap, i+1, calls[i].Format(time.RFC3339Nano), step, initial, most, step/2)
		}
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
