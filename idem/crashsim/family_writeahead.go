package crashsim

type writeaheadFamily[U any] struct{ baseFamily[U] }

func (*writeaheadFamily[U]) about() familyAbout {
	return familyAbout{name: "writeahead", guarantees: []int{1, 3, 4},
		what: "a job without effects, batches of one written ahead (three at once on the simulation's " +
			"pool): a page serves a new key twice, an older version before the current one (just before " +
			"it in the first phase, with another unit between in the second, so the older write is not " +
			"the newest in flight), and the older write is held back before it touches its row until " +
			"the later batch waits for it (`batch.await`) or commits; under `upsert` the newer version " +
			"must win, under `insert_once` the older one, written first, must stay (report counts " +
			"checked); then the same, crashed at hits spread over it"}
}

// plan: a job without effects, fed by a source, with a destination.
func (*writeaheadFamily[U]) plan(d *discovery[U]) []simScenario {
	if d.job.Source == SourceNoneName || !d.job.HasDest || len(d.job.Effects) > 0 {
		return nil
	}
	return planRepeats(d, famWriteAhead, false)
}
