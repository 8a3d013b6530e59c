package generator_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idempg"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemsqlite"
)

// explainRows is how many ledger rows (and handed-in key records) the plans
// are asked for over: enough that a scan of the whole table costs more than
// any index.
const explainRows = 20000

// The runtime's queries that run while the ledger is large, and must read
// it on an index: the claim and the drain, the backlog gauge, the purges
// and the listings' pages.
var indexedQueries = map[model.Dialect][]string{
	model.Postgres: {"ClaimEffects", "PendingEffects", "CountBacklog", "PurgeEffects", "PurgeSeen", "LedgerPage", "ParkedPage"},
	model.SQLite:   {"ClaimEffect", "PendingEffects", "CountBacklog", "PurgeEffects", "PurgeSeen", "LedgerPage", "ParkedPage"},
}

// TestLargeLedgerQueriesUseIndexes fills a new package's bookkeeping tables
// (the schema its first migration creates) with explainRows rows of
// history, analyzes them, and fails if the plan of a query above scans the
// ledger or the handed-in key records whole: a Seq Scan on PostgreSQL, a
// SCAN without an index in SQLite's EXPLAIN QUERY PLAN.
func TestLargeLedgerQueriesUseIndexes(t *testing.T) {
	p := &model.Package{Name: "idem", Dialects: []model.Dialect{model.Postgres, model.SQLite}, Tables: sqlgen.LedgerPlaceholders()}
	tables := idemrt.LedgerPlaceholders
	for _, db := range openDatabases(t) {
		t.Run(string(db.dialect), func(t *testing.T) {
			ctx := context.Background()
			dialect := goose.DialectSQLite3
			if db.dialect == model.Postgres {
				dialect = goose.DialectPostgres
			}
			fsys := fstest.MapFS{"00001_idemgen.sql": {Data: sqlgen.InitialMigration(p, db.dialect)}}
			prov, err := goose.NewProvider(dialect, db.db, fsys, goose.WithTableName("idem_migrations"), goose.WithDisableGlobalRegistry(true))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := prov.Up(ctx); err != nil {
				t.Fatal(err)
			}
			for _, q := range fillStatements(db.dialect) {
				if _, err := db.db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			queries := namedQueries(string(sqlgen.LedgerQueries(db.dialect)))
			for _, name := range indexedQueries[db.dialect] {
				text, ok := queries[name]
				if !ok {
					t.Fatalf("no query %s in the runtime's ledger queries", name)
				}
				plan := explain(t, db, withValues(text, db.dialect))
				t.Logf("%s:\n%s", name, plan)
				for _, table := range []string{tables.Ledger, tables.Seen} {
					if scansWhole(plan, table, db.dialect) {
						t.Errorf("%s reads %s whole over %d rows:\n%s", name, table, explainRows, plan)
					}
				}
			}
			statusReadsUseIndexes(t, db, p)
		})
	}
}

// statusReadsUseIndexes runs idemgen status (idemops.DB.Status) on the filled
// tables, once counting each effect's done rows exactly and once from a
// sample, as above its exact limit, and as the operations page's front
// page reads it (StatusUpTo and ActivityUpTo, each count stopping at a
// limit), and fails if the plan of any ledger read it made scans the
// ledger whole. (The spec of p has no jobs: status
// finds the filled ones on the index, as jobs the spec no longer has.)
func statusReadsUseIndexes(t *testing.T, db *testDB, p *model.Package) {
	for _, counting := range []struct {
		name                string
		exact, sample, upTo int
	}{{"exact", 0, 0, 0}, {"sampled", 1000, 2000, 0}, {"up to a limit", 0, 0, 100}} {
		st, err := openOps(t.Context(), db, p)
		if err != nil {
			t.Fatal(err)
		}
		st.SetDoneCounting(counting.exact, counting.sample)
		type read struct {
			query string
			args  []any
		}
		var reads []read
		st.TraceReads(func(query string, args []any) { reads = append(reads, read{query, args}) })
		var status *idemops.Status
		if counting.upTo > 0 {
			status, err = st.StatusUpTo(t.Context(), counting.upTo)
			if err == nil {
				_, err = st.ActivityUpTo(t.Context(), 24*time.Hour, counting.upTo)
			}
		} else {
			status, err = st.Status(t.Context())
		}
		st.Close()
		if err != nil {
			t.Fatalf("status (%s done counts): %v", counting.name, err)
		}
		if len(status.Jobs) != 2 || len(reads) < 8 {
			t.Fatalf("status (%s done counts) read %d statements for %d jobs; want the 2 filled", counting.name, len(reads), len(status.Jobs))
		}
		for _, r := range reads {
			if !strings.Contains(r.query, idemrt.LedgerPlaceholders.Ledger) {
				continue
			}
			plan := explain(t, db, r.query, r.args...)
			if scansWhole(plan, idemrt.LedgerPlaceholders.Ledger, db.dialect) {
				t.Errorf("status (%s done counts) reads the ledger whole over %d rows: %s %v\n%s", counting.name, explainRows, r.query, r.args, plan)
			}
		}
	}
}

// explainBase is the time the filled history ends.
var explainBase = time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)

// fillStatements fill the placeholder tables: a tenth of the ledger another
// job's, effects fx_a and fx_b, 1% pending, 1% parked, the rest done over
// the last 60 days; handed-in key records over 60 days, half of them of
// units with ledger rows; 2,000 parked units.
func fillStatements(d model.Dialect) []string {
	series := fmt.Sprintf("generate_series(1, %d) AS g(i)", explainRows)
	day := func(n string) string {
		return fmt.Sprintf("timestamptz '%s' - (%s) * interval '1 day'", explainBase.Format(time.RFC3339), n)
	}
	done := "CASE WHEN i % 100 > 2 THEN " + day("i % 60") + " END"
	with, b := "", `'\\x00'::bytea`
	if d == model.SQLite {
		with = fmt.Sprintf("WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < %d) ", explainRows)
		series, b = "g", "X'00'"
		day = func(n string) string {
			return fmt.Sprintf("strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', '%s', '-' || (%s) || ' days')", explainBase.Format("2006-01-02"), n)
		}
		done = "CASE WHEN i % 100 > 2 THEN " + day("i % 60") + " END"
	}
	t := idemrt.LedgerPlaceholders
	return []string{
		with + `INSERT INTO ` + t.Ledger + ` (effect_key, job, effect, effect_version, job_version, unit_key, payload, state, attempts, created_at, updated_at, done_at)
SELECT 'k' || i, CASE WHEN i % 10 = 0 THEN 'other' ELSE 'job' END, CASE WHEN i % 2 = 0 THEN 'fx_a' ELSE 'fx_b' END, 1, 1, 'u' || i, ` + b + `,
    CASE WHEN i % 100 = 1 THEN 'pending' WHEN i % 100 = 2 THEN 'failed' ELSE 'done' END, 1, ` + day("i % 60") + `, ` + day("i % 60") + `, ` + done + `
FROM ` + series,
		with + `INSERT INTO ` + t.Seen + ` (job, unit_key, payload_hash, job_version, first_seen)
SELECT 'job', CASE WHEN i % 2 = 0 THEN 'u' ELSE 's' END || i, ` + b + `, 1, ` + day("i % 60") + ` FROM ` + series,
		with + `INSERT INTO ` + t.Parked + ` (job, unit_key, payload, payload_hash, attempts, last_error, state, job_version, first_failed_at, updated_at)
SELECT 'job', 'p' || i, ` + b + `, ` + b + `, 3, 'failed', 'parked', 1, ` + day("0") + `, ` + day("0") + ` FROM ` + series + ` WHERE i <= 2000`,
		"ANALYZE",
	}
}

// namedQueries splits a sqlc queries file into its statements by name, comments left out.
func namedQueries(text string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(text, "-- name: ")[1:] {
		name, _, _ := strings.Cut(part, " ")
		var lines []string
		for _, line := range strings.Split(part, "\n")[1:] {
			if !strings.HasPrefix(strings.TrimSpace(line), "--") {
				lines = append(lines, line)
			}
		}
		out[name] = strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";")
	}
	return out
}

var param = regexp.MustCompile(`@(\w+)(::\w+\[\])?`)

// withValues puts a literal in place of each @param: the job and effect
// filled, pages from the start, and a purge that finds what expired in
// the last two days of the 60 filled, as a purge run on a timer does.
func withValues(q string, d model.Dialect) string {
	at := func(t time.Time) string {
		if d == model.SQLite {
			return "'" + idemrt.SQLiteTime(t) + "'"
		}
		return "timestamptz '" + t.Format(time.RFC3339Nano) + "'"
	}
	values := map[string]string{
		"job": "'job'", "effect": "'fx_a'", "after": "''", "row_limit": "1000", "owner": "'w'", "effect_key": "'k5'",
		"before": at(explainBase.AddDate(0, 0, -58)), "now": at(explainBase), "lease_until": at(explainBase.Add(time.Minute)),
		"updated_at": at(explainBase), "effect_keys": "ARRAY['k5', 'k7']::text[]",
	}
	return param.ReplaceAllStringFunc(q, func(m string) string {
		name := param.FindStringSubmatch(m)[1]
		v, ok := values[name]
		if !ok {
			panic("withValues: no value for @" + name)
		}
		return v
	})
}

// explain returns the query's plan, a line per node.
func explain(t *testing.T, db *testDB, q string, args ...any) string {
	t.Helper()
	prefix, col := "EXPLAIN ", 0
	if db.dialect == model.SQLite {
		prefix, col = "EXPLAIN QUERY PLAN ", 3
	}
	rows, err := db.db.Query(prefix+q, args...)
	if err != nil {
		t.Fatalf("%s%s: %v", prefix, q, err)
	}
	defer rows.Close()
	cols, _ := rows.Columns()
	var lines []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, fmt.Sprint(vals[col]))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}

// scansWhole reports whether a plan reads table without an index.
func scansWhole(plan, table string, d model.Dialect) bool {
	if d == model.Postgres {
		return regexp.MustCompile(`Seq Scan on ` + table + `\b`).MatchString(plan)
	}
	return regexp.MustCompile(`(?m)\bSCAN ` + table + `( AS \w+)?$`).MatchString(plan)
}

// openOps opens db's tables for the runtime's operations reads as idemgen
// status opens them (cmd/idemgen/internal/ops.Open), on a connection of
// their own, which closing the DB closes: a pool for PostgreSQL, IMMEDIATE
// transactions for SQLite.
func openOps(ctx context.Context, db *testDB, p *model.Package) (*idemops.DB, error) {
	t := p.Tables
	desc := &idemops.Package{Name: p.Name, Tables: idemrt.Tables{Ledger: t.Ledger, Progress: t.Progress, Seen: t.Seen, Parked: t.Parked, Limits: t.Limits}}
	log := slog.New(slog.DiscardHandler)
	if db.dialect == model.Postgres {
		pool, err := pgxpool.New(ctx, db.target)
		if err != nil {
			return nil, err
		}
		d, err := idemops.New(ctx, stdlib.OpenDBFromPool(pool), idempg.NewStore(pool, desc.Tables, nil), idemops.Postgres, desc, log)
		if err != nil {
			pool.Close()
			return nil, err
		}
		d.OnClose(pool.Close)
		return d, nil
	}
	sdb, err := sql.Open("sqlite3", "file:"+db.target+"?mode=rw&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	d, err := idemops.New(ctx, sdb, idemsqlite.NewStore(sdb, desc.Tables, nil), idemops.SQLite, desc, log)
	if err != nil {
		sdb.Close()
	}
	return d, err
}
