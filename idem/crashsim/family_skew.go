package crashsim

type skewFamily[U any] struct{ baseFamily[U] }

func (*skewFamily[U]) about() familyAbout {
	return familyAbout{name: "skew", guarantees: []int{2, 5},
		what: "a worker whose clock is a lease ahead of the database's meets another worker's fresh claim " +
			"and must leave it; one as far behind, once the lease has expired on the database's clock, " +
			"must take it over"}
}

func (*skewFamily[U]) plan(d *discovery[U]) []simScenario { return planSkew(d) }

func (*skewFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 2) }
