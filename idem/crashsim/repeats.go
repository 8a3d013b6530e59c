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
	// betweenKeys are the keys a window served between it and the current
	// version, the last time it served the two.
	betweenKeys []string
	// after: served just after the unit it is registered under, whose key
	// it need not share (older-alone: an older copy after a newer one).
	after bool
}

// echoed returns the window's units with each registered older version
// before its current one (its between units before), for the incarnation
// it goes to: the first that fetches it, so a re-run or a backfill after
// convergence meets no older version that would change an upserted row;
// under insert_once, to every incarnation (s.echoAlways), so the older
// version is the first written whichever incarnation crashed before
// writing it (its later writes change nothing). The caller holds s.mu.
func (s *windowSource[U]) echoed(in []U, inc int) []U {
	if len(s.echo) == 0 {
		return in
	}
	out := make([]U, 0, len(in)+1)
	for _, u := range in {
		if e := s.echo[s.keyOf(u)]; e != nil {
			if e.to == 0 {
				e.to = inc
			}
			if e.after && e.to == inc {
				out = append(out, u, e.unit)
				continue
			}
			if e.to == inc || s.echoAlways {
				at := max(len(out)-e.between, 0)
				e.betweenKeys = e.betweenKeys[:0]
				for _, b := range out[at:] {
					e.betweenKeys = append(e.betweenKeys, s.keyOf(b))
				}
				out = slices.Insert(out, at, e.unit)
			}
		}
		out = append(out, u)
	}
	return out
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

// holdWhileBusy holds the caller as holdUntil does, and also lets it go
// once the run has gone quiet: no hit and no provider call for
// simWriteAheadQuiet, the engine waiting for the held write itself. It
// does so where the key's later version lies on a page the engine fetches
// only once the pages before have ended (a cursor moves past whole pages
// only), which on drawn specs held every page boundary for the whole
// bound, 10 s of a job's 11 s -short sample on PostgreSQL. An engine that
// writes the later version without waiting runs statements meanwhile, so
// it is never quiet that long, and is still caught.
func (r *simRun[U]) holdWhileBusy(inc *simInc, shown func() bool) {
	last, since := r.progress.Load(), time.Now()
	r.holdUntil(inc, func() bool {
		if p := r.progress.Load(); p != last {
			last, since = p, time.Now()
		}
		return shown() || time.Since(since) > simWriteAheadQuiet
	})
}

// simWriteAheadQuiet is how long a run makes no progress before
// holdWhileBusy takes it as waiting for the write it holds: hundreds of
// times the gap between two hits of a run at work.
const simWriteAheadQuiet = 500 * time.Millisecond

// delivered is what the caller hands in for phase: the family's calls
// (repeat-batches') while the phases are played, the fixture's units when
// re-running after.
func (r *simRun[U]) delivered(phase int) []U {
	if r.converging {
		return r.phases[phase]
	}
	return r.played(phase)
}

// played is what the caller handed in for phase while the phases played.
func (r *simRun[U]) played(phase int) []U {
	if units := r.fam.handsIn(phase); units != nil {
		return units
	}
	return r.phases[phase]
}
