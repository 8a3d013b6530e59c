package crashsim

type fanoutFamily[U any] struct{ baseFamily[U] }

func (*fanoutFamily[U]) about() familyAbout {
	return familyAbout{name: "fanout", guarantees: []int{1, 2, 4},
		what: "effects four at a time over pipelined batches of two (a job without effects on PostgreSQL " +
			"writes ahead); report counts and calls checked"}
}

func (*fanoutFamily[U]) plan(*discovery[U]) []simScenario {
	return []simScenario{newScenario("fanout")}
}
