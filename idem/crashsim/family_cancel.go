package crashsim

import (
	"context"
	"slices"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type cancelFamily[U any] struct {
	baseFamily[U]
	// Under r.mu: each incarnation's run context's cancel, the
	// incarnations whose run was cancelled, and the calls whose run was
	// cancelled when they reached their last check (effect.call.before).
	cancels          map[int]context.CancelFunc
	cancelled        map[int]bool
	cancelledAtCheck map[incKey]bool
}

// incKey is a key one incarnation performs.
type incKey struct {
	inc int
	key string
}

func (*cancelFamily[U]) about() familyAbout {
	return familyAbout{name: "cancel", guarantees: []int{2, 3},
		what: "the run's context is cancelled at a point (a shutdown, a job timeout, a caller gone): no " +
			"provider call starts after it, a call under way is recorded done, nothing is half-applied, " +
			"and the next run performs every effect once"}
}

func (*cancelFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 4) }

// plan: the run's context is cancelled at every named point of the
// first phase, just before each of its commits, and at every fourth
// effect point after it (the later phases repeat the first's shapes: a
// sample keeps the family's cost near a crash family's). Effect points
// come first, for the -short sample.
func (*cancelFamily[U]) plan(d *discovery[U]) []simScenario {
	effectPoint := func(p idemtest.CrashPoint) bool {
		return p == idemtest.PointEffectClaimed || p == idemtest.PointEffectBeforeCall || p == idemtest.PointEffectAfterCall || p == idemtest.PointEffectRecorded
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

func (f *cancelFamily[U]) setup(*simRun[U]) {
	f.cancels, f.cancelled, f.cancelledAtCheck = map[int]context.CancelFunc{}, map[int]bool{}, map[incKey]bool{}
}

func (*cancelFamily[U]) exactCalls(simScenario) bool { return true }

// runContext gives each incarnation a run context the scenario can cancel.
func (f *cancelFamily[U]) runContext(r *simRun[U], ctx context.Context, inc *simInc) context.Context {
	ctx, cancel := context.WithCancel(ctx)
	r.mu.Lock()
	f.cancels[inc.id] = cancel
	r.mu.Unlock()
	return ctx
}

// afterCrash cancels the run's context at the scenario's hit. No call may
// start after it: a call whose run was cancelled when it reached
// effect.call.before, the engine's last look before the provider (a
// cancel from another goroutine may land between any earlier look and
// the call, and is not a fault), must not reach effect.call.after.
func (f *cancelFamily[U]) afterCrash(ctx context.Context, r *simRun[U], inc *simInc, n int, h simHit) {
	if n == r.sc.at {
		r.mu.Lock()
		cancel := f.cancels[inc.id]
		f.cancelled[inc.id] = true
		r.mu.Unlock()
		if cancel != nil {
			cancel()
		}
	}
	call := incKey{inc.id, h.detail}
	r.mu.Lock()
	calledAfterCancel := h.p == idemtest.PointEffectAfterCall && f.cancelledAtCheck[call]
	if h.p == idemtest.PointEffectBeforeCall && ctx.Err() != nil {
		f.cancelledAtCheck[call] = true
	}
	r.mu.Unlock()
	if calledAfterCancel {
		r.violate("cancel: the provider was called for %s, though the run was cancelled before the call's last check", h.detail)
	}
}

// playPhase: a cancelled run is followed by a new process, as a crashed one.
func (f *cancelFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{stopped: func(inc *simInc) bool { return f.stopped(r, inc) }})
}

// stopped reports whether inc's run was cancelled; then it checks what
// the run left: every call the provider applied is recorded done (a call
// under way when the cancel came finishes and is recorded).
func (f *cancelFamily[U]) stopped(r *simRun[U], inc *simInc) bool {
	r.mu.Lock()
	c := f.cancelled[inc.id]
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
