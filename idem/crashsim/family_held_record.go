package crashsim

type heldRecordFamily[U any] struct{ baseFamily[U] }

func (*heldRecordFamily[U]) about() familyAbout {
	return familyAbout{name: "held-record", guarantees: []int{5, 8},
		what: "worker A, under a wait bound of 150 ms, has called the provider for its first effect and " +
			"is about to record the call when a person's forget of that key stops inside its " +
			"transaction, holding the key's ledger row (PostgreSQL's row lock, SQLite's write lock) for " +
			"ten times A's bound: A's record ends as busy (`idem.ErrBusy`) within its bound, never " +
			"another error, never a hang, and counts no failed attempt and parks nothing; the forget is " +
			"then refused (A's lease is live); the call is made again with the same key once the lease " +
			"has run out, and the run converges"}
}

func (*heldRecordFamily[U]) plan(d *discovery[U]) []simScenario {
	return simPlanHeldRecord(d.trace, d.firstPhase)
}
