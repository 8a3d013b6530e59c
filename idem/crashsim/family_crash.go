package crashsim

type crashFamily[U any] struct{ baseFamily[U] }

func (*crashFamily[U]) about() familyAbout {
	return familyAbout{name: "crash", guarantees: []int{1, 2, 3},
		what: "a crash at every named point and every SQL boundary that leaves a state of its own, then recovery"}
}

// plan: a crash at every crash site that leaves a state of its own
// (distinctCrashSites).
func (*crashFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for _, k := range distinctCrashSites(d.trace, d.full, d.inTx) {
		sc := newScenario("crash")
		sc.crashAt = []int{k}
		plan = append(plan, sc)
	}
	return plan
}

func (*crashFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 10) }
