// Package idemops reads and repairs a generated package's bookkeeping in a
// live database, for the person on call: the progress, ledger, handed-in
// key and parked tables that the package's migrations created. `idemgen
// status`, `idemgen ledger` and `idemgen ui` are its faces, and so is the
// handler a service mounts (idem/idemui).
//
// It works from a description of the package (Package: table names, jobs,
// effect versions, leases, max attempts), never from the generated Go
// code, so one idemgen binary serves every generated package. It opens no
// database itself and links no driver: it is given a database/sql handle
// and the runtime's Store over the same database. It reads with its own
// queries, compiled by sqlc as the stores' are (internal/opspg,
// internal/opssqlite) and run over the package's table names: the limits
// table's, the progress table's, the parked table's counts and an
// effect's parked rows so far; the rest are still written in Go. It writes only through the runtime's recovery (idem.Retry,
// idem.RetryParked, idem.Forget), the code a generated Store's Retry,
// RetryParked and Forget run: one transaction that locks the rows it
// changes first, and never touches an effect a worker holds under a live
// lease.
package idemops

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Dialect is the SQL dialect of a package's database.
type Dialect string

const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Package describes a generated package as its spec says: what Status
// needs to tell current versions from history and a lease from an overdue
// row. The idemgen command builds it from the spec.
type Package struct {
	Name   string
	Tables idemrt.Tables
	// Jobs in spec order. Rows of jobs or effects not here are shown too,
	// marked as not in the spec.
	Jobs []*Job
}

// TablesOf names the bookkeeping tables of the generated package pkg as
// idemgen names them, <pkg>_idem_ledger and so on, unless the spec's
// tables key renames them.
func TablesOf(pkg string) idemrt.Tables {
	p := pkg + "_idem_"
	return idemrt.Tables{Ledger: p + "ledger", Progress: p + "progress", Seen: p + "seen", Parked: p + "parked", Limits: p + "limits"}
}

// Job is a job of a Package.
type Job struct {
	Name string
	// Doc is the spec's doc of the job: what it is for, shown on the
	// operations page.
	Doc string
	// Source is "watermark", "cursor" or "none" (units are handed in).
	Source string
	// UnitMaxAttempts parks a unit whose write failed this many times; 0: never.
	UnitMaxAttempts int
	Effects         []*EffectSpec
}

// The values of Job.Source.
const (
	SourceWatermark = "watermark"
	SourceCursor    = "cursor"
	SourceNone      = "none"
)

// EffectSpec is an effect of a Job, as the spec declares it.
type EffectSpec struct {
	Name        string
	Version     int
	Lease       time.Duration
	MaxAttempts int
	// RatePer and RateN: at most RateN provider calls per RatePer across
	// every worker (0: no rate). Concurrency: at most this many calls at
	// once (0: no bound).
	RateN       int
	RatePer     time.Duration
	Concurrency int
	// RedactPayload and RedactResult: the spec's redact. Reads with
	// payloads (Show, History) and their JSON return "[redacted]" in
	// their place; a parked unit's payload is redacted when an effect of
	// its job redacts its payload.
	RedactPayload, RedactResult bool
}

// DefaultLease is the lease of an effect the description does not have
// (the spec's default, generator/internal/model.DefaultLease).
const DefaultLease = 5 * time.Minute

// DB is a generated package's database, opened for inspection and repair.
type DB struct {
	db      *sql.DB
	st      idem.Store // the runtime's view of the same database: recovery writes through it
	dialect Dialect
	pkg     *Package
	t       idemrt.Tables
	// tables runs the sqlc-compiled reads on t (queries.go).
	tables tableQueries
	log    *slog.Logger
	now    func() time.Time
	// clockSet: SetClock replaced now, for recovery too (recoveryNow).
	clockSet bool
	// retryCols: the ledger has next_attempt_at and parked_reason (the
	// migration that added them ran).
	retryCols bool
	// bytewiseKeys: text compares bytewise (SQLite; PostgreSQL under the
	// C collation), so a key prefix bounds a range of the key indexes.
	bytewiseKeys bool
	// exactDone and doneSample: how Status counts done rows (SetDoneCounting).
	exactDone, doneSample int
	traceReads            func(query string, args []any) // TraceReads
	onClose               []func()                       // OnClose
}

// New inspects pkg's tables in db, a database/sql handle on the database
// that st, the runtime's store, writes to (for PostgreSQL,
// stdlib.OpenDBFromPool over the store's pool; for SQLite, the handle the
// store was made with). It checks that the package's bookkeeping tables
// are there. Writes are logged to log. Closing the DB closes db.
func New(ctx context.Context, db *sql.DB, st idem.Store, dialect Dialect, pkg *Package, log *slog.Logger) (*DB, error) {
	if dialect != Postgres && dialect != SQLite {
		return nil, fmt.Errorf("idemops: dialect %q: want %q or %q", dialect, Postgres, SQLite)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := &DB{db: db, st: st, dialect: dialect, pkg: pkg, t: pkg.Tables, log: log, now: time.Now}
	d.tables = tableQueries{d: d, names: idemrt.NewTableNames(d.t)}
	if _, err := d.tables.names.SQL(""); err != nil {
		return nil, fmt.Errorf("package %s: %w", pkg.Name, err)
	}
	if err := d.checkTables(ctx); err != nil {
		return nil, err
	}
	d.retryCols = d.hasColumns(ctx, d.t.Ledger, "next_attempt_at, parked_reason")
	d.bytewiseKeys = d.keysCompareBytewise(ctx)
	d.SetDoneCounting(0, 0)
	return d, nil
}

// OnClose has Close call f after it closes the database handle: for what
// the handle was made from, such as the pool of stdlib.OpenDBFromPool,
// which closing the handle leaves open.
func (d *DB) OnClose(f func()) { d.onClose = append(d.onClose, f) }

// Package is the package the DB was opened for.
func (d *DB) Package() *Package { return d.pkg }

// Close closes the database.
func (d *DB) Close() error {
	err := d.db.Close()
	for _, f := range d.onClose {
		f()
	}
	return err
}

// Dialect is the database's dialect.
func (d *DB) Dialect() Dialect { return d.dialect }

// SetClock replaces time.Now, for tests.
// Recovery then compares leases on it too, instead of the database's
// clock.
func (d *DB) SetClock(now func() time.Time) { d.now, d.clockSet = now, true }

// checkTables makes a wrong database, schema or package a clear error
// before any work: every bookkeeping table the package's migrations create.
func (d *DB) checkTables(ctx context.Context) error {
	// to_regclass resolves a name through search_path, as the queries will.
	exists := "SELECT to_regclass(?) IS NOT NULL"
	if d.dialect == SQLite {
		exists = "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = ?"
	}
	var missing []string
	for _, table := range []string{d.t.Progress, d.t.Ledger, d.t.Seen, d.t.Parked} {
		var ok bool
		if err := d.db.QueryRowContext(ctx, d.q(exists), table).Scan(&ok); err != nil {
			return fmt.Errorf("look up table %s: %w", table, err)
		}
		if !ok {
			missing = append(missing, table)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("package %s: no table %s in this database; apply the package's migrations (Store.Migrate), or point -db (and search_path) at the database they ran in",
			d.pkg.Name, strings.Join(missing, ", "))
	}
	return nil
}

// keysCompareBytewise reports whether the ledger's effect keys compare
// bytewise: always on SQLite (BINARY); on PostgreSQL when the column's
// collation is C or POSIX (or the database's is, and the column has the
// default). Under another collation a prefix is no range of the index, and
// a search by key prefix reads the ledger in key order.
func (d *DB) keysCompareBytewise(ctx context.Context) bool {
	if d.dialect == SQLite {
		return true
	}
	var collation string
	err := d.db.QueryRowContext(ctx, `SELECT CASE WHEN a.attcollation = 100 THEN (SELECT datcollate FROM pg_database WHERE datname = current_database())
    ELSE (SELECT collname FROM pg_collation WHERE oid = a.attcollation) END
FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attname = 'effect_key'`, d.t.Ledger).Scan(&collation)
	if err != nil {
		return false
	}
	switch collation {
	case "C", "POSIX", "C.UTF-8", "C.utf8", "ucs_basic":
		return true
	}
	return false
}

// hasColumns reports whether table has cols (a comma-separated list): a
// database whose package's newer migrations have not run yet lacks some.
func (d *DB) hasColumns(ctx context.Context, table, cols string) bool {
	rows, err := d.db.QueryContext(ctx, "SELECT "+cols+" FROM "+table+" WHERE 1 = 0")
	if err != nil {
		return false
	}
	rows.Close()
	return true
}

// q turns a query written with ? placeholders into the dialect's.
func (d *DB) q(query string) string {
	if d.dialect != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// sqliteTimeFormat is how the generated SQLite stores keep instants: fixed-
// width UTC text, so text comparison orders them (the runtime's
// sqliteTimeFormat, idem/idemrt/keys.go).
const sqliteTimeFormat = "2006-01-02T15:04:05.000000000Z"

// at is an instant as a query parameter of the dialect.
func (d *DB) at(t time.Time) any {
	if d.dialect == SQLite {
		return t.UTC().Format(sqliteTimeFormat)
	}
	return t
}

// dbTime scans a timestamp of either dialect: time.Time from PostgreSQL,
// the fixed-width text of sqliteTimeFormat from SQLite, or NULL.
type dbTime struct {
	t     time.Time
	valid bool
}

func (d *dbTime) Scan(v any) error {
	var s string
	switch v := v.(type) {
	case nil:
		*d = dbTime{}
		return nil
	case time.Time:
		*d = dbTime{t: v.UTC(), valid: true}
		return nil
	case string:
		s = v
	case []byte:
		s = string(v)
	default:
		return fmt.Errorf("timestamp of type %T", v)
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", s, err)
	}
	*d = dbTime{t: t.UTC(), valid: true}
	return nil
}

// ptr is the time, or nil for NULL.
func (d dbTime) ptr() *time.Time {
	if !d.valid {
		return nil
	}
	t := d.t
	return &t
}

// job returns the spec's job named name, or nil.
func (d *DB) job(name string) *Job {
	for _, j := range d.pkg.Jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}

// effect returns the spec's effect of job, or nil.
func (d *DB) effect(job, name string) *EffectSpec {
	if j := d.job(job); j != nil {
		for _, e := range j.Effects {
			if e.Name == name {
				return e
			}
		}
	}
	return nil
}
