package crashsim

type purgePendingFamily[U any] struct{ baseFamily[U] }

func (*purgePendingFamily[U]) about() familyAbout {
	return familyAbout{name: "purge-pending", guarantees: []int{2, 7},
		what: "a purge past every retention while effects are owed (reserved, claimed, called but not " +
			"recorded) or one is parked; then the rest of the fixture: owed and parked rows stay, the " +
			"owed effect is performed once, the parked one stays parked (a handed-in key whose effect " +
			"is parked, or whose `insert_once` row is still there, changed, is still a mismatch), and " +
			"an update of a row whose done ledger row was purged never decides a `when: inserted` " +
			"effect again"}
}

func (*purgePendingFamily[U]) plan(d *discovery[U]) []simScenario { return planPurgePending(d) }

func (*purgePendingFamily[U]) sample(all []simScenario) []simScenario { return sampleEvery(all, 3) }
