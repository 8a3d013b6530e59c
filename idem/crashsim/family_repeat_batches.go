package crashsim

type repeatBatchesFamily[U any] struct{ baseFamily[U] }

func (*repeatBatchesFamily[U]) about() familyAbout {
	return familyAbout{name: "repeat-batches", guarantees: []int{1, 2, 4, 7},
		what: "handed-in units: each phase is one call in batches of two whose keys repeat across and " +
			"within batches, unchanged and with a changed payload, mixing new keys with changed repeats " +
			"of old ones; the call ends as if its units had been handed in one by one (a repeat " +
			"deduped, a changed repeat a mismatch that writes and performs nothing; report counts, " +
			"calls and rows checked); then the same, crashed at hits spread over it; once more without " +
			"a fault for a job with effects, its effects called four at a time and each call held in " +
			"flight 15 ms, so a batch's calls are still going when the next batch, repeating their " +
			"keys, is written and claimed; unit 1's first call is held at its claim until the batch [3 " +
			"1] that repeats it has claimed its own calls, so that batch meets it in flight for certain " +
			"and must leave the key to it: the repeat is answered deduped once the call has ended, " +
			"never busy (counts, no effect busy or waiting, calls and at most four calls in flight " +
			"checked)"}
}

// plan: handed-in units only; calls4 for a job with effects.
func (*repeatBatchesFamily[U]) plan(d *discovery[U]) []simScenario {
	if d.job.Source != SourceNoneName {
		return nil
	}
	return planRepeats(d, famRepeatBatches, hasEffects(d.job))
}

// sample keeps calls4: the one scenario with a call in flight when a
// batch repeats its key.
func (*repeatBatchesFamily[U]) sample(all []simScenario) []simScenario {
	return keepVariant(sampleEvery(all, 1), all, simCallsAtOnce)
}
