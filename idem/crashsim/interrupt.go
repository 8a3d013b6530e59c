package crashsim

// The families that interrupt a run from outside the job: a cancelled
// context (cancel), a worker whose clock disagrees with the database's
// (skew), and a purge past retention while effects are owed or parked
// (purge-pending). families.go's header table says what each proves.

import (
	"context"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// simInterrupts is the state these families keep in a simRun; r.mu guards it.
type simInterrupts struct {
	cancels   map[int]context.CancelFunc // cancel: each incarnation's run context
	cancelled map[int]bool               // cancel: the incarnations whose run was cancelled
	skew      time.Duration              // skew: the next incarnation's job clock minus the database's
	purged    bool                       // purge-pending parked: the purge before phase 1 is done
}

func (r *simRun[U]) initInterrupts() {
	r.intr.cancels, r.intr.cancelled = map[int]context.CancelFunc{}, map[int]bool{}
	if r.sc.family == "purge-pending" && r.sc.call >= 0 {
		r.prov.permanentCall = r.sc.call // the parked variant: that call is declined for good
	}
}

// planCancel: the run's context is cancelled at every named point of the
// first phase, just before each of its commits, and at every fourth
// effect point after it (the later phases repeat the first's shapes: a
// sample keeps the family's cost near a crash family's). Effect points
// come first, for the -short sample.
func planCancel[U any](d *discovery[U]) []simScenario {
	effectPoint := func(p idemrt.CrashPoint) bool {
		return p == idemrt.PointEffectClaimed || p == idemrt.PointEffectBeforeCall || p == idemrt.PointEffectAfterCall || p == idemrt.PointEffectRecorded
	}
	var effects, others []simScenario
	for k, h := range d.trace {
		switch {
		case effectPoint(h.p) && (k < d.firstPhase || k%4 == 0):
			effects = append(effects, at("cancel", k))
		case k >= d.firstPhase:
		case h.p != pointSQLBefore && h.p != pointSQLAfter, h.p == pointSQLBefore && h.detail == "COMMIT":
			others = append(others, at("cancel", k))
		}
	}
	return append(effects, others...)
}

// planSkew: worker A holds a fresh claim of each effect's first call;
// worker B's clock is a lease and a minute ahead of the database's (the
// lease is live: B must leave it) or, once the lease has expired on the
// database's clock, as far behind (B must take it).
func planSkew[U any](d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		k := slices.IndexFunc(d.trace[:d.firstPhase], func(h simHit) bool {
			return h.p == idemrt.PointEffectClaimed && d.effectOf[h.detail] == fx.Name
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

// planPurgePending: everything past retention is purged while the first
// call of each effect is parked (before phase 1), and at every point of
// phase 0 where effects are reserved but not yet recorded.
func planPurgePending[U any](d *discovery[U]) []simScenario {
	if !slices.ContainsFunc(d.job.Effects, func(fx Effect) bool { return fx.Retention > 0 }) {
		return nil
	}
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if c := d.firstCallOf(fx.Name); c >= 0 {
			sc := newScenario("purge-pending")
			sc.call, sc.variant = c, "parked"
			plan = append(plan, sc)
		}
	}
	for k, h := range d.trace[:d.firstPhase] {
		switch h.p {
		case idemrt.PointUnitAfterCommit, idemrt.PointEffectClaimed, idemrt.PointEffectAfterCall:
			if !simInTx(d.job, h) {
				plan = append(plan, at("purge-pending", k))
			}
		}
	}
	return plan
}

// cancelable gives a cancel scenario's incarnation a run context the
// scenario can cancel.
func (r *simRun[U]) cancelable(ctx context.Context, inc *simInc) context.Context {
	if r.sc.family != "cancel" {
		return ctx
	}
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	r.intr.cancels[inc.id] = cancel
	r.mu.Unlock()
	return ctx
}

// interrupt is what these families do at hit n, after the invariants at
// every point are checked: cancel the run's context (cancel), or purge
// past retention once phase 1 begins (purge-pending, parked).
func (r *simRun[U]) interrupt(ctx context.Context, inc *simInc, n int, h simHit) {
	switch r.sc.family {
	case "cancel":
		if h.p == idemrt.PointEffectBeforeCall && ctx.Err() != nil {
			r.violate("cancel: at %s the provider is about to be called for %s, though the run was cancelled before", h.p, h.detail)
		}
		if n != r.sc.at {
			return
		}
		r.mu.Lock()
		cancel := r.intr.cancels[inc.id]
		r.intr.cancelled[inc.id] = true
		r.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	case "purge-pending":
		r.mu.Lock()
		purge := r.sc.variant == "parked" && !r.intr.purged && !r.clock.Before(phaseClock(1))
		r.intr.purged = r.intr.purged || purge
		r.mu.Unlock()
		if purge {
			r.purgeNow(ctx, "with an effect parked, before the second phase", true)
		}
	}
}

// cancelled reports whether inc's run was cancelled; then it checks what
// the run left: every call the provider applied is recorded done (a call
// under way when the cancel came finishes and is recorded).
func (r *simRun[U]) cancelled(inc *simInc) bool {
	r.mu.Lock()
	c := r.intr.cancelled[inc.id]
	r.mu.Unlock()
	if !c {
		return false
	}
	entries, err := r.db.observer().Auto().Ledger(context.Background())
	if err != nil {
		r.violate("cancel: read ledger: %v", err)
		return true
	}
	r.prov.mu.Lock()
	defer r.prov.mu.Unlock()
	for k := range r.prov.applied {
		i := slices.IndexFunc(entries, func(e idem.LedgerEntry) bool { return e.Key == k })
		switch {
		case i < 0:
			r.violate("cancel: after the cancelled run, effect %s was applied by the provider but has no ledger row", k)
		case entries[i].State != idem.StateDone:
			r.violate("cancel: after the cancelled run, effect %s was applied by the provider but its ledger row is %s, not done: a call under way at the cancel was not recorded", k, entries[i].State)
		}
	}
	return true
}

// skewed is the job clock of an incarnation started now: the database's
// (WithLeaseClock) moved by the skew family's skew.
func (r *simRun[U]) skewed() []idem.Option {
	r.mu.Lock()
	skew := r.intr.skew
	r.mu.Unlock()
	if skew == 0 {
		return nil
	}
	return []idem.Option{idem.WithClock(func() time.Time { return r.now().Add(skew) })}
}

// skewInterlude: worker A is paused just after claiming an effect; worker
// B, whose clock is off by a lease and a minute, meets the lease. Ahead,
// the lease is still live on the database's clock: B must not call. Behind,
// the database's clock has passed the lease: B must take the effect over
// (and A, resumed, must not call: its fence reads the database's clock).
func (r *simRun[U]) skewInterlude(phase int, a *simTask) {
	r.mu.Lock()
	key := r.trace[r.sc.at].detail
	r.mu.Unlock()
	skew, work := r.job.Lease+time.Minute, workPhase
	if r.sc.variant == "behind" {
		r.setClock(r.now().Add(skew))
		skew, work = -skew, workDrain
	}
	r.mu.Lock()
	r.intr.skew = skew
	r.mu.Unlock()
	b := r.start(phase, work, nil)
	r.mu.Lock()
	r.intr.skew = 0
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

// expectInterrupts adjusts the oracle's expectation for purge-pending: the
// parked variant's effect ends parked after one call. Past retention a key
// is new again: a handed-in unit delivered again after its done row was
// purged, or an effect decided on every write (not only on insert), calls
// the provider again with the same key, so calls are exact only for a
// source's units whose effects are decided on insert.
func (r *simRun[U]) expectInterrupts(e *simExpect[U]) {
	if r.sc.family != "purge-pending" {
		return
	}
	r.prov.mu.Lock()
	if r.sc.call >= 0 && r.sc.call < len(r.prov.order) {
		k := r.prov.order[r.sc.call]
		e.parked[k] = true
		delete(e.must, k)
		if e.calls != nil {
			e.calls[k] = 1
		}
	}
	r.prov.mu.Unlock()
	if r.job.Source == SourceNoneName || slices.ContainsFunc(r.job.Effects, func(fx Effect) bool { return fx.When != idemrt.WhenInserted }) {
		e.calls = nil
	}
}

// checkInterrupts: after a purge past retention, a handed-in key delivered
// again with a field changed is still a mismatch (guarantee 7) when its
// effect was parked meanwhile (its parked row keeps the key known), and
// when its insert_once row is still there though its records are gone (an
// effect never acts on data the destination does not hold).
func (r *simRun[U]) checkInterrupts(ctx context.Context, exp simExpect[U]) {
	if r.sc.family != "purge-pending" || r.job.Source != SourceNoneName {
		return
	}
	if r.sc.variant == "parked" || r.job.InsertOnce && r.job.HasDest {
		r.checkMismatch(ctx, exp)
	}
	if r.sc.variant == "parked" || !r.job.InsertOnce || !r.job.HasDest {
		return
	}
	// The same key unchanged is not a mismatch: the row holds its data.
	verbs, closeInc := r.aux(r.now)
	defer closeInc()
	orig := r.phases[0][0]
	if rep, _ := verbs.Process(ctx, orig); rep.Mismatched != 0 {
		r.violate("purge-pending: %s redelivered unchanged after its records were purged was reported as a mismatch, though its row holds its data: %s", r.job.keyOf(orig), rep)
	}
}
