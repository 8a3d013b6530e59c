package crashsim

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The rate family: an effect's rate under two workers at once, each with
// four calls in flight, then the same crashed at hits spread over the
// first phase. Every other family runs without the rate (limits.go): the
// simulation's clock stands still within a phase, and pacing on it would
// only add real waits. Here each start the rate grants is waited for on
// the simulated clock instead (idemtest.WithPaceWait), which moves to it, and
// recorded: an effect's granted starts must all lie at least its spacing
// (per / n) apart, whichever worker took them. A slip in the pacing row's
// compare-and-set lets two workers take the same start; a worker that
// has read the pace waits a moment for another to read it (paceMeet), so
// they race for the same start by design, not by chance.

const famRate = "rate"

type rateFamily[U any] struct {
	baseFamily[U]
	// Under r.mu: the starts the rates granted, by effect; a worker that
	// read the pace, waiting for another; whether two readers met
	// (paceMeet); how many readers waited for another.
	starts     map[string][]time.Time
	paceReader chan struct{}
	paceMet    bool
	paceHolds  int
}

func (*rateFamily[U]) about() familyAbout {
	return familyAbout{name: "rate", long: time.Second, guarantees: []int{2, 3, 5},
		what: "(an effect with a `rate`) two workers at once, four calls in flight each, under the " +
			"effects' rates, each granted start waited for on the simulated clock; two workers that " +
			"have just read the pace are held a moment so they race for the same start: every granted " +
			"start lies at least the rate's spacing from the others; then the same, crashed at hits " +
			"spread over the first phase; the runs after the phases come at least the slowest rate's " +
			"spacing apart (a rate in /h). Every other family runs without the rate, whose waits on a " +
			"clock that stands still within a phase would only be real sleeps"}
}

// plan: (an effect with a rate) clean, then crashed at hits spread over
// the first phase.
func (*rateFamily[U]) plan(d *discovery[U]) []simScenario {
	if !hasRate(d.job) {
		return nil
	}
	plan := []simScenario{newScenario(famRate)}
	for i := 1; i <= 2; i++ {
		sc := at(famRate, i*d.firstPhase/3)
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}

// limit: the spec's rate, kept.
func (*rateFamily[U]) limit(_ *simRun[U], fx *idemrt.Effect[U], spec idemrt.Effect[U]) {
	fx.Rate = spec.Rate
}

// options: four calls at once, each granted start waited for on the
// simulated clock.
func (f *rateFamily[U]) options(r *simRun[U]) []idem.Option {
	return []idem.Option{idem.WithEffectConcurrency(4), idemtest.WithPaceWait(func(ctx context.Context, effect string, start time.Time) error {
		return f.paceWait(ctx, r, effect, start)
	})}
}

// hasRate reports whether some effect of the job has a rate.
func hasRate[U any](job *Job[U]) bool {
	return slices.ContainsFunc(job.Effects, func(fx Effect) bool { return fx.Rate.N > 0 })
}

// paceWait is the rate family's idemtest.WithPaceWait: it records the start
// and moves the simulated clock to it.
func (f *rateFamily[U]) paceWait(ctx context.Context, r *simRun[U], effect string, start time.Time) error {
	r.mu.Lock()
	if f.starts == nil {
		f.starts = map[string][]time.Time{}
	}
	f.starts[effect] = append(f.starts[effect], start)
	if start.After(r.clock) {
		r.clock = start
	}
	r.mu.Unlock()
	return ctx.Err()
}

// checkPace: an effect's granted starts lie at least its spacing apart.
func (f *rateFamily[U]) checkPace(r *simRun[U]) {
	r.mu.Lock()
	starts := map[string][]time.Time{}
	for effect, ts := range f.starts {
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
	met := f.paceMet
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
func (f *rateFamily[U]) paceMeet(r *simRun[U]) {
	r.mu.Lock()
	if other := f.paceReader; other != nil {
		f.paceReader = nil
		f.paceMet = true
		r.mu.Unlock()
		close(other)
		return
	}
	if f.paceMet || f.paceHolds >= simPaceHolds {
		r.mu.Unlock()
		return
	}
	f.paceHolds++
	mine := make(chan struct{})
	f.paceReader = mine
	r.mu.Unlock()
	select {
	case <-mine:
	case <-time.After(simPaceMeet):
		r.mu.Lock()
		if f.paceReader == mine {
			f.paceReader = nil
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

// beforeCrash: a worker that has just read the pace waits for another.
func (f *rateFamily[U]) beforeCrash(_ context.Context, r *simRun[U], _ *simInc, h simHit) error {
	if h.p == pointSQLAfter && strings.HasSuffix(h.detail, simPaceRead) {
		f.paceMeet(r)
	}
	return nil
}

func (*rateFamily[U]) overlapping(simScenario) bool { return true }

// playPhase: two workers on the phase at once.
func (*rateFamily[U]) playPhase(r *simRun[U], phase int) { r.concurrently(phase) }

func (*rateFamily[U]) convergenceRuns(r *simRun[U]) int {
	r.prov.mu.Lock()
	calls := len(r.prov.order)
	r.prov.mu.Unlock()
	return r.rateConvergenceRuns(calls)
}

func (f *rateFamily[U]) checkEnd(_ context.Context, r *simRun[U], _ simExpect[U]) { f.checkPace(r) }

// convergenceStep: at least the slowest rate's spacing, so that each run
// after the phases finds a start of every rated effect due (a rate in /h
// spaces its starts further apart than a lease: a step of a lease found
// none, and the effects never converged).
func (*rateFamily[U]) convergenceStep(r *simRun[U], step time.Duration) time.Duration {
	for _, fx := range r.job.Effects {
		if fx.Rate.N > 0 {
			step = max(step, fx.Rate.Per/time.Duration(fx.Rate.N))
		}
	}
	return step
}
