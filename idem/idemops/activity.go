package idemops

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Activity is the ledger's effects done and failed per minute over a
// window ending now: the operations page's chart. It is read from the
// times the ledger keeps anyway (done_at, updated_at), so it costs the hot
// path no write. The ledger keeps no log of attempts: a row counts as
// failed once, at its last failure (updated_at), while it is still owed
// after a failed attempt or parked; a row that failed and then succeeded
// counts as done only.
type Activity struct {
	From, To time.Time
	// Minutes holds every minute from From to To, oldest first, zeros
	// included.
	Minutes []Minute
	// Done and Failed total the window's minutes.
	Done, Failed int
	// FailedMore: ActivityUpTo stopped reading a job's owed or parked
	// rows at its limit, so Failed counts those read (the first in effect
	// key order) and more may have failed in the window.
	FailedMore bool
	// DoneMore: ActivityUpTo read as many of an effect's done rows as it
	// reads at most (its limit for each minute of the window, on
	// average), so Done counts the window's oldest.
	DoneMore bool
}

// Minute is one minute of Activity.
type Minute struct {
	At           time.Time // the minute's start, UTC
	Done, Failed int
}

// minuteFormat is how a minute bucket reads back from either dialect.
const minuteFormat = "2006-01-02T15:04"

// minute is the SQL of a timestamp column's minute, as minuteFormat text.
func (d *DB) minute(col string) string {
	if d.dialect == Postgres {
		return "to_char(" + col + " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI')"
	}
	return "substr(" + col + ", 1, 16)" // the fixed-width text of sqliteTimeFormat
}

// Activity reads the effects done and failed per minute over the last
// window (at most a day). Done rows are counted per effect on the (job,
// effect, state, done_at) index from the window's start; failed rows are
// the owed and parked rows whose last update falls in the window
// (readFailed).
func (d *DB) Activity(ctx context.Context, window time.Duration) (*Activity, error) {
	return d.activity(ctx, window, 0)
}

// ActivityUpTo is Activity reading at most about limit of each job's owed
// rows and of its parked rows for the failed counts (FailedMore says when
// it stopped), for a page that must answer at once on any backlog. The
// done counts are read whole: their cost is the window's done rows, on
// the done rows' index.
func (d *DB) ActivityUpTo(ctx context.Context, window time.Duration, limit int) (*Activity, error) {
	return d.activity(ctx, window, max(limit, 1))
}

func (d *DB) activity(ctx context.Context, window time.Duration, limit int) (*Activity, error) {
	window = min(max(window, time.Minute), 24*time.Hour)
	now := d.now().UTC()
	to := now.Truncate(time.Minute)
	from := to.Add(-window + time.Minute)
	a := &Activity{From: from, To: to}
	byMinute := map[time.Time]*Minute{}
	for at := from; !at.After(to); at = at.Add(time.Minute) {
		a.Minutes = append(a.Minutes, Minute{At: at})
	}
	for i := range a.Minutes {
		byMinute[a.Minutes[i].At] = &a.Minutes[i]
	}
	add := func(query string, args []any, count func(m *Minute, n int)) error {
		rows, err := d.query(ctx, d.q(query), args...)
		if err != nil {
			return wrapRead(d.t.Ledger, err)
		}
		defer rows.Close()
		for rows.Next() {
			var bucket sql.NullString
			var n int
			if err := rows.Scan(&bucket, &n); err != nil {
				return wrapRead(d.t.Ledger, err)
			}
			at, err := time.Parse(minuteFormat, bucket.String)
			if err != nil {
				return fmt.Errorf("read %s: minute %q: %w", d.t.Ledger, bucket.String, err)
			}
			if m := byMinute[at]; m != nil {
				count(m, n)
			}
		}
		return wrapRead(d.t.Ledger, rows.Err())
	}
	pairs, err := d.doneEffects(ctx)
	if err != nil {
		return nil, err
	}
	since := d.at(from)
	// ActivityUpTo reads the window's done rows in done_at order with a
	// bound (limit a minute), which keeps PostgreSQL on the done rows'
	// index even under a generic plan of the prepared statement, where
	// done_at >= $3 is guessed to hold a third of the ledger.
	doneQuery := `SELECT ` + d.minute("done_at") + `, count(*) FROM ` + d.t.Ledger + `
WHERE job = ? AND effect = ? AND state = 'done' AND done_at >= ? GROUP BY 1`
	if limit > 0 {
		doneQuery = `SELECT ` + d.minute("done_at") + `, count(*) FROM (SELECT done_at FROM ` + d.t.Ledger + `
    WHERE job = ? AND effect = ? AND state = 'done' AND done_at >= ? ORDER BY done_at LIMIT ` + strconv.Itoa(limit*len(a.Minutes)) + `) AS d GROUP BY 1`
	}
	for _, p := range pairs {
		read := 0
		err := add(doneQuery, []any{p.job, p.effect, since}, func(m *Minute, n int) { m.Done += n; a.Done += n; read += n })
		a.DoneMore = a.DoneMore || (limit > 0 && read >= limit*len(a.Minutes))
		if err != nil {
			return nil, err
		}
	}
	failed := func(minute string, n int) {
		at, err := time.Parse(minuteFormat, minute)
		if m := byMinute[at]; err == nil && m != nil {
			m.Failed += n
			a.Failed += n
		}
	}
	jobs, err := d.ledgerJobs(ctx)
	if err != nil {
		return nil, err
	}
	for _, job := range jobs {
		for _, state := range []string{idem.StatePending, idemrt.StoredParked} {
			more, err := d.readFailed(ctx, job, state, now, from, limit, failed)
			if err != nil {
				return nil, err
			}
			a.FailedMore = a.FailedMore || more

		}
	}
	return a, nil
}

// doneEffects lists the (job, effect) pairs the ledger holds done rows of,
// in order, one probe per pair on the done rows' (job, effect, done_at)
// index: the pairs whose done rows the chart counts. (ledgerEffects also
// finds the effects that only owe, probing the open rows, which costs
// more on a large ledger.)
func (d *DB) doneEffects(ctx context.Context) ([]effectPair, error) {
	jobs, err := d.ledgerJobs(ctx)
	if err != nil {
		return nil, err
	}
	next := d.q(`SELECT min(effect) FROM ` + d.t.Ledger + ` WHERE job = ? AND effect > ? AND state = '` + idem.StateDone + `'`)
	var pairs []effectPair
	for _, job := range jobs {
		for effect := ""; ; {
			var e sql.NullString
			if err := d.queryRow(ctx, next, job, effect).Scan(&e); err != nil {
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

// readFailed counts job's rows in state (pending or parked) whose last
// attempt failed at or after from, per minute of their updated_at. The
// ledger has no index on updated_at, so it reads every such row, as
// readOwed reads the backlog: a page at a time in effect key order on the
// (job, state, effect_key) index, each page one bounded statement. Its
// cost is the backlog and the parked rows, not the ledger's size. With a
// limit, it stops after about limit rows and reports whether it did.
func (d *DB) readFailed(ctx context.Context, job, state string, now, from time.Time, limit int, count func(minute string, n int)) (more bool, err error) {
	page := owedPage
	if limit > 0 {
		page = min(page, limit)
	}
	cond, args := "attempts > 0 AND updated_at >= ?", []any{d.at(from)}
	if state == idem.StatePending { // a row under a live lease is being attempted, not failed
		cond, args = cond+" AND (lease_until IS NULL OR lease_until <= ?)", append(args, d.at(now))
	}
	// The state is written in the statement, not passed: under a generic
	// plan of a prepared statement, PostgreSQL cannot tell that state = $n
	// is not 'done', so it cannot use the open rows' partial index, and
	// walks the primary key over the ledger (22 s a statement at
	// 10,000,000 rows).
	inState := "state = '" + state + "'" // one of two constants
	query := d.q(`SELECT CASE WHEN ` + cond + ` THEN ` + d.minute("updated_at") + ` END, count(*), max(effect_key)
FROM (SELECT effect_key, attempts, updated_at, lease_until FROM ` + d.t.Ledger + `
    WHERE job = ? AND ` + inState + ` AND effect_key > ? ORDER BY effect_key LIMIT ` + strconv.Itoa(page) + `) AS p
GROUP BY 1`)
	total := 0
	for after := ""; ; {
		rows, err := d.query(ctx, query, append(args, job, after)...)
		if err != nil {
			return false, wrapRead(d.t.Ledger, err)
		}
		read, last := 0, after
		for rows.Next() {
			var minute, key sql.NullString
			var n int
			if err := rows.Scan(&minute, &n, &key); err != nil {
				rows.Close()
				return false, wrapRead(d.t.Ledger, err)
			}
			if minute.Valid {
				count(minute.String, n)
			}
			read += n
			last = max(last, key.String)
		}
		err = rows.Err()
		rows.Close()
		total += read
		if err != nil || read < page {
			return false, wrapRead(d.t.Ledger, err)
		}
		after = last
		if limit > 0 && total >= limit {
			return d.exists(ctx, d.q(`SELECT 1 FROM `+d.t.Ledger+` WHERE job = ? AND `+inState+` AND effect_key > ? ORDER BY effect_key LIMIT 1`), job, after)
		}
	}
}

// Limit is the use of an effect's fleet-wide rate or concurrency, as its
// limits rows hold it.
type Limit struct {
	Job, Effect string
	// Concurrency is the spec's bound (0: none described); Held counts
	// the call slots a live call holds now.
	Concurrency, Held int
	// Rate: RateN calls per RatePer (0: none described). NextStart is when
	// the pacing row lets the next call start; Booked is how many calls
	// have taken a start after now (the pacing row's lead over now, in
	// spacings).
	RateN     int
	RatePer   time.Duration
	NextStart *time.Time
	Booked    int
	// Override is set while the rate or concurrency is set by hand
	// (idem.SetLimits): Concurrency and the rate are then the ones
	// followed, the override's.
	Override *OverrideStatus
}

// Limits reads the limits table: each rate- or concurrency-bound effect's
// use now. The table holds a few rows per such effect.
func (d *DB) Limits(ctx context.Context) ([]Limit, error) {
	if d.t.Limits == "" || !d.hasColumns(ctx, d.t.Limits, "job, effect, slot, held_until") {
		return nil, nil
	}
	rows, err := d.limitSlots(ctx)
	if err != nil {
		return nil, wrapRead(d.t.Limits, err)
	}
	now := d.now()
	var out []Limit
	for _, r := range rows {
		job, effect, slot, held := r.job, r.effect, r.slot, r.heldUntil
		if len(out) == 0 || out[len(out)-1].Job != job || out[len(out)-1].Effect != effect {
			l := Limit{Job: job, Effect: effect}
			if fx := d.effect(job, effect); fx != nil {
				l.Concurrency, l.RateN, l.RatePer = fx.Concurrency, fx.RateN, fx.RatePer
			}
			out = append(out, l)
		}
		l := &out[len(out)-1]
		switch {
		case slot < -1: // the gate (GateStatus)
		case slot < 0: // the pacing row
			l.NextStart = held.ptr()
		case held.valid && held.t.After(now):
			l.Held++
		}
	}
	err = d.eachOverride(ctx, "", "", func(job, effect string, o *OverrideStatus) {
		for i := range out {
			if l := &out[i]; l.Job == job && l.Effect == effect {
				l.Override = o
				if o.RateN > 0 {
					l.RateN, l.RatePer = o.RateN, time.Duration(o.RatePer)
				}
				if o.Concurrency > 0 {
					l.Concurrency = o.Concurrency
				}
			}
		}
	})
	for i := range out {
		l := &out[i]
		if l.NextStart != nil && l.NextStart.After(now) && l.RateN > 0 && l.RatePer > 0 {
			l.Booked = int(l.NextStart.Sub(now) / (l.RatePer / time.Duration(l.RateN)))
		}
	}
	return out, err
}

// History returns everything kept under key, with payloads: what Show
// returns (the ledger row whose effect key it is, the parked-table row and
// handed-in key record whose unit key it is) and, when key is a unit's
// key, the ledger rows of that unit's effects, each read on the (job,
// unit_key) index.
func (d *DB) History(ctx context.Context, key string) (*Rows, error) {
	rows, err := d.underKey(ctx, key, "")
	if err != nil {
		return nil, err
	}
	err = d.eachJob(ctx, d.t.Ledger, "", func(job string) error {
		more, err := d.effects(ctx, []string{"job = ?", "unit_key = ?"}, []any{job, key}, 0, true)
		for _, e := range more {
			if e.Key != key { // the effect key's own row is in already
				rows.Effects = append(rows.Effects, e)
			}
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}
