package idemops

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Status is the state of every job of a package, and whether it is healthy.
type Status struct {
	Package string    `json:"package"`
	Dialect string    `json:"dialect"`
	At      time.Time `json:"at"`
	// Healthy is false when something is parked or owed past its lease;
	// Problems then says what, one line per job.
	Healthy  bool        `json:"healthy"`
	Problems []string    `json:"problems"`
	Jobs     []JobStatus `json:"jobs"`
}

// JobStatus is one job's progress, effects and parked units.
type JobStatus struct {
	Job string `json:"job"`
	// Source is watermark, cursor or none (units are handed in); empty for
	// a job that the database holds rows of but the spec no longer has.
	Source   string         `json:"source"`
	Progress *Progress      `json:"progress"` // nil before the first save, and for handed-in units
	Effects  []EffectStatus `json:"effects"`
	Units    UnitStatus     `json:"units"`
	Oldest   *time.Time     `json:"oldest_owed"` // the oldest owed effect's reservation
	Age      *Seconds       `json:"oldest_owed_age_s"`
	InSpec   bool           `json:"in_spec"`
}

// Progress is a watermark or cursor job's saved progress.
type Progress struct {
	Watermark *time.Time `json:"watermark,omitempty"`
	Cursor    *string    `json:"cursor,omitempty"`
	Position  int64      `json:"cursor_position"`
	// Saved is when a run last saved it. A cursor is saved only when it
	// moves; a watermark also when a run found it could not move.
	Saved      time.Time `json:"saved"`
	JobVersion int       `json:"job_version"`
}

// EffectStatus counts one effect's ledger rows by state.
type EffectStatus struct {
	Effect string `json:"effect"`
	// Owed counts every pending row (Leased and Failing included): the
	// next run or drain performs those that no live lease holds.
	Owed int `json:"owed"`
	// Leased are held by a worker whose lease has not run out.
	Leased int `json:"leased"`
	// Failing were attempted and failed (or their worker died), fewer than
	// max_attempts times, and are owed again: retried until max_attempts,
	// like a failing unit. Not a state of its own: pending, with attempts.
	Failing int `json:"failing"`
	// Parked failed max_attempts times or permanently: nothing retries
	// them until a person does.
	Parked int `json:"parked"`
	// Done counts the rows done under the current version. Owed, Leased,
	// Failing and Parked count rows of every version: an older version's
	// owed row is still performed, under its old key.
	Done int `json:"done"`
	// Version is the effect's version in the spec; for an effect the spec
	// no longer has, the newest the ledger holds.
	Version int `json:"version"`
	// History counts the rows done under Superseded, the versions older
	// than Version that the ledger holds rows of: kept as history, never
	// performed again under those keys.
	History    int   `json:"history"`
	Superseded []int `json:"superseded_versions"`
	// Again counts the units done under a superseded version and not yet
	// reserved under the current one: a Run that reads them again in its
	// overlap, a Backfill whose window holds them or a Process of them
	// performs the effect again for each, once, under the current
	// version's key.
	Again int `json:"again"`
	// Overdue are owed, held by no live lease, and untouched (not
	// reserved, claimed, released or put back) for longer than the
	// effect's lease: nobody is working on them.
	Overdue int `json:"overdue"`
	// Waiting are owed rows backing off after a failure (retry, or the
	// provider's RetryAfter): nothing claims them before NextAttempt, the
	// soonest of their next-attempt times.
	Waiting     int        `json:"waiting"`
	NextAttempt *time.Time `json:"next_attempt"`
	Lease       Seconds    `json:"lease_s"`
	Oldest      *time.Time `json:"oldest_owed"`
	InSpec      bool       `json:"in_spec"`
	// Estimated says that Done and History are estimates: the effect has
	// more done rows than status counts one by one (100,000), so they are
	// counted on a sample of the ledger (about 100,000 rows) and scaled.
	Estimated bool `json:"done_estimated"`
	// More says which counts StatusUpTo stopped at its limit: the ledger
	// holds more such rows than they show. Nil from Status.
	More *More `json:"more,omitempty"`
	// Gate is set while the effect is paused by its provider or its
	// circuit is open (idem.PauseEffect, spec circuit).
	Gate *GateStatus `json:"gate,omitempty"`
	// Override is set while the effect's rate or concurrency is set by
	// hand (idem.SetLimits) instead of the spec's.
	Override *OverrideStatus `json:"limits_override,omitempty"`
}

// More says which of an effect's counts are lower bounds (StatusUpTo).
type More struct {
	// Owed: the job owes more rows than were read, so Owed, Leased,
	// Failing, Waiting, Overdue and Oldest count the rows read, the
	// first in effect key order.
	Owed bool `json:"owed,omitempty"`
	// Parked: the job has more parked rows than were counted.
	Parked bool `json:"parked,omitempty"`
	// Done: the effect has more done rows than were counted; Done and
	// History count the newest and the oldest, per version.
	Done bool `json:"done,omitempty"`
	// Again: more units are to be performed again than were counted.
	Again bool `json:"again,omitempty"`
}

func (es *EffectStatus) more() *More {
	if es.More == nil {
		es.More = &More{}
	}
	return es.More
}

// UnitStatus counts a job's rows in the parked table by state.
type UnitStatus struct {
	Failing int `json:"failing"` // failed fewer than max_attempts times: progress waits for them
	Parked  int `json:"parked"`  // failed max_attempts times: passed by progress, left for a person
	Retry   int `json:"retry"`   // put back by a person: the next run (or drain) writes them
	// More: StatusUpTo stopped counting at its limit; the job has more
	// rows in the parked table than these count.
	More bool `json:"more,omitempty"`
}

// Status reads every job's state. Jobs and effects come in spec order;
// rows of jobs or effects the spec no longer has follow, marked.
func (d *DB) Status(ctx context.Context) (*Status, error) { return d.status(ctx, 0) }

// StatusUpTo is Status for a page that must answer at once however large
// the ledger and its backlog: each count reads at most about limit rows
// (a job's owed rows, a job's parked rows, an effect's done rows, a job's
// parked units), each on the index Status uses, and a count that stops
// there is marked in EffectStatus.More or UnitStatus.More, a lower bound
// ("10,000+"). Done rows are never estimated from a sample. Problems
// count what was read.
func (d *DB) StatusUpTo(ctx context.Context, limit int) (*Status, error) {
	return d.status(ctx, max(limit, 1))
}

// status is Status, or StatusUpTo when limit > 0.
func (d *DB) status(ctx context.Context, limit int) (*Status, error) {
	now := d.now().UTC()
	st := &Status{Package: d.pkg.Name, Dialect: string(d.dialect), At: now, Healthy: true, Problems: []string{}}
	byJob := map[string]*JobStatus{}
	jobFor := func(name string) *JobStatus {
		if js, ok := byJob[name]; ok {
			return js
		}
		js := &JobStatus{Job: name, Effects: []EffectStatus{}}
		if j := d.job(name); j != nil {
			js.Source, js.InSpec = string(j.Source), true
			for _, e := range j.Effects {
				js.Effects = append(js.Effects, EffectStatus{Effect: e.Name, Lease: Seconds(e.Lease), Version: e.Version, Superseded: []int{}, InSpec: true})
			}
		}
		byJob[name] = js
		return js
	}
	for _, j := range d.pkg.Jobs {
		jobFor(j.Name)
	}
	if err := d.readProgress(ctx, jobFor); err != nil {
		return nil, err
	}
	_, err := d.readEffects(ctx, now, jobFor, limit)
	if err != nil {
		return nil, err
	}
	if limit > 0 {
		err = d.readUnitsUpTo(ctx, jobFor, limit)
	} else {
		err = d.readUnits(ctx, jobFor)
	}
	if err != nil {
		return nil, err
	}
	if err := d.readGates(ctx, now, jobFor); err != nil {
		return nil, err
	}
	if err := d.readOverrides(ctx, jobFor); err != nil {
		return nil, err
	}

	for _, j := range d.pkg.Jobs {
		st.Jobs = append(st.Jobs, *byJob[j.Name])
		delete(byJob, j.Name)
	}
	var gone []string
	for name := range byJob {
		gone = append(gone, name)
	}
	slices.Sort(gone)
	for _, name := range gone {
		st.Jobs = append(st.Jobs, *byJob[name])
	}
	for i := range st.Jobs {
		js := &st.Jobs[i]
		for k := range js.Effects {
			if err := d.readOverdue(ctx, now, js.Job, limit, &js.Effects[k]); err != nil {
				return nil, err
			}
			if err := d.readAgain(ctx, js.Job, limit, &js.Effects[k]); err != nil {
				return nil, err
			}
		}
		for _, e := range js.Effects {
			if e.Oldest != nil && (js.Oldest == nil || e.Oldest.Before(*js.Oldest)) {
				js.Oldest = e.Oldest
			}
		}
		if js.Oldest != nil {
			age := Seconds(now.Sub(*js.Oldest))
			js.Age = &age
		}
		if p := js.problem(); p != "" {
			st.Healthy = false
			st.Problems = append(st.Problems, p)
		}
	}
	return st, nil
}

// problem says what makes a job unhealthy, or "".
func (js *JobStatus) problem() string {
	var parked, overdue int
	var moreParked, moreOwed bool
	for _, e := range js.Effects {
		parked += e.Parked
		overdue += e.Overdue
		if e.More != nil {
			moreParked, moreOwed = moreParked || e.More.Parked, moreOwed || e.More.Owed
		}
	}
	var parts []string
	if parked > 0 {
		parts = append(parts, orMore(count(parked, "parked effect"), moreParked))
	}
	if js.Units.Parked > 0 {
		parts = append(parts, orMore(count(js.Units.Parked, "parked unit"), js.Units.More))
	}
	if overdue > 0 {
		parts = append(parts, orMore(count(overdue, "effect"), moreOwed)+" owed past its lease")
	}
	if len(parts) == 0 {
		return ""
	}
	s := js.Job + ": " + parts[0]
	for _, p := range parts[1:] {
		s += ", " + p
	}
	return s
}

// orMore marks a count that StatusUpTo stopped: "at least 10000 parked
// effects".
func orMore(counted string, more bool) string {
	if more {
		return "at least " + counted
	}
	return counted
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func (d *DB) readProgress(ctx context.Context, jobFor func(string) *JobStatus) error {
	rows, err := d.progressRows(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", d.t.Progress, err)
	}
	for _, r := range rows {
		jobFor(r.job).Progress = &Progress{Watermark: r.watermark.ptr(), Cursor: r.cursor, Position: r.position, Saved: r.saved.t, JobVersion: r.jobVersion}
	}
	return nil
}

// ExactDoneLimit is the most done rows of one effect that Status counts
// exactly. Done rows are kept for the effects' retention and can be many
// millions: above this, an effect's done rows (current version and
// history) are estimated from a sample of the ledger, so that status
// costs the same on a ledger of a year as on one of a day.
const ExactDoneLimit = 100_000

// versionRows are one effect version's counts, as the ledger holds them.
type versionRows struct {
	job     string
	version int
	es      EffectStatus
}

// readEffects counts every effect's ledger rows by state, without reading
// the done rows kept for retention: the owed and parked rows are read on
// the (job, state) index, and the done rows counted on the (job, effect,
// state, done_at) index, exactly up to ExactDoneLimit and estimated above
// (readDone). Counted per effect version, so that done rows of superseded
// versions are told apart as history. With a limit (StatusUpTo), each
// count stops after about limit rows, and owedThrough holds the last
// effect key read of each job whose owed rows were not all read.
func (d *DB) readEffects(ctx context.Context, now time.Time, jobFor func(string) *JobStatus, limit int) (owedThrough map[string]string, err error) {
	var pairs []effectPair
	var jobs []string
	if limit > 0 {
		// The effects with done rows, probed on their index; those that
		// only owe or park are found among the rows read. (ledgerEffects's
		// probe of the open rows reads a job's backlog on SQLite.)
		if pairs, err = d.doneEffects(ctx); err == nil {
			jobs, err = d.ledgerJobs(ctx)
		}
	} else {
		pairs, err = d.ledgerEffects(ctx)
		for _, p := range pairs {
			if len(jobs) == 0 || jobs[len(jobs)-1] != p.job {
				jobs = append(jobs, p.job)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	// Each job's owed rows on a connection of their own (their cost is the
	// backlog, which can be large after an outage), each into a map of its
	// own: the jobs' versions are apart, so the maps merge without clashes.
	owed := make([]map[versionKey]*versionRows, len(jobs))
	through := make([]string, len(jobs))
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, job := range jobs {
		owed[i] = map[versionKey]*versionRows{}
		wg.Go(func() { through[i], errs[i] = d.readOwed(ctx, now, job, versionsIn(owed[i]), limit) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	owedThrough = map[string]string{}
	for i, job := range jobs {
		if through[i] != "" {
			owedThrough[job] = through[i]
		}
	}
	byVersion := map[versionKey]*versionRows{}
	for _, m := range owed {
		maps.Copy(byVersion, m)
	}
	row := versionsIn(byVersion)
	var many []effectPair // more done rows than exactDone: estimated (or, with a limit, more than it)
	moreParked := map[string]bool{}
	if limit > 0 {
		for _, job := range jobs {
			if moreParked[job], err = d.readParkedUpTo(ctx, job, limit, row); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range pairs {
		if limit == 0 {
			if err := d.readParked(ctx, p.job, p.effect, row); err != nil {
				return nil, err
			}
		}
		exact, err := d.readDone(ctx, p.job, p.effect, limit, row)
		if err != nil {
			return nil, err
		}
		if !exact {
			many = append(many, p)
		}
	}
	if limit == 0 {
		if err := d.sampleDone(ctx, many, row); err != nil {
			return nil, err
		}
	}
	all := make([]*versionRows, 0, len(byVersion))
	for _, r := range byVersion {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *versionRows) int {
		return cmp.Or(cmp.Compare(a.job, b.job), cmp.Compare(a.es.Effect, b.es.Effect), cmp.Compare(a.version, b.version))
	})
	for i, r := range all {
		js := jobFor(r.job)
		k := slices.IndexFunc(js.Effects, func(e EffectStatus) bool { return e.Effect == r.es.Effect })
		if k < 0 {
			// The spec no longer says: its newest version in the ledger
			// (rows come in version order) is the current one.
			newest := r.version
			for _, later := range all[i+1:] {
				if later.job == r.job && later.es.Effect == r.es.Effect {
					newest = later.version
				}
			}
			js.Effects = append(js.Effects, EffectStatus{Effect: r.es.Effect, Lease: Seconds(DefaultLease), Version: newest, Superseded: []int{}})
			k = len(js.Effects) - 1
		}
		es := &js.Effects[k]
		es.Owed += r.es.Owed
		es.Leased += r.es.Leased
		es.Failing += r.es.Failing
		es.Parked += r.es.Parked
		es.Waiting += r.es.Waiting
		es.Oldest = earliest(es.Oldest, r.es.Oldest)
		es.NextAttempt = earliest(es.NextAttempt, r.es.NextAttempt)
		es.Estimated = es.Estimated || r.es.Estimated
		if limit > 0 && slices.Contains(many, effectPair{r.job, r.es.Effect}) {
			es.more().Done = true
		}
		if r.version < es.Version {
			if r.es.Done > 0 {
				es.History += r.es.Done
				es.Superseded = append(es.Superseded, r.version)
			}
			continue
		}
		es.Done += r.es.Done
	}
	// A job's counts that stopped at the limit mark each of its effects,
	// those of which no row was read included.
	for job := range owedThrough {
		for k := range jobFor(job).Effects {
			jobFor(job).Effects[k].more().Owed = true
		}
	}
	for job, more := range moreParked {
		for k := range jobFor(job).Effects {
			if more {
				jobFor(job).Effects[k].more().Parked = true
			}
		}
	}
	return owedThrough, nil
}

type versionKey struct {
	job, effect string
	version     int
}

// versionsIn returns the counts of an effect version in m, added the
// first time they are asked for.
func versionsIn(m map[versionKey]*versionRows) func(job, effect string, version int) *versionRows {
	return func(job, effect string, version int) *versionRows {
		k := versionKey{job, effect, version}
		if r, ok := m[k]; ok {
			return r
		}
		r := &versionRows{job: job, version: version, es: EffectStatus{Effect: effect}}
		m[k] = r
		return r
	}
}

type effectPair struct{ job, effect string }

// ledgerEffects lists the (job, effect) pairs the ledger holds rows of, in
// order: each is the least value after the last, one probe per pair, not
// a read of the ledger. A job is the next on the (job, unit_key) index;
// an effect, the least of the next on the done rows' (job, effect,
// done_at) index and the next among the job's open rows (the backlog,
// which readOwed reads anyway).
func (d *DB) ledgerEffects(ctx context.Context) ([]effectPair, error) {
	var pairs []effectPair
	jobs, err := d.ledgerJobs(ctx)
	if err != nil {
		return nil, err
	}
	nextEffect := d.q(`SELECT min(e) FROM (
    SELECT min(effect) AS e FROM ` + d.t.Ledger + ` WHERE job = ? AND effect > ? AND state = '` + idem.StateDone + `'
    UNION ALL
    SELECT min(effect) AS e FROM ` + d.t.Ledger + ` WHERE job = ? AND effect > ? AND state IN ('` + idem.StatePending + `', '` + idemrt.StoredParked + `')) AS m`)
	for _, job := range jobs {
		for effect := ""; ; {
			var e sql.NullString
			if err := d.queryRow(ctx, nextEffect, job, effect, job, effect).Scan(&e); err != nil {
				return nil, wrapRead(d.t.Ledger, err)
			}
			if !e.Valid {
				break
			}
			effect = e.String
			pairs = append(pairs, effectPair{job, effect})
		}
	}
	return pairs, nil
}

// ledgerJobs lists the jobs the ledger holds rows of, in order: each the
// next on the (job, unit_key) index after the last, one probe per job.
func (d *DB) ledgerJobs(ctx context.Context) ([]string, error) { return d.jobsIn(ctx, d.t.Ledger) }

// jobsIn lists the jobs table holds rows of, in order, one probe per job on
// an index that leads with job: the ledger's (job, unit_key), the parked
// table's and the key records' primary keys.
func (d *DB) jobsIn(ctx context.Context, table string) ([]string, error) {
	var jobs []string
	nextJob := d.q(`SELECT min(job) FROM ` + table + ` WHERE job > ?`)
	for job := ""; ; {
		var j sql.NullString
		if err := d.queryRow(ctx, nextJob, job).Scan(&j); err != nil || !j.Valid {
			return jobs, wrapRead(table, err)
		}
		job = j.String
		jobs = append(jobs, job)
	}
}

// owedPage is how many owed rows one of readOwed's statements reads.
const owedPage = 10_000

// readOwed counts a job's owed rows, per effect version. Their number is
// the backlog, not the ledger's size; they are read a page at a time in
// effect key order on the (job, state, effect_key) index, each page one
// bounded statement that the planner cannot turn into a scan of the
// ledger (it cannot know that owed rows are the newest, so few pages).
// With a limit, it stops after limit rows; when the job owes more,
// through is the last effect key it read.
func (d *DB) readOwed(ctx context.Context, now time.Time, job string, row func(job, effect string, version int) *versionRows, limit int) (through string, err error) {
	page := owedPage
	if limit > 0 {
		page = min(page, limit)
	}
	// A ledger migrated before next_attempt_at has no row waiting.
	cols, waiting := "", `0, NULL`
	args := []any{d.at(now), d.at(now)}
	if d.retryCols {
		cols = ", next_attempt_at"
		waiting = `count(CASE WHEN next_attempt_at > ? AND (lease_until IS NULL OR lease_until <= ?) THEN 1 END),
    min(CASE WHEN next_attempt_at > ? AND (lease_until IS NULL OR lease_until <= ?) THEN next_attempt_at END)`
		args = append(args, d.at(now), d.at(now), d.at(now), d.at(now))
	}
	query := d.q(`SELECT effect, effect_version,
    count(*),
    count(CASE WHEN lease_until > ? THEN 1 END),
    count(CASE WHEN attempts > 0 AND (lease_until IS NULL OR lease_until <= ?) THEN 1 END),
    min(created_at),
    ` + waiting + `,
    max(effect_key)
FROM (SELECT effect_key, effect, effect_version, lease_until, attempts, created_at` + cols + ` FROM ` + d.t.Ledger + `
    WHERE job = ? AND state = 'pending' AND effect_key > ? ORDER BY effect_key LIMIT ` + strconv.Itoa(page) + `) AS p
GROUP BY effect, effect_version`)
	total := 0
	for after := ""; ; {
		read, last, err := d.readOwedPage(ctx, query, append(args, job, after), job, row)
		total += read
		if err != nil || read < page {
			return "", err
		}
		after = last
		if limit > 0 && total >= limit {
			more, err := d.exists(ctx, d.q(`SELECT 1 FROM `+d.t.Ledger+` WHERE job = ? AND state = 'pending' AND effect_key > ? ORDER BY effect_key LIMIT 1`), job, after)
			if err != nil || !more {
				return "", err
			}
			return after, nil
		}
	}
}

// exists reports whether a ledger query returns a row.
func (d *DB) exists(ctx context.Context, query string, args ...any) (bool, error) {
	var one int
	err := d.queryRow(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, wrapRead(d.t.Ledger, err)
}

// readOwedPage adds one page of owed rows to their versions' counts and
// returns how many rows it read and the last effect key.
func (d *DB) readOwedPage(ctx context.Context, query string, args []any, job string, row func(job, effect string, version int) *versionRows) (read int, last string, err error) {
	rows, err := d.query(ctx, query, args...)
	if err != nil {
		return 0, "", fmt.Errorf("read %s: %w", d.t.Ledger, err)
	}
	defer rows.Close()
	for rows.Next() {
		var effect, key string
		var version int
		var c EffectStatus
		var oldest, next dbTime
		if err := rows.Scan(&effect, &version, &c.Owed, &c.Leased, &c.Failing, &oldest, &c.Waiting, &next, &key); err != nil {
			return 0, "", fmt.Errorf("read %s: %w", d.t.Ledger, err)
		}
		r := row(job, effect, version)
		r.es.Owed += c.Owed
		r.es.Leased += c.Leased
		r.es.Failing += c.Failing
		r.es.Waiting += c.Waiting
		r.es.Oldest = earliest(r.es.Oldest, oldest.ptr())
		r.es.NextAttempt = earliest(r.es.NextAttempt, next.ptr())
		read += c.Owed
		last = max(last, key)
	}
	return read, last, rows.Err()
}

// wrapRead says which table a read failed on; nil stays nil.
func wrapRead(table string, err error) error {
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	return nil
}

// TraceReads has Status call f with each statement it reads with and its
// arguments, before running it: how a test sees the plans of status's
// reads (EXPLAIN) on a large ledger.
// Status reads some tables concurrently; f is called one read at a time.
func (d *DB) TraceReads(f func(query string, args []any)) {
	var mu sync.Mutex
	d.traceReads = func(query string, args []any) {
		mu.Lock()
		defer mu.Unlock()
		f(query, args)
	}
}

func (d *DB) query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if d.traceReads != nil {
		d.traceReads(query, args)
	}
	return d.db.QueryContext(ctx, query, args...)
}

func (d *DB) queryRow(ctx context.Context, query string, args ...any) *sql.Row {
	if d.traceReads != nil {
		d.traceReads(query, args)
	}
	return d.db.QueryRowContext(ctx, query, args...)
}

// earliest returns the earlier of two optional instants.
func earliest(a, b *time.Time) *time.Time {
	if a == nil || (b != nil && b.Before(*a)) {
		return b
	}
	return a
}

func (d *DB) readUnits(ctx context.Context, jobFor func(string) *JobStatus) error {
	rows, err := d.unitStates(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", d.t.Parked, err)
	}
	for _, r := range rows {
		addUnits(&jobFor(r.Job).Units, r)
	}
	return nil
}

// addUnits sets the count of r's state in u.
func addUnits(u *UnitStatus, r unitState) {
	switch r.State {
	case unitFailing:
		u.Failing = int(r.N)
	case unitParked:
		u.Parked = int(r.N)
	case unitRetry:
		u.Retry = int(r.N)
	}
}

// readUnitsUpTo is readUnits reading at most limit rows of each job's in
// the parked table, on its (job, unit_key) key.
func (d *DB) readUnitsUpTo(ctx context.Context, jobFor func(string) *JobStatus, limit int) error {
	jobs, err := d.jobsIn(ctx, d.t.Parked)
	if err != nil {
		return err
	}
	for _, job := range jobs {
		rows, err := d.jobUnitStatesUpTo(ctx, job, limit+1)
		if err != nil {
			return wrapRead(d.t.Parked, err)
		}
		u := &jobFor(job).Units
		read := 0
		for _, r := range rows {
			read += int(r.N)
			addUnits(u, r)
		}
		u.More = read > limit // the counts may hold one row past the limit
	}
	return nil
}

// Seconds is a duration that JSON shows in seconds.
type Seconds time.Duration

func (s Seconds) MarshalJSON() ([]byte, error) {
	return strconv.AppendFloat(nil, time.Duration(s).Seconds(), 'f', -1, 64), nil
}
