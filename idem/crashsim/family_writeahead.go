package crashsim

import (
	"context"
	"slices"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

const famWriteAhead = "writeahead"

type writeaheadFamily[U any] struct {
	baseFamily[U]
	lagKeys map[string]*simLag // under r.mu: the keys whose first write is held back
}

func (*writeaheadFamily[U]) about() familyAbout {
	return familyAbout{name: "writeahead", guarantees: []int{1, 3, 4},
		what: "a job without effects, batches of one written ahead (three at once on the simulation's " +
			"pool): a page serves a new key twice, an older version before the current one (just before " +
			"it in the first phase, with another unit between in the second, so the older write is not " +
			"the newest in flight), and the older write is held back before it touches its row until " +
			"the later batch waits for it (`batch.await`) or commits, or the run goes quiet waiting for it " +
			"(the later version on a page not yet fetched); under `upsert` the newer version " +
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

func (f *writeaheadFamily[U]) setup(*simRun[U]) { f.lagKeys = map[string]*simLag{} }

// options: batches of one, written ahead.
func (*writeaheadFamily[U]) options(*simRun[U]) []idem.Option {
	return []idem.Option{idem.WithBatchSize(1), idem.WithWriteAhead(true)}
}

// exactCalls: without a fault, a repeat is deduped or a mismatch.
func (*writeaheadFamily[U]) exactCalls(sc simScenario) bool { return sc.at < 0 }

// checkEnd: without a fault, every run's report counts.
func (*writeaheadFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	if r.sc.at < 0 {
		r.checkUnfaulted(ctx)
	}
}

// simLag is writeahead's state for a repeated key.
type simLag struct {
	held bool // its first write was held back (at most once)
	// awaited: a later batch with the key waited for the batches in
	// flight (batch.await); committed: a later write of it committed
	// while the first was held: the engine did not wait.
	awaited, committed bool
}

// echoFor registers writeahead's older version of u, served before it
// with between units in between (a change log serves it just before): the
// same mark (the same window, the same place in it), other data. It is a
// delivery of the key like any other, so the oracle's history holds it
// just before u: under upsert u wins, under insert_once the older version
// is the first written and stays.
func (f *writeaheadFamily[U]) echoFor(r *simRun[U], id int, u U, between int) {
	older := r.job.Unit(id, 0)
	if r.job.MarkOf != nil && r.job.SetMark != nil {
		r.job.SetMark(&older, r.job.MarkOf(u))
	}
	key := r.job.keyOf(u)
	r.mu.Lock()
	f.lagKeys[key] = &simLag{}
	r.mu.Unlock()
	r.cursor.mu.Lock()
	r.cursor.echo[key] = older // a change log carries it once, just before u
	r.cursor.mu.Unlock()
	r.window.mu.Lock()
	r.window.echo[key] = &simEcho[U]{unit: older, between: between}
	r.window.mu.Unlock()
	r.mu.Lock()
	r.history = append(r.history, simDelivery[U]{unit: older, versions: r.versions})
	r.mu.Unlock()
}

// beforePhase registers what the phase repeats, before it is served: the phase's new unit (unit 3 in phase 0, unit 7 in phase 1)
// is echoed by an older version: just before it in phase 0, one unit
// before that in phase 1.
func (f *writeaheadFamily[U]) beforePhase(r *simRun[U], phase int) {
	echo := map[int]struct{ id, between int }{0: {3, 0}, 1: {7, 1}}[phase]
	i := slices.IndexFunc(r.phases[phase], func(u U) bool { return r.job.keyOf(u) == r.job.keyOf(r.job.Unit(echo.id, 1)) })
	if i >= 0 {
		f.echoFor(r, echo.id, r.phases[phase][i], echo.between)
	}
}

// beforeCrash holds writeahead's first write of a repeated key at its first
// unit.start, before the write touches its row, until the engine shows
// what it does with the key's later batch: waits for the batches in
// flight (batch.await; then the first write goes on and commits first),
// or writes it and commits (a wait missed: the first write then commits
// after it, and the older version wins). It is held outside every lock,
// so other batches go on meanwhile, and no longer than simWriteAheadHold
// or the incarnation's life, nor once the run has gone quiet waiting for it
// (holdWhileBusy: the key's later version on a page not yet fetched).
func (f *writeaheadFamily[U]) beforeCrash(_ context.Context, r *simRun[U], inc *simInc, h simHit) error {
	p, detail := h.p, h.detail
	r.mu.Lock()
	l := f.lagKeys[detail]
	hold := false
	if l != nil {
		switch p {
		case idemtest.PointBatchAwait:
			l.awaited = true
		case idemtest.PointUnitAfterCommit:
			l.committed = l.held
		case idemtest.PointUnitStart:
			hold, l.held = !l.held, true
		}
	}
	r.mu.Unlock()
	if !hold || !inc.writesAhead.Load() {
		return nil // one batch after another: nothing comes between
	}
	r.holdWhileBusy(inc, func() bool { return l.awaited || l.committed })
	return nil
}
