package idemops

import (
	"cmp"
	"context"
	"database/sql"
	"math"

	"github.com/idemgen/idemgen/idem/idemops/internal/opspg"
	"github.com/idemgen/idemgen/idem/idemops/internal/opssqlite"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// tableQueries is what the sqlc-compiled reads (internal/opspg,
// internal/opssqlite, as the stores' ledger queries) run on: the
// database, with the package's table names in place of the placeholders
// the queries are written over (idemrt.TableNames), each read traced
// (TraceReads). New has checked the names, so SQL cannot fail here.
type tableQueries struct {
	d     *DB
	names *idemrt.TableNames
}

func (x tableQueries) sql(query string, args []any) string {
	q, _ := x.names.SQL(query)
	if x.d.traceReads != nil {
		x.d.traceReads(q, args)
	}
	return q
}

func (x tableQueries) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return x.d.db.ExecContext(ctx, x.sql(query, args), args...)
}

func (x tableQueries) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return x.d.db.PrepareContext(ctx, x.sql(query, nil))
}

func (x tableQueries) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return x.d.db.QueryContext(ctx, x.sql(query, args), args...)
}

func (x tableQueries) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return x.d.db.QueryRowContext(ctx, x.sql(query, args), args...)
}

// limitRow is a row of the limits table, read by either dialect's queries.
// What its columns hold depends on the slot (idem/idemrt/gate.go,
// idem/idemrt/steer.go).
type limitRow struct {
	job, effect         string
	slot                int
	gate, reason, owner string
	heldUntil, since    dbTime
	failures, opens     int
}

// pgTime is a PostgreSQL timestamptz as dbTime.
func pgTime(t sql.NullTime) dbTime {
	return dbTime{t: t.Time.UTC(), valid: t.Valid}
}

// sqliteTime parses SQLite's fixed-width text instant (sqliteTimeFormat).
func sqliteTime(s sql.NullString) (dbTime, error) {
	var t dbTime
	if !s.Valid {
		return t, nil
	}
	return t, t.Scan(s.String)
}

// limitSlots reads every row of the limits table, in job, effect, slot order.
func (d *DB) limitSlots(ctx context.Context) ([]limitRow, error) {
	var out []limitRow
	if d.dialect == Postgres {
		rows, err := opspg.New(d.tables).LimitSlots(ctx)
		for _, r := range rows {
			out = append(out, limitRow{job: r.Job, effect: r.Effect, slot: int(r.Slot), heldUntil: pgTime(r.HeldUntil)})
		}
		return out, err
	}
	rows, err := opssqlite.New(d.tables).LimitSlots(ctx)
	for _, r := range rows {
		held, terr := sqliteTime(r.HeldUntil)
		if terr != nil {
			return nil, terr
		}
		out = append(out, limitRow{job: r.Job, effect: r.Effect, slot: int(r.Slot), heldUntil: held})
	}
	return out, err
}

// gateRows reads the gate rows (slot -2) that hold a gate, of job's
// effect only when job is not "", in job, effect order.
func (d *DB) gateRows(ctx context.Context, job, effect string) ([]limitRow, error) {
	var out []limitRow
	if d.dialect == Postgres {
		q := opspg.New(d.tables)
		var rows []opspg.GatesRow
		var err error
		if job == "" {
			rows, err = q.Gates(ctx)
		} else {
			var one []opspg.EffectGatesRow
			one, err = q.EffectGates(ctx, opspg.EffectGatesParams{Job: job, Effect: effect})
			for _, r := range one {
				rows = append(rows, opspg.GatesRow(r))
			}
		}
		for _, r := range rows {
			out = append(out, limitRow{job: r.Job, effect: r.Effect, slot: -2, gate: r.Gate.String, reason: r.Reason.String, owner: r.Owner.String,
				heldUntil: pgTime(r.HeldUntil), since: pgTime(r.Since), failures: int(r.Failures), opens: int(r.Opens)})
		}
		return out, err
	}
	q := opssqlite.New(d.tables)
	var rows []opssqlite.GatesRow
	var err error
	if job == "" {
		rows, err = q.Gates(ctx)
	} else {
		var one []opssqlite.EffectGatesRow
		one, err = q.EffectGates(ctx, opssqlite.EffectGatesParams{Job: job, Effect: effect})
		for _, r := range one {
			rows = append(rows, opssqlite.GatesRow(r))
		}
	}
	for _, r := range rows {
		held, err1 := sqliteTime(r.HeldUntil)
		since, err2 := sqliteTime(r.Since)
		if err1 != nil || err2 != nil {
			return nil, cmp.Or(err1, err2)
		}
		out = append(out, limitRow{job: r.Job, effect: r.Effect, slot: -2, gate: r.Gate.String, reason: r.Reason.String, owner: r.Owner.String,
			heldUntil: held, since: since, failures: int(r.Failures), opens: int(r.Opens)})
	}
	return out, err
}

// overrideRows reads the override rows (idemrt.SteerSlotOverride), of
// job's effect only when job is not "", in job, effect order.
func (d *DB) overrideRows(ctx context.Context, job, effect string) ([]limitRow, error) {
	var out []limitRow
	if d.dialect == Postgres {
		q := opspg.New(d.tables)
		var rows []opspg.OverridesRow
		var err error
		if job == "" {
			rows, err = q.Overrides(ctx, idemrt.SteerSlotOverride)
		} else {
			var one []opspg.EffectOverridesRow
			one, err = q.EffectOverrides(ctx, opspg.EffectOverridesParams{Slot: idemrt.SteerSlotOverride, Job: job, Effect: effect})
			for _, r := range one {
				rows = append(rows, opspg.OverridesRow(r))
			}
		}
		for _, r := range rows {
			out = append(out, limitRow{job: r.Job, effect: r.Effect, slot: idemrt.SteerSlotOverride, reason: r.Reason.String, owner: r.Owner.String,
				since: pgTime(r.Since), failures: int(r.Failures), opens: int(r.Opens)})
		}
		return out, err
	}
	q := opssqlite.New(d.tables)
	var rows []opssqlite.OverridesRow
	var err error
	if job == "" {
		rows, err = q.Overrides(ctx, idemrt.SteerSlotOverride)
	} else {
		var one []opssqlite.EffectOverridesRow
		one, err = q.EffectOverrides(ctx, opssqlite.EffectOverridesParams{Slot: idemrt.SteerSlotOverride, Job: job, Effect: effect})
		for _, r := range one {
			rows = append(rows, opssqlite.OverridesRow(r))
		}
	}
	for _, r := range rows {
		since, terr := sqliteTime(r.Since)
		if terr != nil {
			return nil, terr
		}
		out = append(out, limitRow{job: r.Job, effect: r.Effect, slot: idemrt.SteerSlotOverride, reason: r.Reason.String, owner: r.Owner.String,
			since: since, failures: int(r.Failures), opens: int(r.Opens)})
	}
	return out, err
}

// progressRow is a row of the progress table.
type progressRow struct {
	job              string
	watermark, saved dbTime
	cursor           *string
	position         int64
	jobVersion       int
}

// progressRows reads every job's progress, in job order.
func (d *DB) progressRows(ctx context.Context) ([]progressRow, error) {
	var out []progressRow
	if d.dialect == Postgres {
		rows, err := opspg.New(d.tables).Progress(ctx)
		for _, r := range rows {
			out = append(out, progressRow{job: r.Job, watermark: pgTime(r.Watermark), saved: pgTime(sql.NullTime{Time: r.UpdatedAt, Valid: true}),
				cursor: nullString(r.CursorToken), position: r.CursorPosition, jobVersion: int(r.JobVersion)})
		}
		return out, err
	}
	rows, err := opssqlite.New(d.tables).Progress(ctx)
	for _, r := range rows {
		mark, err1 := sqliteTime(r.Watermark)
		saved, err2 := sqliteTime(sql.NullString{String: r.UpdatedAt, Valid: true})
		if err1 != nil || err2 != nil {
			return nil, cmp.Or(err1, err2)
		}
		out = append(out, progressRow{job: r.Job, watermark: mark, saved: saved,
			cursor: nullString(r.CursorToken), position: r.CursorPosition, jobVersion: int(r.JobVersion)})
	}
	return out, err
}

func nullString(s sql.NullString) *string {
	if !s.Valid {
		return nil
	}
	return &s.String
}

// unitState counts the parked table's rows of a job in a state.
type unitState struct {
	Job, State string
	N          int64
}

// unitStates counts the parked table's rows by job and state.
func (d *DB) unitStates(ctx context.Context) ([]unitState, error) {
	var out []unitState
	if d.dialect == Postgres {
		rows, err := opspg.New(d.tables).UnitStates(ctx)
		for _, r := range rows {
			out = append(out, unitState(r))
		}
		return out, err
	}
	rows, err := opssqlite.New(d.tables).UnitStates(ctx)
	for _, r := range rows {
		out = append(out, unitState(r))
	}
	return out, err
}

// jobUnitStatesUpTo counts job's rows of the parked table by state, of the
// first limit on its (job, unit_key) key.
func (d *DB) jobUnitStatesUpTo(ctx context.Context, job string, limit int) ([]unitState, error) {
	var out []unitState
	if d.dialect == Postgres {
		rows, err := opspg.New(d.tables).JobUnitStatesUpTo(ctx, opspg.JobUnitStatesUpToParams{Job: job, MaxRows: int32(min(limit, math.MaxInt32))})
		for _, r := range rows {
			out = append(out, unitState{Job: job, State: r.State, N: r.N})
		}
		return out, err
	}
	rows, err := opssqlite.New(d.tables).JobUnitStatesUpTo(ctx, opssqlite.JobUnitStatesUpToParams{Job: job, MaxRows: int64(limit)})
	for _, r := range rows {
		out = append(out, unitState{Job: job, State: r.State, N: r.N})
	}
	return out, err
}

// parkedEffectRows counts job's effect's parked rows in the ledger.
func (d *DB) parkedEffectRows(ctx context.Context, job, effect string) (int, error) {
	if d.dialect == Postgres {
		n, err := opspg.New(d.tables).ParkedEffectRows(ctx, opspg.ParkedEffectRowsParams{Job: job, Effect: effect})
		return int(n), err
	}
	n, err := opssqlite.New(d.tables).ParkedEffectRows(ctx, opssqlite.ParkedEffectRowsParams{Job: job, Effect: effect})
	return int(n), err
}

// parkedEffectNewestVersion is the newest version among job's effect's
// parked rows, 0 when there is none.
func (d *DB) parkedEffectNewestVersion(ctx context.Context, job, effect string) (int, error) {
	if d.dialect == Postgres {
		v, err := opspg.New(d.tables).ParkedEffectNewestVersion(ctx, opspg.ParkedEffectNewestVersionParams{Job: job, Effect: effect})
		return int(v), err
	}
	v, err := opssqlite.New(d.tables).ParkedEffectNewestVersion(ctx, opssqlite.ParkedEffectNewestVersionParams{Job: job, Effect: effect})
	return int(v), err
}
