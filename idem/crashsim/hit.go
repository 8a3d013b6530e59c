package crashsim

// What happens at every hit of a crashing worker: the crash hook, and the
// invariants checked on committed state at every point.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// failPoint is where a unit's write is made to fail: inside its transaction.
func (j *Job[U]) failPoint() idemtest.CrashPoint {
	if j.Stage {
		return idemtest.PointUnitStart
	}
	return idemtest.PointUnitBeforeCommit
}

// hook is every incarnation's crash hook: count, check, then crash, pause or fault.
func (r *simRun[U]) hook(inc *simInc) idemtest.CrashHook {
	return func(ctx context.Context, p idemtest.CrashPoint, detail string) error {
		if inc.dead.Load() {
			select {} // the process is gone
		}
		r.progress.Add(1)
		h := simHit{p: p, detail: detail, inc: inc.id}
		r.mu.Lock()
		n := r.hits
		r.hits++
		r.trace = append(r.trace, h)
		crash := len(r.sc.crashAt) > 0 && r.sc.crashAt[0] == n
		if crash {
			r.sc.crashAt = r.sc.crashAt[1:]
		}
		pause := !inc.didStop && inc.pauseAt != nil && inc.pauseAt(n, h)
		if pause {
			inc.didStop = true
		}
		fail := r.fam.faultAt(r, n, h)
		if p == pointSQLAfter {
			r.changed |= r.job.changed(detail, simWritesOf(ctx))
		}
		r.mu.Unlock()

		if r.child {
			if crash {
				os.Exit(simChildCrashed) // a real process death: the OS drops connections and locks
			}
			return nil
		}
		if p != pointSQLBefore && p != pointSQLAfter {
			r.checkAt(p, detail)
		}
		if err := r.fam.beforeCrash(ctx, r, inc, h); err != nil {
			fail = err
		}
		if crash {
			inc.dead.Store(true)
			inc.crashed <- struct{}{}
			select {} // the process is gone: park for good, unwind nothing
		}
		r.fam.afterCrash(ctx, r, inc, n, h)
		if pause {
			if p == idemtest.PointEffectBeforeCall || p == idemtest.PointEffectAfterCall {
				r.mu.Lock()
				r.pausedKey = detail
				r.mu.Unlock()
			}
			r.pausedNow.Add(1)
			inc.paused <- struct{}{}
			<-inc.resume
			r.pausedNow.Add(-1)
		}
		return fail
	}
}

// parked reports whether the unit is parked, on committed state; read as
// checkAt reads, not under the job's wait bound.
func (r *simRun[U]) parked(key string) bool {
	state, _, found, err := r.db.observer().Auto().LookupUnitFailure(context.Background(), r.job.Name, key)
	return err == nil && found && state == idem.UnitStateParked
}

// checkAt checks the invariants that must hold at every point, on
// committed state, while the job is stopped at p.
func (r *simRun[U]) checkAt(p idemtest.CrashPoint, detail string) {
	// Observations are serialised: two workers' reads must not interleave,
	// or an older snapshot judged after a newer one looks like a regression.
	r.checkMu.Lock()
	defer r.checkMu.Unlock()
	obs := r.db.observer().Auto()
	// Not the job's context: it carries the job's wait bound, half its
	// shortest lease (500ms under a lease of 1s), and a fresh observer
	// pool's first connection on a loaded machine took longer (spec-space
	// seed 38, spec 3, at run.start). The observer waits the default.
	ctx := context.Background()
	// The flags are taken before anything is read: a commit after this
	// sets them again for the next check, and every read below sees those
	// before. What did not change since is not read again.
	r.mu.Lock()
	changed := r.changed
	r.changed = 0
	r.mu.Unlock()
	if p == idemtest.PointEffectBeforeCall {
		entries, err := r.ledgerNow(ctx, obs, changed)
		i := slices.IndexFunc(entries, func(e idem.LedgerEntry) bool { return e.Key == detail })
		if err != nil || i < 0 || entries[i].State != idem.StatePending || entries[i].LeaseOwner == "" {
			r.violate("at %s: provider about to be called for %s without a committed, leased reservation", p, detail)
		}
	}
	if changed == 0 {
		return // nothing was committed since the last check
	}
	// The rows behind the mark are judged again when the mark or the rows
	// may have moved.
	progressOrRows := changed&(changedProgress|changedRows) != 0
	if r.job.Source == SourceWatermarkName && progressOrRows {
		prog, err := r.progressNow(ctx, obs, changed)
		if err != nil {
			r.violate("at %s: read progress: %v", p, err)
			return
		}
		if prog.HasMark {
			r.mu.Lock()
			back := prog.Watermark.Before(r.lastMark)
			last := r.lastMark
			if !back {
				r.lastMark = prog.Watermark
			}
			r.mu.Unlock()
			if back {
				r.violate("at %s: watermark moved backwards from %s to %s", p, last.Format(time.RFC3339), prog.Watermark.Format(time.RFC3339))
			}
			r.checkBehindMark(ctx, p, prog.Watermark)
		}
	}
	if r.job.Source == SourceCursorName && progressOrRows {
		prog, err := r.progressNow(ctx, obs, changed)
		if err == nil && prog.Found {
			r.mu.Lock()
			back, last := prog.Position < r.lastPos, r.lastPos
			if !back {
				r.lastPos = prog.Position
			}
			r.mu.Unlock()
			if back {
				r.violate("at %s: cursor moved backwards from position %d to %d", p, last, prog.Position)
			}
		}
		if err == nil && prog.Cursor != "" {
			var pos int
			fmt.Sscan(prog.Cursor, &pos)
			r.checkBehindCursor(ctx, p, pos)
		}
	}
	if changed&changedLedger == 0 {
		return
	}
	entries, err := r.ledgerNow(ctx, obs, changed)
	if err != nil {
		r.violate("at %s: read ledger: %v", p, err)
		return
	}
	var back []string
	r.mu.Lock()
	for _, e := range entries {
		if _, ok := r.seenAt[e.Key]; !ok {
			r.seenAt[e.Key] = r.clock
		}
		if e.State == idem.StateDone {
			r.doneKeys[e.Key] = true
		} else if r.doneKeys[e.Key] {
			back = append(back, fmt.Sprintf("at %s: ledger row %s went back from done to %s", p, e.Key, e.State))
		}
	}
	r.mu.Unlock()
	for _, v := range back {
		r.violate("%s", v)
	}
}

// ledgerNow is the committed ledger's keys, states and lease owners:
// read when it may have changed since the last read (or that read
// failed), else that read's. Under checkMu.
func (r *simRun[U]) ledgerNow(ctx context.Context, obs idemrt.Querier, changed simChange) ([]idem.LedgerEntry, error) {
	if changed&changedLedger == 0 && r.ledgerSeen {
		return r.seenLedger, nil
	}
	var entries []idem.LedgerEntry
	var err error
	if r.job.Tables.Ledger != "" {
		entries, err = r.db.ledgerStates(ctx, r.job.Tables.Ledger)
	} else {
		entries, err = obs.Ledger(ctx) // a package generated before Job had its tables
	}
	r.seenLedger, r.ledgerSeen = entries, err == nil
	return entries, err
}

// progressNow is the job's committed progress row, as ledgerNow is the
// ledger. Under checkMu.
func (r *simRun[U]) progressNow(ctx context.Context, obs idemrt.Querier, changed simChange) (idemrt.ProgressRow, error) {
	if changed&changedProgress == 0 && r.progressSeen {
		return r.seenProgress, nil
	}
	prog, err := obs.Progress(ctx, r.job.Name)
	r.seenProgress, r.progressSeen = prog, err == nil
	return prog, err
}

// worldMoved says anything the checks read may have changed: the world
// served new units, or a helper outside the hooks wrote.
func (r *simRun[U]) worldMoved() {
	r.mu.Lock()
	r.changed = changedAll
	r.mu.Unlock()
}

// checkBehindMark: every source unit behind the stored watermark is applied,
// but for late arrivals (the overlap exists for them) and a poison unit.
// Applied is its current version under upsert; under insert_once the row
// keeps the key's first written version, which may be any one delivered.
func (r *simRun[U]) checkBehindMark(ctx context.Context, p idemtest.CrashPoint, mark time.Time) {
	r.window.mu.Lock()
	var behind []U
	for k, u := range r.window.units {
		if r.job.MarkOf(u).Before(mark) && !r.late[k] && !r.isPoison(u) {
			behind = append(behind, u)
		}
	}
	r.window.mu.Unlock()
	if !r.job.InsertOnce {
		r.checkApplied(ctx, p, behind, func(u U) []U { return []U{u} })
		return
	}
	r.mu.Lock()
	history := slices.Clone(r.history)
	r.mu.Unlock()
	r.checkApplied(ctx, p, behind, func(u U) []U {
		var versions []U
		for _, d := range history {
			if r.job.keyOf(d.unit) == r.job.keyOf(u) {
				versions = append(versions, d.unit)
			}
		}
		return versions
	})
}

// isPoison reports whether u is the unit whose write always fails.
func (r *simRun[U]) isPoison(u U) bool {
	k := r.fam.brokenUnit()
	return k != "" && r.job.keyOf(u) == k
}

// checkBehindCursor: every log entry before the stored cursor is applied
// (the row holds one of the key's versions the log carries).
func (r *simRun[U]) checkBehindCursor(ctx context.Context, p idemtest.CrashPoint, pos int) {
	r.cursor.mu.Lock()
	log := slices.Clone(r.cursor.log)
	r.cursor.mu.Unlock()
	pos = min(pos, len(log))
	behind := slices.DeleteFunc(slices.Clone(log[:pos]), r.isPoison)
	r.checkApplied(ctx, p, behind, func(u U) []U {
		return slices.DeleteFunc(slices.Clone(log), func(v U) bool { return r.job.keyOf(v) != r.job.keyOf(u) })
	})
}

func (r *simRun[U]) checkApplied(ctx context.Context, p idemtest.CrashPoint, behind []U, acceptable func(U) []U) {
	if len(behind) == 0 {
		return
	}
	if r.job.HasDest {
		rows, err := r.job.Rows(ctx, r.db.observer())
		if err != nil {
			r.violate("at %s: read rows: %v", p, err)
			return
		}
		byKey := map[string]string{}
		for _, row := range rows {
			byKey[r.job.keyOf(row)] = oracleJSON(row)
		}
		for _, u := range behind {
			got, ok := byKey[r.job.keyOf(u)]
			if !ok || !slices.ContainsFunc(acceptable(u), func(v U) bool { return oracleJSON(v) == got }) {
				r.violate("at %s: progress is ahead of work: %s is behind the stored position but not applied", p, r.job.keyOf(u))
				return
			}
		}
		return
	}
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		return
	}
	r.mu.Lock()
	history := slices.Clone(r.history)
	r.mu.Unlock()
	for _, u := range behind {
		for fi, fx := range r.job.Effects {
			if fx.When != idemrt.WhenAlways {
				continue
			}
			// Reserved under the versions in force when the unit was
			// delivered (a bump since renders its key anew), or done
			// already: a purge past retention may have removed its row.
			keys := map[string]bool{r.effectKey(fx, u): true}
			for _, d := range history {
				if r.job.keyOf(d.unit) == r.job.keyOf(u) {
					keys[oracleKey(fx.Key, d.versions.vars(fi), d.unit)] = true
				}
			}
			if !slices.ContainsFunc(entries, func(e idem.LedgerEntry) bool { return keys[e.Key] }) && !r.prov.appliedAny(keys) {
				r.violate("at %s: progress is ahead of work: effect %s of %s is behind the stored position but not reserved", p, fx.Name, r.job.keyOf(u))
				return
			}
		}
	}
}
