package crashsim

type forgetFamily[U any] struct{ baseFamily[U] }

func (*forgetFamily[U]) about() familyAbout {
	return familyAbout{name: "forget", guarantees: []int{8},
		what: "a person forgets (`idem.Forget`, the code of the generated store and `idemgen ledger " +
			"forget`) a key whose effect a paused worker holds under a live lease: refused, the ledger " +
			"unchanged; after the re-run and backfill, forgetting one done key removes its row and " +
			"leaves every other row as it was"}
}

// plan: at each effect's first call.
func (*forgetFamily[U]) plan(d *discovery[U]) []simScenario {
	return atFirstCalls(d, "forget")
}
