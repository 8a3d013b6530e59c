package crashsim

// The crash simulation's end checks, common to every family (each
// family adds its own: its checkEnd). Every scenario also re-runs and backfills after convergence (4), checks
// kept results against the provider's first answer, and purges once more
// past retention. The watermark fixture carries late arrivals inside the
// overlap and on its boundary.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// expect is the oracle's end state for this scenario: the rows, the effect
// keys that must and may be applied, and (for deterministic families) the
// provider calls per key.
type simExpect[U any] struct {
	rows        map[string]U
	relaxedRows bool // which version of a row wins is up to the schedule
	must, may   map[string]bool
	parked      map[string]bool // effect keys that end parked, never applied
	// parkedApplied is a parked key a stalled worker's late call applied.
	parkedApplied string
	calls         map[string]int // exact calls per key; nil when not predictable
}

func (r *simRun[U]) expect() simExpect[U] {
	m := newSimModel(r.job)
	lastOf := map[string]int{}
	failed := -1 // the delivery whose write failed, if a newer one replaced it before the retry
	failedKey, failedAt := r.fam.failedWrite()
	for i, d := range r.history {
		k := r.job.keyOf(d.unit)
		if failedKey != "" && k == failedKey && i < failedAt {
			failed = i
		}
		lastOf[k] = i
	}
	if r.job.Source != SourceWatermarkName || failed < 0 || lastOf[failedKey] == failed {
		failed = -1 // a cursor or a queue hands the failed version in again
	}
	mustKeys := map[string]bool{}
	may := map[string]bool{}
	for i, d := range r.history {
		if r.isPoison(d.unit) {
			continue
		}
		if i == failed {
			continue // its write failed, and the source served a newer version before the retry
		}
		_, keys := m.apply(d)
		last := lastOf[r.job.keyOf(d.unit)] == i
		for _, k := range keys {
			may[k] = true
			if last {
				mustKeys[k] = true
			}
		}
		// Under overlap any version may be the one inserted first.
		for fi, fx := range r.job.Effects {
			if fx.When == idemrt.WhenInserted || r.job.InsertOnce {
				may[oracleKey(fx.Key, d.versions.vars(fi), d.unit)] = true
			}
		}
	}
	e := simExpect[U]{rows: m.rows, must: m.owed, may: may, parked: map[string]bool{}}
	if r.fam.overlapping(r.sc) {
		e.relaxedRows = r.job.InsertOnce
		e.must = map[string]bool{}
		for k := range m.owed {
			if mustKeys[k] || r.insertedOnce(k) {
				e.must[k] = true
			}
		}
	}
	if r.fam.exactCalls(r.sc) && !e.relaxedRows {
		e.calls = map[string]int{}
		for k := range e.must {
			e.calls[k] = 1
		}
	}
	r.fam.expect(r, &e)
	return e
}

// insertedOnce reports whether an effect key is owed whatever the schedule:
// every version of its unit renders the same key.
func (r *simRun[U]) insertedOnce(k string) bool {
	for fi, fx := range r.job.Effects {
		for _, d := range r.history {
			if oracleKey(fx.Key, d.versions.vars(fi), d.unit) != k {
				continue
			}
			unit := r.job.keyOf(d.unit)
			return !slices.ContainsFunc(r.history, func(o simDelivery[U]) bool {
				return r.job.keyOf(o.unit) == unit && oracleKey(fx.Key, o.versions.vars(fi), o.unit) != k
			})
		}
	}
	return false
}

// effectOf is the effect an applied key belongs to.
func (r *simRun[U]) effectOf(key string) Effect {
	name := r.prov.effect[key]
	for _, fx := range r.job.Effects {
		if fx.Name == name {
			return fx
		}
	}
	return Effect{}
}

// checkEnd checks the end state against the oracle.
func (r *simRun[U]) checkEnd() []string {
	ctx := context.Background()
	obs := r.db.observer()
	exp := r.expect()
	if r.job.HasDest {
		r.checkRows(ctx, exp)
	}
	r.prov.mu.Lock()
	applied := maps.Clone(r.prov.applied)
	calls := maps.Clone(r.prov.calls)
	first := maps.Clone(r.prov.first)
	r.prov.mu.Unlock()
	for k := range exp.must {
		if applied[k] != 1 {
			r.violate("end: effect %s applied %d times, want once", k, applied[k])
		}
	}
	for k := range applied {
		if !exp.must[k] && !exp.may[k] {
			r.violate("end: provider applied unexpected effect key %s (the spec's key templates give no such key)", k)
		}
	}
	if exp.calls != nil {
		for k, n := range calls {
			if n != exp.calls[k] {
				r.violate("end: provider called %d times for %s, want %d", n, k, exp.calls[k])
			}
		}
		for k, n := range exp.calls {
			if calls[k] == 0 && n > 0 {
				r.violate("end: provider never called for %s, want %d calls", k, n)
			}
		}
	}
	for k := range exp.parked {
		if applied[k] != 0 && k != exp.parkedApplied {
			r.violate("end: effect %s applied though it failed max_attempts times", k)
		}
	}
	if len(exp.parked) > 0 && r.parkedEffects == 0 {
		r.violate("end: no report counted the parked effect")
	}
	r.checkParkedUnits(ctx)
	entries, err := obs.Auto().Ledger(ctx)
	if err != nil {
		r.violate("end: read ledger: %v", err)
	}
	keep := map[string]bool{}
	for _, fx := range r.job.Effects {
		keep[fx.Name] = fx.KeepResult
	}
	r.checkKeyRecords(ctx, "end", entries, false)
	oneAttempt, why := r.fam.oneAttempt(r) // a key whose row must count exactly one attempt
	for _, e := range entries {
		if v := r.fam.rowViolation(r, e); v != "" {
			r.violate("%s", v)
			continue
		}
		switch {
		case exp.parked[e.Key] && e.State != idem.StateParked:
			r.violate("end: ledger row %s is %s, want failed (parked after max_attempts)", e.Key, e.State)
		case !exp.parked[e.Key] && e.State != idem.StateDone:
			r.violate("end: ledger row %s is %s, want done", e.Key, e.State)
		case e.State == idem.StateDone && applied[e.Key] != 1:
			r.violate("end: ledger row %s is done but matches no applied effect", e.Key)
		case e.State == idem.StateDone && keep[e.Effect] && string(e.Result) != string(first[e.Key]):
			r.violate("end: ledger row %s keeps result %q, want the provider's first answer %q", e.Key, e.Result, first[e.Key])
		case e.State == idem.StateDone && !keep[e.Effect] && len(e.Result) > 0:
			r.violate("end: ledger row %s keeps a result though keep_result is off", e.Key)
		case oneAttempt != "" && e.Key == oneAttempt && e.Attempts != 1:
			r.violate("end: ledger row %s counts %d attempts; want 1: its one success (%s)", e.Key, e.Attempts, why)
		}
	}
	want := len(applied) + len(exp.parked)
	if exp.parkedApplied != "" {
		want-- // applied and parked: one row
	}
	if len(entries) != want && !r.fam.purgesPastRetention() {
		r.violate("end: %d ledger rows for %d applied and %d parked effects, want %d", len(entries), len(applied), len(exp.parked), want)
	}
	r.fam.checkEnd(ctx, r, exp)
	r.prov.mu.Lock()
	early := slices.Clone(r.prov.early)
	r.prov.mu.Unlock()
	if len(early) > 0 {
		r.violate("end: the provider was called before the time its RetryAfter named: %s", strings.Join(early, "; "))
	}
	r.checkFleet()
	r.checkGate()
	r.prov.mu.Lock()
	twice := slices.Clone(r.prov.twice)
	r.prov.mu.Unlock()
	if len(twice) > 0 {
		r.violate("end: a key was called again while its earlier call still hung: %s", strings.Join(twice, ", "))
	}
	r.checkRerun(ctx, exp)
	// After the re-run and backfill (the oracle knows nothing of a
	// forgotten key), before the purge empties the ledger.
	r.fam.checkAfterRerun(ctx, r)
	if slices.ContainsFunc(r.job.Effects, func(fx Effect) bool { return fx.Retention > 0 }) {
		r.purgeNow(ctx, "after convergence", true)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) > 0 && r.convergeErr != nil {
		// Why the work did not converge, when a run could not do it (the
		// database refused a session, say): the end's findings alone
		// show only what is missing.
		r.violations = append(r.violations, fmt.Sprintf("end: the last convergence run returned: %v", r.convergeErr))
	}
	return r.violations
}

// checkParkedUnits: at the end only the poison unit may be left in the
// parked table, parked if the job parks units (and then reported, and
// passed by the watermark); a unit whose write failed once is cleared by
// its successful retry.
func (r *simRun[U]) checkParkedUnits(ctx context.Context) {
	units, err := r.db.observer().Auto().UnitFailures(ctx)
	if err != nil {
		r.violate("end: read parked units: %v", err)
		return
	}
	parked := false
	for _, u := range units {
		switch {
		case u.Job != r.job.Name:
		case u.Key != r.fam.brokenUnit():
			r.violate("end: unit %s left in the parked table (%s, %d attempts) though its write succeeded", u.Key, u.State, u.Attempts)
		case r.job.UnitMaxAttempts > 0 && u.State != idem.UnitStateParked:
			r.violate("end: poison unit %s is %s after %d attempts, want parked at max_attempts %d", u.Key, u.State, u.Attempts, r.job.UnitMaxAttempts)
		default:
			parked = u.State == idem.UnitStateParked
		}
	}
	if r.sc.poison == 0 || r.job.UnitMaxAttempts == 0 {
		return
	}
	if !parked {
		r.violate("end: poison unit %s was not parked after %d failed writes", r.fam.brokenUnit(), r.job.UnitMaxAttempts)
	}
	if r.parkedUnits == 0 {
		r.violate("end: no report counted the parked unit")
	}
	if r.job.Source == SourceWatermarkName {
		prog, err := r.db.observer().Auto().Progress(ctx, r.job.Name)
		mark := r.job.MarkOf(r.job.Unit(r.sc.poison, 1))
		if err != nil || !prog.HasMark || !prog.Watermark.After(mark) {
			r.violate("end: the watermark (%v) did not pass the parked unit's mark %s", prog.Watermark, mark)
		}
	}
}

// checkRows: one row per key, equal to the oracle's version.
func (r *simRun[U]) checkRows(ctx context.Context, exp simExpect[U]) {
	rows, err := r.job.Rows(ctx, r.db.observer())
	if err != nil {
		r.violate("end: read rows: %v", err)
		return
	}
	got := map[string]string{}
	for _, row := range rows {
		k := r.job.keyOf(row)
		if _, dup := got[k]; dup {
			r.violate("end: two rows for key %s", k)
		}
		got[k] = oracleJSON(row)
	}
	if exp.relaxedRows {
		for k, row := range got {
			if !r.isVersionOf(k, row) {
				r.violate("end: row %s = %s is no version the source delivered", k, row)
			}
		}
		return
	}
	if len(rows) != len(exp.rows) {
		r.violate("end: %d rows, want one per key (%d)", len(rows), len(exp.rows))
	}
	for k, u := range exp.rows {
		if want := oracleJSON(u); got[k] != want {
			r.violate("end: row %s = %s, want %s", k, got[k], want)
		}
	}
}

func (r *simRun[U]) isVersionOf(key, row string) bool {
	return slices.ContainsFunc(r.history, func(d simDelivery[U]) bool {
		return r.job.keyOf(d.unit) == key && oracleJSON(d.unit) == row
	})
}

// onlyParked reports whether err is nil or lists only effects already
// parked, which every later call that meets them reports again.
func onlyParked(err error) bool {
	var fe *idem.FailuresError
	if err == nil {
		return true
	}
	if !errors.As(err, &fe) || fe.Count != len(fe.Failures) {
		return false
	}
	for _, f := range fe.Failures {
		if !errors.Is(f.Err, idem.ErrEffectParked) {
			return false
		}
	}
	return true
}

// checkParkedWhy: an effect reported parked says it is permanent exactly
// when the provider called its failure permanent, whoever parked it and
// however long ago (the ledger keeps why, not only the text).
func (r *simRun[U]) checkParkedWhy(where string, err error) {
	var fe *idem.FailuresError
	if !errors.As(err, &fe) {
		return
	}
	r.prov.mu.Lock()
	defer r.prov.mu.Unlock()
	for _, f := range fe.Failures {
		if f.Effect == "" || !errors.Is(f.Err, idem.ErrEffectParked) {
			continue
		}
		if got, want := errors.Is(f.Err, idem.ErrPermanent), r.prov.permanent[f.Key]; got != want {
			r.violate("end: %s reports effect %s parked, permanent %v; the provider's failure was permanent %v (%v)", where, f.Key, got, want, f.Err)
		}
	}
}

// checkRerun: re-running the completed window, and backfilling from the
// start, write nothing and perform nothing (a poison unit fails again).
func (r *simRun[U]) checkRerun(ctx context.Context, exp simExpect[U]) {
	if r.forgotAtEnd {
		return
	}
	failing := 0
	if r.sc.poison > 0 {
		failing = 1
	}
	r.setClock(r.now().Add(time.Minute))
	out := r.cleanRun(len(r.phases) - 1)
	if out.rep.Inserted+out.rep.Updated+out.rep.EffectsDone != 0 || (failing == 0 && !onlyParked(out.err)) {
		r.violate("end: a re-run changed something: %s (err %v)", out.rep, out.err)
	}
	r.checkParkedWhy("a re-run", out.err)
	if r.job.Source != SourceWatermarkName {
		return
	}
	out, _ = r.runTask(len(r.phases)-1, workBackfill)
	rep, err := out.rep, out.err
	r.checkParkedWhy("a backfill from the start", err)
	done := rep.EffectsDone
	if r.fam.purgesPastRetention() && slices.ContainsFunc(r.job.Effects, func(fx Effect) bool { return fx.When == idemrt.WhenAlways }) {
		// A purge past retention forgot done effects: the backfill
		// processes their units as new (docs/guarantees.md: a replay
		// after retention is processed again), and a when: always
		// effect is decided again, under its same key.
		done = 0
	}
	if rep.Inserted+rep.Updated+done != 0 || (failing == 0 && (!onlyParked(err) || rep.Failed != 0)) {
		r.violate("end: a backfill from the start changed something: %s (err %v)", rep, err)
	}
}

// checkUnfaulted checks a scenario without a fault: each run's report
// counts, and (handed-in) a replay of the units is a pure dedupe.
func (r *simRun[U]) checkUnfaulted(ctx context.Context) {
	r.checkCounts()
	if r.job.Source == SourceNoneName {
		r.checkReplay(ctx)
	}
}

// checkCounts compares each sequential run's report with the oracle's
// count of what it was served.
func (r *simRun[U]) checkCounts() {
	m := newSimModel(r.job)
	served := func(inc int) []U {
		switch r.job.Source {
		case SourceWatermarkName:
			r.window.mu.Lock()
			defer r.window.mu.Unlock()
			return r.window.served[inc]
		case SourceCursorName:
			r.cursor.mu.Lock()
			defer r.cursor.mu.Unlock()
			return r.cursor.served[inc]
		}
		return nil
	}
	phase := 0
	for _, run := range r.runs {
		units := served(run.inc)
		if r.job.Source == SourceNoneName {
			if phase >= len(r.phases) {
				break
			}
			units = r.played(phase)
			phase++
		}
		// The oracle counts on its own: Report's counting is code under test.
		want := map[idem.Outcome]int{}
		done := 0
		for _, u := range units {
			owed := maps.Clone(m.owed)
			o, keys := m.apply(simDelivery[U]{unit: u, versions: r.versions})
			want[o]++
			for _, k := range keys {
				if !owed[k] {
					done++ // a key decided again is deduped, not done again
					owed[k] = true
				}
			}
		}
		got := run.rep
		if got.Seen != len(units) || got.Inserted != want[idem.OutcomeInserted] || got.Updated != want[idem.OutcomeUpdated] ||
			got.Unchanged != want[idem.OutcomeUnchanged] || got.Deduped != want[idem.OutcomeDeduped] || got.Accepted != want[idem.OutcomeAccepted] ||
			got.Failed != want[idem.OutcomeMismatch] || got.Mismatched != want[idem.OutcomeMismatch] || got.EffectsDone != done || got.EffectsFailed != 0 ||
			got.EffectsBusy != 0 || got.EffectsWaiting != 0 {
			// No run here meets a fault or another worker: no effect is
			// busy (a repeat of a key whose call is in flight waits for
			// it, and is deduped) and none waits for a retry.
			r.violate("report counts: got %s, the oracle wants seen=%d inserted=%d updated=%d unchanged=%d deduped=%d accepted=%d mismatched=%d effects done=%d, none busy or waiting",
				got, len(units), want[idem.OutcomeInserted], want[idem.OutcomeUpdated], want[idem.OutcomeUnchanged], want[idem.OutcomeDeduped], want[idem.OutcomeAccepted], want[idem.OutcomeMismatch], done)
		}
	}
}

// checkReplay: handing every unit in again returns, for each effect kept,
// the provider's first result, and calls nothing.
func (r *simRun[U]) checkReplay(ctx context.Context) {
	verbs, closeInc := r.aux(r.now)
	defer closeInc()
	r.prov.mu.Lock()
	before := r.prov.n
	first := maps.Clone(r.prov.first)
	r.prov.mu.Unlock()
	rep, err := verbs.Process(ctx, r.phases[0]...)
	r.prov.mu.Lock()
	calls := r.prov.n - before
	r.prov.mu.Unlock()
	if err != nil || calls != 0 || rep.Deduped != len(r.phases[0]) {
		r.violate("replay: handing the units in again was not a pure dedupe: %s, %d provider calls (err %v)", rep, calls, err)
	}
	for _, ur := range rep.Units {
		for _, er := range ur.Effects {
			fx := r.effectOf(er.Key)
			if fx.KeepResult && string(er.Result) != string(first[er.Key]) {
				r.violate("replay: effect %s returned %q, want the provider's first result %q", er.Key, er.Result, first[er.Key])
			}
		}
	}
}

// checkMismatch redelivers a known unit with one field changed at a time,
// for every field outside the key: each must be reported as a mismatch,
// write nothing and perform nothing.
func (r *simRun[U]) checkMismatch(ctx context.Context, exp simExpect[U]) {
	verbs, closeInc := r.aux(r.now)
	defer closeInc()
	orig := r.phases[0][0]
	for _, f := range r.job.Fields {
		if f.InKey {
			continue
		}
		changed := oracleVary(orig, f)
		r.prov.mu.Lock()
		before := r.prov.n
		r.prov.mu.Unlock()
		rep, _ := verbs.Process(ctx, changed)
		r.prov.mu.Lock()
		calls := r.prov.n - before
		r.prov.mu.Unlock()
		if rep.Mismatched != 1 || rep.Inserted+rep.Updated != 0 || calls != 0 {
			r.violate("mismatch: %s redelivered with field %s changed was not reported as a mismatch: %s, %d provider calls", r.job.keyOf(orig), f.Name, rep, calls)
		}
	}
	if r.job.HasDest {
		r.checkRows(ctx, exp)
	}
}
