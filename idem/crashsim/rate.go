package crashsim

import (
	"context"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// The rate family: an effect's rate under two workers at once, each with
// four calls in flight, then the same crashed at hits spread over the
// first phase. Every other family runs without the rate (limits.go): the
// simulation's clock stands still within a phase, and pacing on it would
// only add real waits. Here each start the rate grants is waited for on
// the simulated clock instead (idemrt.WithPaceWait), which moves to it, and
// recorded: an effect's granted starts must all lie at least its spacing
// (per / n) apart, whichever worker took them. A slip in the pacing row's
// compare-and-set lets two workers take the same start; a worker that
// has read the pace waits a moment for another to read it (paceMeet), so
// they race for the same start by design, not by chance.

const famRate = "rate"

// hasRate reports whether some effect of the job has a rate.
func hasRate[U any](job *Job[U]) bool {
	return slices.ContainsFunc(job.Effects, func(fx Effect) bool { return fx.Rate.N > 0 })
}

// paceWait is the rate family's idemrt.WithPaceWait: it records the start
// and moves the simulated clock to it.
func (r *simRun[U]) paceWait(ctx context.Context, effect string, start time.Time) error {
	r.mu.Lock()
	if r.starts == nil {
		r.starts = map[string][]time.Time{}
	}
	r.starts[effect] = append(r.starts[effect], start)
	if start.After(r.clock) {
		r.clock = start
	}
	r.mu.Unlock()
	return ctx.Err()
}

// checkPace: an effect's granted starts lie at least its spacing apart.
func (r *simRun[U]) checkPace() {
	r.mu.Lock()
	starts := map[string][]time.Time{}
	for effect, ts := range r.starts {
		starts[effect] = slices.Clone(ts)
	}
	r.mu.Unlock()
	for _, fx := range r.job.Effects {
		if fx.Rate.N <= 0 {
			continue
		}
		spacing := fx.Rate.Per / time.Duration(fx.Rate.N)
		ts := starts[fx.Name]
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ts); i++ {
			if gap := ts[i].Sub(ts[i-1]); gap < spacing {
				r.violate("rate: effect %s granted starts %s and %s, %s apart; its rate %d/%s spaces them %s apart",
					fx.Name, ts[i-1].Format(time.RFC3339Nano), ts[i].Format(time.RFC3339Nano), gap, fx.Rate.N, fx.Rate.Per, spacing)
				break
			}
		}
		if len(ts) == 0 {
			r.violate("rate: effect %s has a rate, but no start was granted", fx.Name)
		}
	}
	// Under a concurrency of 1 the fleet's one call slot keeps two
	// readers of the pace apart: the race needs room for two calls.
	racy := slices.ContainsFunc(r.job.Effects, func(fx Effect) bool { return fx.Rate.N > 0 && fx.Concurrency != 1 })
	r.mu.Lock()
	met := r.paceMet
	r.mu.Unlock()
	if r.sc.at < 0 && racy && !met {
		r.violate("rate: no two readers of the pace met (paceMeet): the race the compare-and-set decides was never run")
	}
}

// simPaceRead ends the detail the SQL hook gives the pacing row's read
// (the stores' Pace query; classify keeps a statement's first three words). The hook
// looked for the query's name, which classify strips with its comment,
// so no two readers were ever held to meet: on PostgreSQL they raced by
// themselves, on SQLite seldom, and the planted bug passed CI's run.
const simPaceRead = "SELECT held_until FROM"

// simPaceMeet is how long a worker that has just read an effect's pace
// waits for another to read it too, and simPaceHolds how many readers of
// a scenario wait so, until two have met: one meeting is a race for the
// same start, which only the compare-and-set decides. The wait is long
// enough for a loaded machine (20 ms let the planted bug pass CI's), and
// ends as soon as a second reader comes, which with two workers of four
// calls each is at once.
const (
	simPaceMeet  = 500 * time.Millisecond
	simPaceHolds = 4
)

// paceMeet holds a worker that has just read an effect's pacing row (the
// SQL hook after the read) until another reads one too, or simPaceMeet
// passes, so that two workers move the pace from the same reading: only
// the pacing row's compare-and-set then keeps their starts apart. Once two
// have met, or simPaceHolds readers have waited, readers go on at once.
func (r *simRun[U]) paceMeet() {
	r.mu.Lock()
	if other := r.paceReader; other != nil {
		r.paceReader = nil
		r.paceMet = true
		r.mu.Unlock()
		close(other)
		return
	}
	if r.paceMet || r.paceHolds >= simPaceHolds {
		r.mu.Unlock()
		return
	}
	r.paceHolds++
	mine := make(chan struct{})
	r.paceReader = mine
	r.mu.Unlock()
	select {
	case <-mine:
	case <-time.After(simPaceMeet):
		r.mu.Lock()
		if r.paceReader == mine {
			r.paceReader = nil
		}
		r.mu.Unlock()
	}
}

// rateConvergenceRuns is how many clean runs the rate family may need: a
// claim's calls must start within the first half of its lease, so a slow
// rate spreads the fixture's calls over several runs.
func (r *simRun[U]) rateConvergenceRuns(calls int) int {
	n := 3
	for _, fx := range r.job.Effects {
		if fx.Rate.N <= 0 || fx.Lease <= 0 {
			continue
		}
		spacing := fx.Rate.Per / time.Duration(fx.Rate.N)
		perRun := max(int((fx.Lease/2)/max(spacing, time.Nanosecond)), 1)
		n = max(n, 3+calls/perRun)
	}
	return n
}

// rateOptions are the rate family's job options.
func (r *simRun[U]) rateOptions() []idem.Option {
	return []idem.Option{idem.WithEffectConcurrency(4), idemrt.WithPaceWait(r.paceWait)}
}
