package crashsim

import (
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type skewFamily[U any] struct {
	baseFamily[U]
	skew time.Duration // under r.mu: the next incarnation's job clock minus the database's
}

func (*skewFamily[U]) about() familyAbout {
	return familyAbout{name: "skew", guarantees: []int{2, 5},
		what: "a worker whose clock is a lease ahead of the database's meets another worker's fresh claim " +
			"and must leave it; one as far behind, once the lease has expired on the database's clock, " +
			"must take it over"}
}

func (*skewFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 2) }

// plan: worker A holds a fresh claim of each effect's first call;
// worker B's clock is a lease and a minute ahead of the database's (the
// lease is live: B must leave it) or, once the lease has expired on the
// database's clock, as far behind (B must take it).
func (*skewFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		k := slices.IndexFunc(d.trace[:d.firstPhase], func(h simHit) bool {
			return h.p == idemtest.PointEffectClaimed && d.effectOf[h.detail] == fx.Name
		})
		if k >= 0 {
			for _, v := range []string{"ahead", "behind"} {
				sc := at("skew", k)
				sc.variant = v
				plan = append(plan, sc)
			}
		}
	}
	return plan
}

func (*skewFamily[U]) exactCalls(simScenario) bool { return true }

// options: the job clock of an incarnation started now, the database's
// (idemtest.WithLeaseClock) moved by the skew.
func (f *skewFamily[U]) options(r *simRun[U]) []idem.Option {
	r.mu.Lock()
	skew := f.skew
	r.mu.Unlock()
	if skew == 0 {
		return nil
	}
	return []idem.Option{idem.WithClock(func() time.Time { return r.now().Add(skew) })}
}

func (f *skewFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{pauseAt: r.atScenarioHit, interlude: func(phase int, a *simTask) { f.interlude(r, phase, a) }})
}

// interlude: worker A is paused just after claiming an effect; worker
// B, whose clock is off by a lease and a minute, meets the lease. Ahead,
// the lease is still live on the database's clock: B must not call. Behind,
// the database's clock has passed the lease: B must take the effect over
// (and A, resumed, must not call: its fence reads the database's clock).
func (f *skewFamily[U]) interlude(r *simRun[U], phase int, a *simTask) {
	r.mu.Lock()
	key := r.trace[r.sc.at].detail
	r.mu.Unlock()
	skew, work := r.job.Lease+time.Minute, workPhase
	if r.sc.variant == "behind" {
		r.setClock(r.now().Add(skew))
		skew, work = -skew, workDrain
	}
	r.mu.Lock()
	f.skew = skew
	r.mu.Unlock()
	b := r.start(phase, work, nil)
	r.mu.Lock()
	f.skew = 0
	r.mu.Unlock()
	b.wait()
	r.prov.mu.Lock()
	calls := r.prov.calls[key]
	r.prov.mu.Unlock()
	switch {
	case skew > 0 && calls != 0:
		r.violate("skew: a worker whose clock is %s ahead of the database's called %s under another worker's live lease", skew, key)
	case skew < 0 && calls == 0:
		r.violate("skew: a worker whose clock is %s behind the database's left %s, whose lease had expired on the database's clock", -skew, key)
	}
	a.finish()
}
