package crashsim

// The families that repeat keys inside one call or page:
//
//   - repeat-batches (handed-in units): each phase is one Process call in
//     batches of two whose keys repeat across batches, unchanged and with
//     a changed payload, and whose batches mix new keys with changed
//     repeats of old ones. The call must end as if its units had been
//     handed in one by one: a repeat deduped, a changed repeat a mismatch
//     that writes and performs nothing.
//   - writeahead (a job without effects, fed by a source): batches of one,
//     written ahead, and a page that serves a new key twice, an older
//     version before the current one, so the key's two writes are in
//     flight at once: in phase 0 just before it, in phase 1 (on a window
//     source) with another unit between, so the older write is not the
//     newest batch in flight. The older write is slowed down at its first
//     hit: a later batch that does not wait for the batches in flight with
//     its key commits first, and the older version wins.
//
// Each runs once without a fault (at < 0: report counts and calls checked)
// and four times with a crash at hits spread over the first two phases.
// repeat-batches of a job with effects runs once more without a fault,
// its effects called four at a time (simCallsAtOnce): a batch's calls go
// on while the next batch, which repeats some of their keys, is written
// and claimed, and must leave those keys to the calls in flight. Unit 1's
// first call is held until the batch [3 1] that repeats it has claimed
// its own calls (holdCall), so that batch meets the call in flight for
// certain: it must answer the repeat deduped, with the call's result,
// once the call has ended, not busy (the report's counts, checkCounts).

import (
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

const (
	famRepeatBatches = "repeat-batches"
	famWriteAhead    = "writeahead"
)

// simCallsAtOnce is repeat-batches' variant with effects called
// simCallsAtOnceN at a time, each held in flight a moment (simFleetHold).
const (
	simCallsAtOnce  = "calls4"
	simCallsAtOnceN = 4
)

func hasEffects[U any](job *Job[U]) bool { return len(job.Effects) > 0 }

// simWriteAheadHold bounds how long this file's families hold a write or
// a call back (holdUntil): it is let go as soon as the engine shows what
// it does with the key's later batch, so the bound is met only when a
// crash ends the incarnation that would show it, or the engine never
// shows it.
const simWriteAheadHold = 5 * time.Second

// simLag is writeahead's state for a repeated key.
type simLag struct {
	held bool // its first write was held back (at most once)
	// awaited: a later batch with the key waited for the batches in
	// flight (batch.await); committed: a later write of it committed
	// while the first was held: the engine did not wait.
	awaited, committed bool
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

// planRepeats is family's scenarios: once without a fault, (calls4)
// once more with effects called four at a time, then crashed at hits
// spread over the first two phases.
func planRepeats[U any](d *discovery[U], family string, calls4 bool) []simScenario {
	plan := []simScenario{newScenario(family)}
	if calls4 {
		sc := newScenario(family)
		sc.variant = simCallsAtOnce
		plan = append(plan, sc)
	}
	for i := 1; i <= 4; i++ {
		sc := newScenario(family)
		sc.at = i * d.secondPhase / 5
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}

// simEcho is an older version of a unit that writeahead's source serves
// just before the current one, to the first incarnation that fetches it.
type simEcho[U any] struct {
	unit U
	to   int // the incarnation it is served to; 0 until one fetches it
	// between is how many units a window serves between it and the
	// current version (fewer when the window has fewer before it).
	between int
}

// echoFor registers writeahead's older version of u, served before it
// with between units in between (a change log serves it just before): the
// same mark (the same window, the same place in it), other data. It is a
// delivery of the key like any other, so the oracle's history holds it
// just before u: under upsert u wins, under insert_once the older version
// is the first written and stays.
func (r *simRun[U]) echoFor(id int, u U, between int) {
	older := r.job.Unit(id, 0)
	if r.job.MarkOf != nil && r.job.SetMark != nil {
		r.job.SetMark(&older, r.job.MarkOf(u))
	}
	key := r.job.keyOf(u)
	r.mu.Lock()
	r.lagKeys[key] = &simLag{}
	r.cursorEcho[key] = older // a change log carries it once, just before u
	r.mu.Unlock()
	r.window.mu.Lock()
	r.window.echo[key] = &simEcho[U]{unit: older, between: between}
	r.window.mu.Unlock()
	r.mu.Lock()
	r.history = append(r.history, simDelivery[U]{unit: older, versions: r.versions})
	r.mu.Unlock()
}

// logEntries is what serve appends to a change log for u: its echo, if
// any, then u.
func (r *simRun[U]) logEntries(u U) []U {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := r.job.keyOf(u)
	if older, ok := r.cursorEcho[key]; ok {
		delete(r.cursorEcho, key)
		return []U{older, u}
	}
	return []U{u}
}

// echoed returns the window's units with each registered older version
// before its current one (its between units before), for the incarnation
// it goes to: the first that fetches it, so a re-run or a backfill after
// convergence meets no older version that would change an upserted row;
// under insert_once, to every incarnation (s.echoAlways), so the older
// version is the first written whichever incarnation crashed before
// writing it (its later writes change nothing). The caller holds s.mu.
func (s *WindowSource[U]) echoed(in []U, inc int) []U {
	if len(s.echo) == 0 {
		return in
	}
	out := make([]U, 0, len(in)+1)
	for _, u := range in {
		if e := s.echo[s.keyOf(u)]; e != nil {
			if e.to == 0 {
				e.to = inc
			}
			if e.to == inc || s.echoAlways {
				out = slices.Insert(out, max(len(out)-e.between, 0), e.unit)
			}
		}
		out = append(out, u)
	}
	return out
}

// serveRepeats registers what the phase repeats, before it is served: for
// writeahead, the phase's new unit (unit 3 in phase 0, unit 7 in phase 1)
// is echoed by an older version: just before it in phase 0, one unit
// before that in phase 1.
func (r *simRun[U]) serveRepeats(phase int) {
	if r.sc.family != famWriteAhead {
		return
	}
	echo := map[int]struct{ id, between int }{0: {3, 0}, 1: {7, 1}}[phase]
	i := slices.IndexFunc(r.phases[phase], func(u U) bool { return r.job.keyOf(u) == r.job.keyOf(r.job.Unit(echo.id, 1)) })
	if i >= 0 {
		r.echoFor(echo.id, r.phases[phase][i], echo.between)
	}
}

// lag holds writeahead's first write of a repeated key at its first
// unit.start, before the write touches its row, until the engine shows
// what it does with the key's later batch: waits for the batches in
// flight (batch.await; then the first write goes on and commits first),
// or writes it and commits (a wait missed: the first write then commits
// after it, and the older version wins). It is held outside every lock,
// so other batches go on meanwhile, and no longer than simWriteAheadHold
// or the incarnation's life.
func (r *simRun[U]) lag(inc *simInc, p idemrt.CrashPoint, detail string) {
	r.mu.Lock()
	l := r.lagKeys[detail]
	hold := false
	if l != nil {
		switch p {
		case idemrt.PointBatchAwait:
			l.awaited = true
		case idemrt.PointUnitAfterCommit:
			l.committed = l.held
		case idemrt.PointUnitStart:
			hold, l.held = !l.held, true
		}
	}
	r.mu.Unlock()
	if !hold || !inc.writesAhead.Load() {
		return // one batch after another: nothing comes between
	}
	r.holdUntil(inc, func() bool { return l.awaited || l.committed })
}

// holdUntil holds the caller until shown reports true (read under r.mu),
// for at most simWriteAheadHold and no longer than inc lives; it reports
// whether it ran out of time.
func (r *simRun[U]) holdUntil(inc *simInc, shown func() bool) (timedOut bool) {
	for deadline := time.Now().Add(simWriteAheadHold); !inc.dead.Load(); time.Sleep(time.Millisecond) {
		r.mu.Lock()
		ok := shown()
		r.mu.Unlock()
		if ok {
			return false
		}
		if time.Now().After(deadline) {
			return true
		}
	}
	return false
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
func (r *simRun[U]) checkCallHold() {
	if h := r.callHold; h != nil && (!h.held || !h.shown) {
		r.violate("calls4: unit 1's call of %s was held %v, and a call of unit 3 claimed %v; want both", h.key, h.held, h.shown)
	}
}

// holdCall holds calls4's first call of unit 1's first effect key at its
// claim (effect.claim.after: leased to this worker, not yet called, the
// cross-worker slot not taken) until a call of unit 3 is claimed. Unit 3
// comes in the batch [3 1] after [1 2]: its calls are claimed once that
// batch has committed and decided what its repeat of unit 1 owes, so the
// repeat meets unit 1's call in flight whatever the machine's speed. One
// key only: the batch's other calls go on and free the call slots unit
// 3's need. The hold is bounded by simWriteAheadHold and the
// incarnation's life; a bound met while it lives is a violation (the
// scenario did not show what it is for).
func (r *simRun[U]) holdCall(inc *simInc, p idemrt.CrashPoint, detail string) {
	if p != idemrt.PointEffectClaimed {
		return
	}
	h := r.callHold
	r.mu.Lock()
	if h.release[detail] {
		h.shown = true
	}
	hold := detail == h.key && !h.held
	h.held = h.held || hold
	r.mu.Unlock()
	if !hold {
		return
	}
	if r.holdUntil(inc, func() bool { return h.shown }) {
		r.violate("calls4: the first call of %s was held %s and no call of the batch that repeats it was claimed", h.key, simWriteAheadHold)
	}
}

// delivered is what the caller hands in for phase: repeat-batches' calls
// while the phases are played, the fixture's units when re-running after.
func (r *simRun[U]) delivered(phase int) []U {
	if r.converging {
		return r.phases[phase]
	}
	return r.played(phase)
}

// played is what the caller handed in for phase while the phases played.
func (r *simRun[U]) played(phase int) []U {
	if r.repeats != nil && phase < len(r.repeats) {
		return r.repeats[phase]
	}
	return r.phases[phase]
}
