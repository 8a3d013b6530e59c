package crashsim

import (
	"sync/atomic"

	"github.com/idemgen/idemgen/idem/idemrt"
)

type fleetFamily[U any] struct{ baseFamily[U] }

func (*fleetFamily[U]) about() familyAbout {
	return familyAbout{name: "fleet", guarantees: []int{5, 8},
		what: "two workers at once, every effect held to `concurrency` 1 across workers: never two calls " +
			"of one effect in flight, each effect still once"}
}

func (*fleetFamily[U]) plan(*discovery[U]) []simScenario { return []simScenario{newScenario("fleet")} }

// setup: the provider counts each effect's calls in flight, at most one.
func (*fleetFamily[U]) setup(r *simRun[U]) {
	r.prov.flight = &simFlight{limit: 1, now: map[string]*atomic.Int32{}}
}

// limit: every effect at concurrency 1 across workers.
func (*fleetFamily[U]) limit(_ *simRun[U], fx *idemrt.Effect[U], _ idemrt.Effect[U]) {
	fx.Concurrency = 1
}

func (*fleetFamily[U]) overlapping(simScenario) bool { return true }

// playPhase: two workers on the phase at once.
func (*fleetFamily[U]) playPhase(r *simRun[U], phase int) { r.concurrently(phase) }
