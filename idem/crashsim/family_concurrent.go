package crashsim

type concurrentFamily[U any] struct{ baseFamily[U] }

func (*concurrentFamily[U]) about() familyAbout {
	return familyAbout{name: "concurrent", guarantees: []int{5},
		what: "two workers under seeded jitter"}
}

// plan: four seeds.
func (*concurrentFamily[U]) plan(*discovery[U]) []simScenario {
	var plan []simScenario
	for seed := uint64(1); seed <= 4; seed++ {
		sc := newScenario("concurrent")
		sc.seed = seed
		plan = append(plan, sc)
	}
	return plan
}
