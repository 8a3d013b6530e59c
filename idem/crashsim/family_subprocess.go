package crashsim

import (
	"slices"

	"github.com/idemgen/idemgen/idem/idemrt"
)

type subprocessFamily[U any] struct{ baseFamily[U] }

func (*subprocessFamily[U]) about() familyAbout {
	return familyAbout{name: "subprocess", guarantees: []int{1, 2, 3},
		what: "a real process death (`os.Exit`) at points of the first phase"}
}

// plan: real process deaths at points spread over phase 0, including
// inside the write transaction.
func (*subprocessFamily[U]) plan(d *discovery[U]) []simScenario {
	phase0 := d.firstPhase
	if d.job.Source == SourceNoneName {
		phase0 = len(d.trace) / 2
	}
	var exits []int
	for i := 0; i < 5; i++ {
		exits = append(exits, i*phase0/5)
	}
	if k := slices.IndexFunc(d.trace[:phase0], func(h simHit) bool { return h.p == idemrt.PointUnitBeforeCommit }); k >= 0 {
		exits = append(exits, k)
	}
	var plan []simScenario
	for _, k := range slices.Compact(slices.Sorted(slices.Values(exits))) {
		sc := newScenario("subprocess")
		sc.crashAt = []int{k}
		plan = append(plan, sc)
	}
	return plan
}

// playPhase: phase 0's first run in a child process that dies at the
// scenario's hit; a new process recovers.
func (*subprocessFamily[U]) playPhase(r *simRun[U], phase int) {
	if phase != 0 {
		r.runPhase(phase, phasePlay{})
		return
	}
	if r.runChild() {
		simChildDeaths.Add(1)
		r.recover(phase)
	}
}
