package crashsim

import (
	"fmt"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

type takeoverFamily[U any] struct {
	baseFamily[U]
	recorder string // under r.mu: the lease owner that must record the paused key
}

func (*takeoverFamily[U]) about() familyAbout {
	return familyAbout{name: "takeover", guarantees: []int{2, 5},
		what: "a worker stalls past its lease, another takes over; the first one's late call succeeds or " +
			"fails, before or after the new owner records"}
}

// plan: at each effect's first call, each variant.
func (*takeoverFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, fx := range d.job.Effects {
		if k, ok := d.firstCall[fx.Name]; ok {
			for _, v := range []string{"b-done late-ok", "b-done late-fails", "b-paused late-ok", "b-paused late-fails", "b-before b-fails"} {
				sc := at("takeover", k)
				sc.variant = v
				plan = append(plan, sc)
			}
		}
	}
	return plan
}

func (*takeoverFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 5) }

func (*takeoverFamily[U]) exactCalls(simScenario) bool { return true }

// playPhase: A holds the effect's lease and stalls past it; B takes the
// effect over. A's late call then succeeds or fails, before or after B
// records its outcome; the ledger keeps B's.
func (f *takeoverFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{pauseAt: r.atScenarioHit, interlude: func(phase int, a *simTask) {
		r.setClock(r.now().Add(r.job.Lease + time.Minute))
		r.mu.Lock()
		key := r.pausedKey
		r.mu.Unlock()
		var pauseB func(n int, h simHit) bool
		switch {
		case strings.Contains(r.sc.variant, "b-paused"):
			pauseB = func(n int, h simHit) bool { return h.p == idemtest.PointEffectAfterCall && h.detail == key }
		case strings.Contains(r.sc.variant, "b-before"):
			pauseB = func(n int, h simHit) bool { return h.p == idemtest.PointEffectBeforeCall && h.detail == key }
		}
		b := r.start(phase, workDrain, pauseB)
		bOut, bPaused := b.wait()
		if bPaused && strings.Contains(r.sc.variant, "b-paused") {
			r.mu.Lock()
			f.recorder = simOwner(b.inc.id) // B is the owner whose outcome must be kept
			r.mu.Unlock()
		}
		r.prov.mu.Lock()
		if strings.Contains(r.sc.variant, "late-fails") {
			r.prov.failInc[a.inc.id] = key
		}
		if strings.Contains(r.sc.variant, "b-fails") {
			r.prov.failInc[b.inc.id] = key
		}
		r.prov.mu.Unlock()
		// Both reports count: B's is the one that parks the effect when
		// its failure is the last attempt, and no later run reports it
		// again when the unit's redelivery is deduped before its effects.
		r.record(a.finish(), a.inc.id)
		if bPaused {
			bOut = b.finish()
		}
		r.record(bOut, b.inc.id)
	}})
}

// expect: A's late call and B's; when B's fails, a later run's retry
// too, unless B's was the last attempt: then the effect is parked,
// though A's late call applied it (the ledger cannot know).
func (*takeoverFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if e.calls == nil {
		return
	}
	k := r.pausedKey
	e.calls[k] = 2
	if strings.Contains(r.sc.variant, "b-fails") {
		if r.effectOf(k).MaxAttempts <= 2 {
			e.parked[k], e.parkedApplied = true, k
			delete(e.must, k)
		} else {
			e.calls[k] = 3
		}
	}
}

// rowViolation: the paused key's row was recorded by the new owner.
func (f *takeoverFamily[U]) rowViolation(r *simRun[U], e idem.LedgerEntry) string {
	if e.Key == r.pausedKey && f.recorder != "" && e.LeaseOwner != f.recorder {
		return fmt.Sprintf("end: ledger row %s was recorded by %q, a worker whose lease was taken over, not by the new owner %q", e.Key, e.LeaseOwner, f.recorder)
	}
	return ""
}
