package crashsim

import "time"

type preemptFamily[U any] struct{ baseFamily[U] }

func (*preemptFamily[U]) about() familyAbout {
	return familyAbout{name: "preempt", guarantees: []int{3, 5},
		what: "worker A pauses at a point, worker B runs to the end, A resumes; every point"}
}

// plan: every point of the first phase outside a transaction.
func (*preemptFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for k := 0; k < d.firstPhase; k++ {
		if h := d.trace[k]; !simInTx(d.job, h) && h.p != pointSQLBefore && h.p != pointSQLAfter {
			plan = append(plan, at("preempt", k))
		}
	}
	return plan
}

func (*preemptFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 3) }

func (*preemptFamily[U]) overlapping(simScenario) bool { return true }

// playPhase: worker A pauses at the scenario's hit; worker B runs the
// next phase to the end, then A resumes with its old view.
func (*preemptFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{pauseAt: r.atScenarioHit, interlude: func(phase int, a *simTask) {
		if phase+1 < len(r.phases) {
			r.setClock(r.phaseStart(phase + 1).Add(r.job.Lease + time.Minute))
			r.serve(phase + 1)
			r.cleanRun(phase + 1)
		}
		a.finish()
	}})
}
