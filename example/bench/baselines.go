package main

// The hand-written baselines. They write tables shaped like the generated
// ones (the same columns, unique constraints and ledger indexes, declared
// here so that they do not move when the generator changes) and do the
// same work per unit as fx_job: encode the unit as its ledger payload,
// upsert with an inserted flag, reserve the effect in the same
// transaction, claim it, call the provider, record it done.

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// baseTables returns the DDL of the baselines' destination and ledger.
func baseTables(postgres bool) []string {
	if postgres {
		return []string{`CREATE TABLE base_rows (
    id text NOT NULL,
    account text NOT NULL,
    amount bigint NOT NULL,
    updated_at timestamptz NOT NULL,
    idemgen_key text NOT NULL,
    idemgen_job_version integer NOT NULL,
    idemgen_rev bigint NOT NULL DEFAULT 1,
    idemgen_write text NOT NULL DEFAULT 'inserted',
    CONSTRAINT base_rows_unique UNIQUE (id))`,
			`CREATE TABLE base_ledger (
    effect_key     text PRIMARY KEY,
    job            text NOT NULL,
    effect         text NOT NULL,
    effect_version integer NOT NULL,
    job_version    integer NOT NULL,
    unit_key       text NOT NULL,
    payload        bytea NOT NULL,
    state          text NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
    attempts       integer NOT NULL DEFAULT 0,
    lease_owner    text,
    lease_until    timestamptz,
    result         bytea,
    last_error     text,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    done_at        timestamptz)`,
			`CREATE INDEX base_ledger_pending ON base_ledger (job, state, effect_key)`,
			`CREATE INDEX base_ledger_unit ON base_ledger (job, effect, unit_key)`,
		}
	}
	return []string{`CREATE TABLE base_rows (
    id TEXT NOT NULL,
    account TEXT NOT NULL,
    amount INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    idemgen_key TEXT NOT NULL,
    idemgen_job_version INTEGER NOT NULL,
    idemgen_rev INTEGER NOT NULL DEFAULT 1,
    idemgen_write TEXT NOT NULL DEFAULT 'inserted',
    CONSTRAINT base_rows_unique UNIQUE (id))`,
		`CREATE TABLE base_ledger (
    effect_key     TEXT PRIMARY KEY,
    job            TEXT NOT NULL,
    effect         TEXT NOT NULL,
    effect_version INTEGER NOT NULL,
    job_version    INTEGER NOT NULL,
    unit_key       TEXT NOT NULL,
    payload        BLOB NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('pending', 'done', 'failed')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    lease_owner    TEXT,
    lease_until    TEXT,
    result         BLOB,
    last_error     TEXT,
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    done_at        TEXT)`,
		`CREATE INDEX base_ledger_pending ON base_ledger (job, state, effect_key)`,
		`CREATE INDEX base_ledger_unit ON base_ledger (job, effect, unit_key)`,
	}
}

// The upsert of the generated code: a row that holds the same data is not
// written again.
const (
	pgUpsertSet = ` ON CONFLICT (id) DO UPDATE SET
    account = excluded.account, amount = excluded.amount, updated_at = excluded.updated_at,
    idemgen_key = excluded.idemgen_key, idemgen_job_version = excluded.idemgen_job_version,
    idemgen_write = 'updated', idemgen_rev = d.idemgen_rev + 1
WHERE (d.account, d.amount, d.updated_at) IS DISTINCT FROM (excluded.account, excluded.amount, excluded.updated_at)
   OR excluded.idemgen_job_version > d.idemgen_job_version`
	sqliteUpsert = `INSERT INTO base_rows AS d (id, account, amount, updated_at, idemgen_key, idemgen_job_version)
VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET
    account = excluded.account, amount = excluded.amount, updated_at = excluded.updated_at,
    idemgen_key = excluded.idemgen_key, idemgen_job_version = excluded.idemgen_job_version,
    idemgen_write = 'updated', idemgen_rev = d.idemgen_rev + 1
WHERE d.account IS NOT excluded.account OR d.amount IS NOT excluded.amount OR d.updated_at IS NOT excluded.updated_at
   OR excluded.idemgen_job_version > d.idemgen_job_version
RETURNING idemgen_write`
	sqliteReserve = `INSERT INTO base_ledger (effect_key, job, effect, effect_version, job_version, unit_key, payload, state, attempts, created_at, updated_at)
VALUES (?, 'fx_job', 'announce', 1, 1, ?, ?, 'pending', 0, ?, ?) ON CONFLICT (effect_key) DO NOTHING`
	sqliteClaim = `UPDATE base_ledger SET lease_owner = ?, lease_until = ?, attempts = attempts + 1, updated_at = ?
WHERE effect_key = ? AND state = 'pending' AND (lease_until IS NULL OR lease_until < ?)`
	sqliteComplete = `UPDATE base_ledger SET state = 'done', lease_until = NULL, done_at = ?, updated_at = ?
WHERE effect_key = ? AND lease_owner = ? AND state = 'pending'`
	pgReserveOne = `INSERT INTO base_ledger (effect_key, job, effect, effect_version, job_version, unit_key, payload, state, attempts, created_at, updated_at)
VALUES ($1, 'fx_job', 'announce', 1, 1, $2, $3, 'pending', 0, $4, $4) ON CONFLICT (effect_key) DO NOTHING`
	pgClaimOne = `UPDATE base_ledger SET lease_owner = $2, lease_until = $3, attempts = attempts + 1, updated_at = $4
WHERE effect_key = $1 AND state = 'pending' AND (lease_until IS NULL OR lease_until < $4)`
	pgCompleteOne = `UPDATE base_ledger SET state = 'done', lease_until = NULL, done_at = $3, updated_at = $3
WHERE effect_key = $1 AND lease_owner = $2 AND state = 'pending'`
)

const (
	baseOwner = "bench"
	baseLease = 5 * time.Minute
)

// baseUnit is one unit as the baselines see it: the generated unit type,
// its key and effect key (from the generated package), and its payload.
type baseUnit struct {
	u              benchjobs.FxRow
	key, effectKey string
	payload        []byte
}

func (g *rows) baseUnit(i int) (baseUnit, error) {
	u := g.fxRow(i)
	p, err := json.Marshal(u)
	return baseUnit{u: u, key: u.Key(), effectKey: benchjobs.AnnounceKey(u), payload: p}, err
}

// checkBaseline verifies a baseline did all its work.
func checkBaseline(ctx context.Context, sp *space, res *result, p *provider) error {
	n := res.units
	rows, err := sp.count(ctx, "base_rows", "")
	if err != nil {
		return err
	}
	done, err := sp.count(ctx, "base_ledger", "state = 'done'")
	if err != nil {
		return err
	}
	calls := int(p.calls.Load())
	res.rows, res.calls = rows, calls
	res.check = fmt.Sprintf("rows=%d calls=%d ledger done=%d", rows, calls, done)
	return firstErr(want("rows", rows, n), want("provider calls", calls, n), want("ledger rows done", done, n))
}

// measureCopy is the floor of writing the rows at all: COPY into a table
// like copy_rows on PostgreSQL; on SQLite, one transaction of prepared inserts.
func measureCopy(ctx context.Context, d *database, cfg *config) (result, error) {
	res := result{name: "copy", units: cfg.rows}
	sp, err := d.fresh(ctx, "copy", false)
	if err != nil {
		return res, err
	}
	defer sp.drop()
	if err := sp.exec(ctx, baseTables(d.postgres())[0]); err != nil {
		return res, err
	}
	g := newRows(cfg.rows, cfg.batch)
	if d.postgres() {
		res.what = "COPY (pgx CopyFrom), one statement"
		res.elapsed, res.cpu, err = measure(func() error {
			i := 0
			src := pgx.CopyFromFunc(func() ([]any, error) {
				if i == g.n {
					return nil, nil
				}
				u := g.copyRow(i)
				i++
				return []any{u.ID, u.Account, u.Amount, u.UpdatedAt, u.Key(), int32(1)}, nil
			})
			_, err := sp.pool.CopyFrom(ctx, pgx.Identifier{"base_rows"},
				[]string{"id", "account", "amount", "updated_at", "idemgen_key", "idemgen_job_version"}, src)
			return err
		})
	} else {
		res.what = "one transaction of prepared INSERTs"
		res.elapsed, res.cpu, err = measure(func() error {
			tx, err := sp.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			st, err := tx.PrepareContext(ctx, `INSERT INTO base_rows (id, account, amount, updated_at, idemgen_key, idemgen_job_version) VALUES (?, ?, ?, ?, ?, 1)`)
			if err != nil {
				return err
			}
			for i := range g.n {
				u := g.copyRow(i)
				if _, err := st.ExecContext(ctx, u.ID, u.Account, u.Amount, idemrt.SQLiteTime(u.UpdatedAt), u.Key()); err != nil {
					return err
				}
			}
			return tx.Commit()
		})
	}
	if err != nil {
		return res, fmt.Errorf("copy baseline: %w", err)
	}
	n, err := sp.count(ctx, "base_rows", "")
	res.rows, res.calls = n, -1
	res.check = fmt.Sprintf("rows=%d", n)
	return res, firstErr(err, want("copy baseline: rows", n, cfg.rows))
}

// measurePerRowTx is the loop people write first: per unit, one
// transaction for the upsert and the reservation, then a claim, the call
// and the completion, each a statement of its own.
func measurePerRowTx(ctx context.Context, d *database, cfg *config) (result, error) {
	res := result{name: "per_row_tx", what: "hand-written, a transaction per unit", units: cfg.rows}
	sp, err := d.fresh(ctx, "perrow", false)
	if err != nil {
		return res, err
	}
	defer sp.drop()
	if err := sp.exec(ctx, baseTables(d.postgres())...); err != nil {
		return res, err
	}
	g := newRows(cfg.rows, cfg.batch)
	p := &provider{}
	if d.postgres() {
		res.elapsed, res.cpu, err = measure(func() error { return perRowPostgres(ctx, sp, g, p) })
	} else {
		res.elapsed, res.cpu, err = measure(func() error { return perRowSQLite(ctx, sp, g, p) })
	}
	if err != nil {
		return res, fmt.Errorf("per_row_tx: %w", err)
	}
	return res, checkBaseline(ctx, sp, &res, p)
}

func perRowPostgres(ctx context.Context, sp *space, g *rows, p *provider) error {
	upsert := `INSERT INTO base_rows AS d (id, account, amount, updated_at, idemgen_key, idemgen_job_version)
VALUES ($1, $2, $3, $4, $5, 1)` + pgUpsertSet + ` RETURNING (xmax = 0) AS inserted`
	for i := range g.n {
		b, err := g.baseUnit(i)
		if err != nil {
			return err
		}
		now := time.Now()
		var inserted bool
		err = pgx.BeginFunc(ctx, sp.pool, func(tx pgx.Tx) error {
			err := tx.QueryRow(ctx, upsert, b.u.ID, b.u.Account, b.u.Amount, b.u.UpdatedAt, b.key).Scan(&inserted)
			if err == pgx.ErrNoRows { // unchanged
				return nil
			}
			if err != nil || !inserted {
				return err
			}
			_, err = tx.Exec(ctx, pgReserveOne, b.effectKey, b.key, b.payload, now)
			return err
		})
		if err != nil || !inserted {
			return err
		}
		tag, err := sp.pool.Exec(ctx, pgClaimOne, b.effectKey, baseOwner, now.Add(baseLease), now)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		if err := p.call(ctx, b.effectKey); err != nil {
			return err
		}
		if _, err := sp.pool.Exec(ctx, pgCompleteOne, b.effectKey, baseOwner, time.Now()); err != nil {
			return err
		}
	}
	return nil
}

func perRowSQLite(ctx context.Context, sp *space, g *rows, p *provider) error {
	stmts, err := prepareSQLite(ctx, sp.db)
	if err != nil {
		return err
	}
	defer stmts.close()
	for i := range g.n {
		b, err := g.baseUnit(i)
		if err != nil {
			return err
		}
		now := time.Now()
		tx, err := sp.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		inserted, err := stmts.in(ctx, tx).write(ctx, b, now)
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			tx.Rollback()
			return err
		}
		if !inserted {
			continue
		}
		res, err := stmts.claim.ExecContext(ctx, baseOwner, idemrt.SQLiteTime(now.Add(baseLease)), idemrt.SQLiteTime(now), b.effectKey, idemrt.SQLiteTime(now))
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			continue
		}
		if err := p.call(ctx, b.effectKey); err != nil {
			return err
		}
		done := idemrt.SQLiteTime(time.Now())
		if _, err := stmts.complete.ExecContext(ctx, done, done, b.effectKey, baseOwner); err != nil {
			return err
		}
	}
	return nil
}

// sqliteStmts are the baselines' prepared statements on SQLite.
type sqliteStmts struct{ upsert, reserve, claim, complete *sql.Stmt }

func prepareSQLite(ctx context.Context, db *sql.DB) (*sqliteStmts, error) {
	var s sqliteStmts
	for _, p := range []struct {
		st **sql.Stmt
		q  string
	}{{&s.upsert, sqliteUpsert}, {&s.reserve, sqliteReserve}, {&s.claim, sqliteClaim}, {&s.complete, sqliteComplete}} {
		st, err := db.PrepareContext(ctx, p.q)
		if err != nil {
			s.close()
			return nil, err
		}
		*p.st = st
	}
	return &s, nil
}

func (s *sqliteStmts) close() {
	for _, st := range []*sql.Stmt{s.upsert, s.reserve, s.claim, s.complete} {
		if st != nil {
			st.Close()
		}
	}
}

// in returns the statements bound to tx.
func (s *sqliteStmts) in(ctx context.Context, tx *sql.Tx) *sqliteStmts {
	return &sqliteStmts{tx.StmtContext(ctx, s.upsert), tx.StmtContext(ctx, s.reserve), tx.StmtContext(ctx, s.claim), tx.StmtContext(ctx, s.complete)}
}

// write upserts b and, when it was inserted, reserves its effect (s bound
// to the unit's transaction).
func (s *sqliteStmts) write(ctx context.Context, b baseUnit, now time.Time) (inserted bool, err error) {
	var w string
	err = s.upsert.QueryRowContext(ctx, b.u.ID, b.u.Account, b.u.Amount, idemrt.SQLiteTime(b.u.UpdatedAt), b.key, 1).Scan(&w)
	if err == sql.ErrNoRows { // unchanged
		return false, nil
	}
	if err != nil || w != "inserted" {
		return false, err
	}
	t := idemrt.SQLiteTime(now)
	_, err = s.reserve.ExecContext(ctx, b.effectKey, b.key, b.payload, t, t)
	return err == nil, err
}

// measureHandSet is the hand-written set-based version of fx_job's
// guarantees, a batch of cfg.batch units at a time: on PostgreSQL one
// unnest() statement for the upsert (xmax = 0 tells inserts apart) and
// one for the reservations in the batch's transaction, then one bulk
// claim, the calls, one bulk completion; on SQLite the same steps as
// prepared statements, one transaction per step and batch.
func measureHandSet(ctx context.Context, d *database, cfg *config) (result, error) {
	res := result{name: "handset", what: fmt.Sprintf("hand-written set-based, batches of %d", cfg.batch), units: cfg.rows}
	sp, err := d.fresh(ctx, "handset", false)
	if err != nil {
		return res, err
	}
	defer sp.drop()
	if err := sp.exec(ctx, baseTables(d.postgres())...); err != nil {
		return res, err
	}
	g := newRows(cfg.rows, cfg.batch)
	p := &provider{}
	var stmts *sqliteStmts
	if !d.postgres() {
		if stmts, err = prepareSQLite(ctx, sp.db); err != nil {
			return res, err
		}
		defer stmts.close()
	}
	res.elapsed, res.cpu, err = measure(func() error {
		batch := make([]baseUnit, 0, g.page)
		for start := 0; start < g.n; start += g.page {
			batch = batch[:0]
			for i := start; i < min(start+g.page, g.n); i++ {
				b, err := g.baseUnit(i)
				if err != nil {
					return err
				}
				batch = append(batch, b)
			}
			var err error
			if d.postgres() {
				err = handSetPostgres(ctx, sp, batch, p)
			} else {
				err = handSetSQLite(ctx, sp, stmts, batch, p)
			}
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("handset: %w", err)
	}
	return res, checkBaseline(ctx, sp, &res, p)
}

const (
	pgUpsertUnnest = `INSERT INTO base_rows AS d (id, account, amount, updated_at, idemgen_key, idemgen_job_version)
SELECT id, account, amount, updated_at, idemgen_key, 1
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::text[]) AS t(id, account, amount, updated_at, idemgen_key)` +
		pgUpsertSet + ` RETURNING d.id, (xmax = 0) AS inserted`
	pgReserveUnnest = `INSERT INTO base_ledger (effect_key, job, effect, effect_version, job_version, unit_key, payload, state, attempts, created_at, updated_at)
SELECT k, 'fx_job', 'announce', 1, 1, u, p, 'pending', 0, $4, $4 FROM unnest($1::text[], $2::text[], $3::bytea[]) AS t(k, u, p)
ON CONFLICT (effect_key) DO NOTHING`
	pgClaimBulk = `UPDATE base_ledger SET lease_owner = $2, lease_until = $3, attempts = attempts + 1, updated_at = $4
WHERE effect_key = ANY($1) AND state = 'pending' AND (lease_until IS NULL OR lease_until < $4)
RETURNING effect_key`
	pgCompleteBulk = `UPDATE base_ledger SET state = 'done', lease_until = NULL, done_at = $3, updated_at = $3
WHERE effect_key = ANY($1) AND lease_owner = $2 AND state = 'pending'`
)

func handSetPostgres(ctx context.Context, sp *space, batch []baseUnit, p *provider) error {
	n := len(batch)
	ids, accounts, keys := make([]string, n), make([]string, n), make([]string, n)
	amounts, times := make([]int64, n), make([]time.Time, n)
	byID := make(map[string]int, n)
	for i, b := range batch {
		ids[i], accounts[i], amounts[i], times[i], keys[i] = b.u.ID, b.u.Account, b.u.Amount, b.u.UpdatedAt, b.key
		byID[b.u.ID] = i
	}
	now := time.Now()
	var owed []string
	err := pgx.BeginFunc(ctx, sp.pool, func(tx pgx.Tx) error {
		rs, err := tx.Query(ctx, pgUpsertUnnest, ids, accounts, amounts, times, keys)
		if err != nil {
			return err
		}
		var fxKeys, unitKeys []string
		var payloads [][]byte
		var id string
		var inserted bool
		_, err = pgx.ForEachRow(rs, []any{&id, &inserted}, func() error {
			if inserted {
				b := batch[byID[id]]
				fxKeys, unitKeys, payloads = append(fxKeys, b.effectKey), append(unitKeys, b.key), append(payloads, b.payload)
			}
			return nil
		})
		if err != nil || len(fxKeys) == 0 {
			return err
		}
		owed = fxKeys
		_, err = tx.Exec(ctx, pgReserveUnnest, fxKeys, unitKeys, payloads, now)
		return err
	})
	if err != nil || len(owed) == 0 {
		return err
	}
	rs, err := sp.pool.Query(ctx, pgClaimBulk, owed, baseOwner, now.Add(baseLease), now)
	if err != nil {
		return err
	}
	claimed, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, key := range claimed {
		if err := p.call(ctx, key); err != nil {
			return err
		}
	}
	_, err = sp.pool.Exec(ctx, pgCompleteBulk, claimed, baseOwner, time.Now())
	return err
}

func handSetSQLite(ctx context.Context, sp *space, stmts *sqliteStmts, batch []baseUnit, p *provider) error {
	now := time.Now()
	var owed []baseUnit
	// One transaction per step: a prepared statement per unit inside it.
	inTx := func(fn func(tx *sql.Tx) error) error {
		tx, err := sp.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := fn(tx); err != nil {
			tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	err := inTx(func(tx *sql.Tx) error {
		st := stmts.in(ctx, tx)
		for _, b := range batch {
			inserted, err := st.write(ctx, b, now)
			if err != nil {
				return err
			}
			if inserted {
				owed = append(owed, b)
			}
		}
		return nil
	})
	if err != nil || len(owed) == 0 {
		return err
	}
	var claimed []baseUnit
	until, at := idemrt.SQLiteTime(now.Add(baseLease)), idemrt.SQLiteTime(now)
	err = inTx(func(tx *sql.Tx) error {
		claim := stmts.in(ctx, tx).claim
		for _, b := range owed {
			res, err := claim.ExecContext(ctx, baseOwner, until, at, b.effectKey, at)
			if err != nil {
				return err
			}
			if n, _ := res.RowsAffected(); n == 1 {
				claimed = append(claimed, b)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range claimed {
		if err := p.call(ctx, b.effectKey); err != nil {
			return err
		}
	}
	done := idemrt.SQLiteTime(time.Now())
	return inTx(func(tx *sql.Tx) error {
		complete := stmts.in(ctx, tx).complete
		for _, b := range claimed {
			if _, err := complete.ExecContext(ctx, done, done, b.effectKey, baseOwner); err != nil {
				return err
			}
		}
		return nil
	})
}
