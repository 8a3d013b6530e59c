package crashsim

import (
	"context"
	"fmt"
)

type purgeYoungFamily[U any] struct {
	baseFamily[U]
	// purged: the purge found rows past a retention shorter than the
	// scenario's clock span, and removed them (under r.mu).
	purged bool
}

func (*purgeYoungFamily[U]) about() familyAbout {
	return familyAbout{name: "purge-young", guarantees: []int{2},
		what: "purge at a point on the scenario's clock: no row the spec's retention keeps may go; with a " +
			"retention shorter than the scenario's clock span, done rows past it may, and a replay of " +
			"their units is then performed again with the same key"}
}

// plan: every fourth point outside a transaction, when an effect has a
// retention.
func (*purgeYoungFamily[U]) plan(d *discovery[U]) []simScenario {
	return planPurges(d, "purge-young", func(n int) bool { return n%4 == 0 })
}

func (*purgeYoungFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 4) }

// afterCrash: the purge at the scenario's point.
func (f *purgeYoungFamily[U]) afterCrash(ctx context.Context, r *simRun[U], _ *simInc, n int, h simHit) {
	if n == r.sc.at && r.purgeNow(ctx, fmt.Sprintf("at %s", h.p), false) > 0 {
		r.mu.Lock()
		f.purged = true
		r.mu.Unlock()
	}
}

// purgesPastRetention: rows past a short retention went (a key is then
// new again: docs/guarantees.md).
func (f *purgeYoungFamily[U]) purgesPastRetention() bool { return f.purged }

// expect: once rows past their retention went, a replay of their units is
// performed again, with the same key: calls are not predicted.
func (f *purgeYoungFamily[U]) expect(_ *simRun[U], e *simExpect[U]) {
	if f.purged {
		e.calls = nil
	}
}

func (*purgeYoungFamily[U]) exactCalls(simScenario) bool { return true }
