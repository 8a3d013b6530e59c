package crashsim

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

const famRepeatBatches = "repeat-batches"

type repeatBatchesFamily[U any] struct {
	baseFamily[U]
	repeats  [][]U        // the calls handed in while the phases play, one a phase
	callHold *simCallHold // calls4: a first call held
}

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

// setup: the calls with repeats; calls4 holds calls in flight, so the
// next batch meets them.
func (f *repeatBatchesFamily[U]) setup(r *simRun[U]) {
	f.repeats = simRepeatDeliveries(r.job)
	if r.sc.variant == simCallsAtOnce {
		r.prov.flight = &simFlight{limit: simCallsAtOnceN, now: map[string]*atomic.Int32{}}
		f.callHold = newCallHold(r.job, r.versions)
	}
}

// handsIn: one call a phase, many batches.
func (f *repeatBatchesFamily[U]) handsIn(phase int) []U {
	if phase < len(f.repeats) {
		return f.repeats[phase]
	}
	return nil
}

// options: batches of two; calls4 calls its effects four at a time.
func (*repeatBatchesFamily[U]) options(r *simRun[U]) []idem.Option {
	opts := []idem.Option{idem.WithBatchSize(2)}
	if r.sc.variant == simCallsAtOnce {
		opts = append(opts, idem.WithEffectConcurrency(simCallsAtOnceN))
	}
	return opts
}

// exactCalls: without a fault, a repeat is deduped or a mismatch.
func (*repeatBatchesFamily[U]) exactCalls(sc simScenario) bool { return sc.at < 0 }

// checkEnd: without a fault, every run's report counts, calls4's hold
// was met, and a replay is a pure dedupe.
func (f *repeatBatchesFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	if r.sc.at < 0 {
		r.checkCounts()
		f.checkCallHold(r)
		r.checkReplay(ctx)
	}
}

// simRepeatDeliveries is what repeat-batches hands in, one call per phase:
// the fixture's units (1 to 6, then 4 to 7) with repeats; n' is unit n
// with a changed payload. In batches of two:
//
//	phase 0: [1 2] [3 1] [4 2'] [5 5] [6 3]
//	phase 1: [4 1'] [7 5] [7 3'] [6]
func simRepeatDeliveries[U any](job *Job[U]) [][]U {
	u := func(id int) U { return job.Unit(id, 1) }
	changed := func(id int) U { return job.Unit(id, 2) }
	return [][]U{
		{u(1), u(2), u(3), u(1), u(4), changed(2), u(5), u(5), u(6), u(3)},
		{u(4), changed(1), u(7), u(5), u(7), changed(3), u(6)},
	}
}

// simCallHold is calls4's state: the key of unit 1's first effect that a
// new key owes, whose first call is held at its claim, and the keys of
// unit 3's effects, whose claim lets it go.
type simCallHold struct {
	key     string
	release map[string]bool
	held    bool // the call was held (at most once)
	shown   bool // a call of unit 3 was claimed
}

// newCallHold is nil when no effect of the job is owed by a key handed in
// for the first time (decided as inserted): then nothing is called.
func newCallHold[U any](job *Job[U], v simVersions) *simCallHold {
	i := slices.IndexFunc(job.Effects, func(fx Effect) bool { return fx.When.Matches(idem.OutcomeInserted) })
	if i < 0 {
		return nil
	}
	h := &simCallHold{key: oracleKey(job.Effects[i].Key, v.vars(i), job.Unit(1, 1)), release: map[string]bool{}}
	for i, fx := range job.Effects {
		h.release[oracleKey(fx.Key, v.vars(i), job.Unit(3, 1))] = true
	}
	return h
}

// checkCallHold: calls4 held unit 1's call until the batch that repeats it
// had claimed its calls; else the scenario proved nothing of that batch.
func (f *repeatBatchesFamily[U]) checkCallHold(r *simRun[U]) {
	if h := f.callHold; h != nil && (!h.held || !h.shown) {
		r.violate("calls4: unit 1's call of %s was held %v, and a call of unit 3 claimed %v; want both", h.key, h.held, h.shown)
	}
}

// beforeCrash holds calls4's first call of unit 1's first effect key at its
// claim (effect.claim.after: leased to this worker, not yet called, the
// cross-worker slot not taken) until a call of unit 3 is claimed. Unit 3
// comes in the batch [3 1] after [1 2]: its calls are claimed once that
// batch has committed and decided what its repeat of unit 1 owes, so the
// repeat meets unit 1's call in flight whatever the machine's speed. One
// key only: the batch's other calls go on and free the call slots unit
// 3's need. The hold is bounded by simWriteAheadHold and the
// incarnation's life; a bound met while it lives is a violation (the
// scenario did not show what it is for).
func (f *repeatBatchesFamily[U]) beforeCrash(_ context.Context, r *simRun[U], inc *simInc, hit simHit) error {
	p, detail := hit.p, hit.detail
	h := f.callHold
	if h == nil || p != idemtest.PointEffectClaimed {
		return nil
	}
	r.mu.Lock()
	if h.release[detail] {
		h.shown = true
	}
	hold := detail == h.key && !h.held
	h.held = h.held || hold
	r.mu.Unlock()
	if !hold {
		return nil
	}
	if r.holdUntil(inc, func() bool { return h.shown }) {
		r.violate("calls4: the first call of %s was held %s and no call of the batch that repeats it was claimed", h.key, simWriteAheadHold)
	}
	return nil
}
