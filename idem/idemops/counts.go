package idemops

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// How status counts done rows per effect version, and the units a
// version bump will perform again: exactly up to a bound, then estimated
// (Status) or as lower bounds (StatusUpTo, the page), each marked.

// readDone counts an effect's done rows per version, exactly, when it has
// at most exactDone of them, and reports whether it did. The count reads
// the (job, effect, state, done_at) index alone, and stops past the limit
// (the ORDER BY keeps it on the index, where a scan would stop early only
// if done rows are many); the count per version reads those rows.
// With StatusUpTo's limit, readDoneUpTo counts instead.
func (d *DB) readDone(ctx context.Context, job, effect string, limit int, row func(job, effect string, version int) *versionRows) (exact bool, err error) {
	if limit > 0 {
		return d.readDoneUpTo(ctx, job, effect, limit, row)
	}
	n, err := d.countDone(ctx, job, effect, d.exactDone+1)
	if err != nil || n == 0 {
		return true, err
	}
	if n > d.exactDone {
		return false, nil // sampleDone estimates them
	}
	return true, d.doneByVersion(ctx, job, effect, "ASC", n, row)
}

// readDoneUpTo is readDone for the page: it reads at most 2 limit done
// rows of the effect. Up to that many, every version's count is exact.
// Past it, the newest limit rows and the oldest limit rows are counted
// per version (a version bump's rows are the newest, its predecessors'
// the oldest, so each shows), and each count is a lower bound: exact is
// false. A cap spent on one version's rows would show another's as none.
func (d *DB) readDoneUpTo(ctx context.Context, job, effect string, limit int, row func(job, effect string, version int) *versionRows) (exact bool, err error) {
	n, err := d.countDone(ctx, job, effect, 2*limit+1)
	if err != nil || n == 0 {
		return true, err
	}
	if n <= 2*limit {
		return true, d.doneByVersion(ctx, job, effect, "ASC", n, row)
	}
	if err := d.doneByVersion(ctx, job, effect, "DESC", limit, row); err != nil {
		return false, err
	}
	return false, d.doneByVersion(ctx, job, effect, "ASC", limit, row)
}

// countDone counts the effect's done rows, up to most, on the index alone.
func (d *DB) countDone(ctx context.Context, job, effect string, most int) (int, error) {
	var n int
	err := d.queryRow(ctx, d.q(`SELECT count(*) FROM (SELECT 1 FROM `+d.t.Ledger+`
WHERE job = ? AND effect = ? AND state = 'done' ORDER BY done_at LIMIT ?) AS d`), job, effect, most).Scan(&n)
	return n, wrapRead(d.t.Ledger, err)
}

// doneByVersion adds the effect's n oldest (order ASC) or newest (DESC)
// done rows to their versions' counts.
func (d *DB) doneByVersion(ctx context.Context, job, effect, order string, n int, row func(job, effect string, version int) *versionRows) error {
	rows, err := d.query(ctx, d.q(`SELECT effect_version, count(*) FROM (SELECT effect_version FROM `+d.t.Ledger+`
WHERE job = ? AND effect = ? AND state = 'done' ORDER BY done_at `+order+` LIMIT ?) AS d GROUP BY effect_version`), job, effect, n)
	if err != nil {
		return wrapRead(d.t.Ledger, err)
	}
	defer rows.Close()
	for rows.Next() {
		var version, done int
		if err := rows.Scan(&version, &done); err != nil {
			return wrapRead(d.t.Ledger, err)
		}
		row(job, effect, version).es.Done += done
	}
	return wrapRead(d.t.Ledger, rows.Err())
}

// DoneSampleRows is about how many ledger rows Status reads to estimate
// the done rows of an effect that has more than ExactDoneLimit.
const DoneSampleRows = 100_000

// SetDoneCounting changes how many done rows per effect Status counts
// exactly (ExactDoneLimit) and how many ledger rows it samples above that
// (DoneSampleRows): lower for a test, higher for a database fast enough to
// count more. A value of 0 keeps the default.
func (d *DB) SetDoneCounting(exact, sample int) {
	d.exactDone, d.doneSample = cmp.Or(exact, ExactDoneLimit), cmp.Or(sample, DoneSampleRows)
}

// sampleDone estimates the done rows per version of the effects in many
// from one sample of the ledger, of about doneSample rows, read once for
// all of them: evenly spaced runs of the table, scaled by their spacing.
// On SQLite a run is a range of rowids (sqliteSample); on PostgreSQL, of
// pages (pgSample).
func (d *DB) sampleDone(ctx context.Context, many []effectPair, row func(job, effect string, version int) *versionRows) error {
	if len(many) == 0 {
		return nil
	}
	sample := d.sqliteSample
	if d.dialect == Postgres {
		sample = d.pgSample
	}
	sampled, scale, err := sample(ctx) // done rows = count × scale
	if err != nil {
		return err
	}
	query := `SELECT l.job, l.effect, l.effect_version, count(*) FROM (` + sampled + `) AS l
WHERE l.state = 'done' GROUP BY l.job, l.effect, l.effect_version`
	rows, err := d.query(ctx, query)
	if err != nil {
		return wrapRead(d.t.Ledger, err)
	}
	defer rows.Close()
	for rows.Next() {
		var p effectPair
		var version, done int
		if err := rows.Scan(&p.job, &p.effect, &version, &done); err != nil {
			return wrapRead(d.t.Ledger, err)
		}
		if done == 0 || !slices.Contains(many, p) {
			continue // counted exactly
		}
		r := row(p.job, p.effect, version)
		r.es.Done = int(float64(done)*scale + 0.5)
		r.es.Estimated = true
	}
	return wrapRead(d.t.Ledger, rows.Err())
}

// pgSample is sampleDone's sample on PostgreSQL (a query of the sampled
// rows' job, effect, effect_version and state), with the factor that
// scales its counts to the whole table: runs of pages spread evenly over the
// table, each read by a TID range scan (PostgreSQL 14 and later), sized
// by the planner's rows per page to read about doneSample rows. Runs at
// fixed places, unlike TABLESAMPLE SYSTEM's random pages, sample an exact
// share of the table's pages, empty pages included, so the scale is
// exact; the estimate's error is only the runs' unevenness.
func (d *DB) pgSample(ctx context.Context) (sampled string, scale float64, err error) {
	var pages, version int64
	var rows, relpages float64
	err = d.queryRow(ctx, `SELECT pg_relation_size(c.oid) / current_setting('block_size')::bigint, c.reltuples, c.relpages, current_setting('server_version_num')::bigint
FROM pg_class c WHERE c.oid = to_regclass($1)`, d.t.Ledger).Scan(&pages, &rows, &relpages, &version)
	if err != nil {
		return "", 0, fmt.Errorf("read %s's size: %w", d.t.Ledger, err)
	}
	if version < 140000 {
		return "", 0, fmt.Errorf("status counts more than %d done rows of an effect on a sample of the ledger's pages, which needs PostgreSQL 14 or later (this is %d)", d.exactDone, version)
	}
	perPage := 40.0 // before the first ANALYZE
	if rows > 0 && relpages > 0 {
		perPage = rows / relpages
	}
	const runs = 100
	want := max(1, int64(float64(d.doneSample)/perPage)) // pages to read
	run := max(1, want/runs)
	stride := max(run, pages/runs)
	var parts []string
	var read int64
	for lo := int64(0); lo < pages; lo += stride {
		hi := min(lo+run, pages)
		parts = append(parts, fmt.Sprintf("SELECT job, effect, effect_version, state FROM %s WHERE ctid >= '(%d,0)' AND ctid < '(%d,0)'", d.t.Ledger, lo, hi))
		read += hi - lo
	}
	if len(parts) == 0 {
		parts, read = []string{"SELECT job, effect, effect_version, state FROM " + d.t.Ledger}, 1
		pages = 1
	}
	return strings.Join(parts, "\nUNION ALL "), float64(pages) / float64(read), nil
}

// sqliteSample is sampleDone's sample on SQLite, which has no TABLESAMPLE:
// a run of 100 rowids from every stride of the table's rowids, so many
// that it reads about doneSample rows, scaled by the stride.
func (d *DB) sqliteSample(ctx context.Context) (sampled string, scale float64, err error) {
	const run = 100 // rowids per run
	var last int64
	if err := d.queryRow(ctx, `SELECT coalesce(max(rowid), 0) FROM `+d.t.Ledger).Scan(&last); err != nil {
		return "", 0, fmt.Errorf("read %s's size: %w", d.t.Ledger, err)
	}
	stride := max(run, last/int64(max(1, d.doneSample/run)))
	// CROSS JOIN keeps the runs outside, so each is one range of the
	// table's b-tree.
	return fmt.Sprintf(`WITH RECURSIVE r(lo) AS (SELECT 1 UNION ALL SELECT lo + %d FROM r WHERE lo + %d <= %d)
SELECT s.job, s.effect, s.effect_version, s.state FROM r CROSS JOIN %s AS s ON s.rowid >= r.lo AND s.rowid < r.lo + %d`,
		stride, stride, last, d.t.Ledger, run), float64(stride) / run, nil
}

// readAgain counts the units done under a superseded version of the
// effect and not yet reserved under the current one: the runtime owes
// such a unit the current version when it is processed again
// (idemrt.Querier.Decided), so a Backfill over it performs the effect again.
//
// With StatusUpTo's limit, it counts at most limit of them, and marks a
// count that stopped there (More.Again).
func (d *DB) readAgain(ctx context.Context, job string, limit int, es *EffectStatus) error {
	if es.History == 0 {
		return nil
	}
	count, bound := "count(DISTINCT unit_key)", ""
	if limit > 0 { // one more than the limit, to tell "limit" from "more"
		count, bound = "count(*) FROM (SELECT DISTINCT unit_key", " LIMIT "+strconv.Itoa(limit+1)+") AS a"
	}
	err := d.queryRow(ctx, d.q(`SELECT `+count+` FROM `+d.t.Ledger+` o
WHERE job = ? AND effect = ? AND effect_version < ? AND state = 'done'
    AND NOT EXISTS (SELECT 1 FROM `+d.t.Ledger+` c WHERE c.job = o.job AND c.effect = o.effect AND c.unit_key = o.unit_key AND c.effect_version >= ?)`+bound),
		job, es.Effect, es.Version, es.Version).Scan(&es.Again)
	if err != nil {
		return fmt.Errorf("read %s: %w", d.t.Ledger, err)
	}
	if limit > 0 && es.Again > limit {
		es.Again = limit
		es.more().Again = true
	}
	return nil
}

// readOverdue counts the effect's owed rows that nobody is working on: no
// live lease, and untouched for longer than the effect's lease. The lease
// differs per effect, so this is a query per effect that owes anything.
//
// With StatusUpTo's limit, it counts among the job's first limit owed
// rows in effect key order, those readOwed read: one bounded read of the
// (job, state, effect_key) index. (A bound on effect_key alone lets the
// planner walk the primary key over most of the ledger.)
func (d *DB) readOverdue(ctx context.Context, now time.Time, job string, limit int, es *EffectStatus) error {
	if es.Owed == es.Leased+es.Waiting {
		return nil
	}
	// A row backing off until its next attempt is waited for, not forgotten.
	notWaiting, cols := "", "effect, lease_until, updated_at"
	args := []any{job, es.Effect, d.at(now), d.at(now.Add(-time.Duration(es.Lease)))}
	if d.retryCols {
		notWaiting, cols, args = " AND (next_attempt_at IS NULL OR next_attempt_at <= ?)", cols+", next_attempt_at", append(args, d.at(now))
	}
	from := d.t.Ledger + `
WHERE job = ? AND effect = ? AND state = 'pending' AND`
	if limit > 0 {
		from = `(SELECT ` + cols + ` FROM ` + d.t.Ledger + ` WHERE job = ? AND state = 'pending' ORDER BY effect_key LIMIT ` + strconv.Itoa(limit) + `) AS p
WHERE effect = ? AND`
	}
	err := d.queryRow(ctx, d.q(`SELECT count(*) FROM `+from+` (lease_until IS NULL OR lease_until <= ?) AND updated_at < ?`+notWaiting),
		args...).Scan(&es.Overdue)
	if err != nil {
		return fmt.Errorf("read %s: %w", d.t.Ledger, err)
	}
	return nil
}

// readParked counts an effect's parked rows on the (job, effect, state,
// done_at) index, reading no row. They count under the effect's version
// in the spec, or for an effect the spec no longer has, the newest of
// its parked rows'.
func (d *DB) readParked(ctx context.Context, job, effect string, row func(job, effect string, version int) *versionRows) error {
	n, err := d.parkedEffectRows(ctx, job, effect)
	if err != nil || n == 0 {
		return wrapRead(d.t.Ledger, err)
	}
	version := -1
	if j := d.job(job); j != nil {
		if k := slices.IndexFunc(j.Effects, func(e *EffectSpec) bool { return e.Name == effect }); k >= 0 {
			version = j.Effects[k].Version
		}
	}
	if version < 0 {
		if version, err = d.parkedEffectNewestVersion(ctx, job, effect); err != nil {
			return wrapRead(d.t.Ledger, err)
		}
	}
	row(job, effect, version).es.Parked = n
	return nil
}

// readParkedUpTo counts a job's parked rows per effect version, reading at
// most limit of them in effect key order on the (job, state, effect_key)
// index, and reports whether the job has more.
func (d *DB) readParkedUpTo(ctx context.Context, job string, limit int, row func(job, effect string, version int) *versionRows) (more bool, err error) {
	rows, err := d.query(ctx, d.q(`SELECT effect, effect_version, count(*) FROM (SELECT effect, effect_version FROM `+d.t.Ledger+`
    WHERE job = ? AND state = '`+idemrt.StoredParked+`' ORDER BY effect_key LIMIT ?) AS p
GROUP BY effect, effect_version`), job, limit+1)
	if err != nil {
		return false, wrapRead(d.t.Ledger, err)
	}
	defer rows.Close()
	read := 0
	var last *versionRows
	for rows.Next() {
		var effect string
		var version, n int
		if err := rows.Scan(&effect, &version, &n); err != nil {
			return false, wrapRead(d.t.Ledger, err)
		}
		last = row(job, effect, version)
		last.es.Parked += n
		read += n
	}
	if read > limit { // the one row past the limit only shows there are more
		last.es.Parked--
	}
	return read > limit, wrapRead(d.t.Ledger, rows.Err())
}
