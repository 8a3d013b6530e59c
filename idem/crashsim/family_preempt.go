package crashsim

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
