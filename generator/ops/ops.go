// Package ops reads and repairs a generated package's bookkeeping in a live
// database, for the person on call: the progress, ledger, handed-in key and
// parked tables that the package's migrations created. `idemgen status` and
// `idemgen ledger` are its face.
//
// It works from the resolved model (table names, effect leases, max
// attempts), never from the generated Go code, so one idemgen binary serves
// every generated package. It reads with its own queries; it writes only
// through the runtime's recovery (idem.Retry, idem.RetryParked,
// idem.Forget), the code a generated Store's Retry, RetryParked and Forget
// run: one transaction that locks the rows it changes first, and never
// touches an effect a worker holds under a live lease.
package ops

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idempg"
	"github.com/idemgen/idemgen/idem/idemsqlite"
)

// DB is a generated package's database, opened for inspection and repair.
type DB struct {
	db      *sql.DB
	st      idem.Store // the runtime's view of the same database: recovery writes through it
	closeFn func()     // closes what db was opened from
	dialect model.Dialect
	pkg     *model.Package
	t       model.Tables
	log     *slog.Logger
	now     func() time.Time
	// retryCols: the ledger has next_attempt_at and parked_reason (the
	// migration that added them ran).
	retryCols bool
	// exactDone and doneSample: how Status counts done rows (SetDoneCounting).
	exactDone, doneSample int
	traceReads            func(query string, args []any) // TraceReads
}

// IsPostgres reports whether target names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func IsPostgres(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// Open opens the database of pkg named by target: a PostgreSQL URL (its
// search_path parameter selects the schema) or the path of an existing
// SQLite file. It checks that the package's bookkeeping tables are there.
// Writes are logged to log.
func Open(ctx context.Context, target string, pkg *model.Package, log *slog.Logger) (*DB, error) {
	d := &DB{pkg: pkg, t: pkg.Tables, log: log, now: time.Now, closeFn: func() {}}
	tables := idem.Tables{Ledger: d.t.Ledger, Progress: d.t.Progress, Seen: d.t.Seen, Parked: d.t.Parked, Limits: d.t.Limits}
	var err error
	if IsPostgres(target) {
		d.dialect = model.Postgres
		var pool *pgxpool.Pool
		if pool, err = pgxpool.New(ctx, target); err != nil {
			return nil, err
		}
		d.db, d.st, d.closeFn = stdlib.OpenDBFromPool(pool), idempg.NewStore(pool, tables, nil), pool.Close
	} else {
		d.dialect = model.SQLite
		// Never create a file: a mistyped path must not pass as an empty,
		// healthy database. (mode=rw below refuses too; this says why.)
		if _, statErr := os.Stat(target); statErr != nil {
			return nil, fmt.Errorf("SQLite database: %w", statErr)
		}
		// As the generated packages' users open it (example/db.go): a busy
		// timeout to queue behind a running job's writes; IMMEDIATE
		// transactions take the write lock up front, as the runtime's do.
		d.db, err = sql.Open("sqlite3", "file:"+url.PathEscape(target)+"?mode=rw&_txlock=immediate&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		d.st = idemsqlite.NewStore(d.db, tables, nil)
	}
	if err := d.checkTables(ctx); err != nil {
		d.Close()
		return nil, err
	}
	d.retryCols = d.hasColumns(ctx, d.t.Ledger, "next_attempt_at, parked_reason")
	d.SetDoneCounting(0, 0)
	return d, nil
}

// Close closes the database.
func (d *DB) Close() error {
	err := d.db.Close()
	d.closeFn()
	return err
}

// Dialect is the database's dialect.
func (d *DB) Dialect() model.Dialect { return d.dialect }

// SetClock replaces time.Now, for tests.
func (d *DB) SetClock(now func() time.Time) { d.now = now }

// checkTables makes a wrong database, schema or package a clear error
// before any work: every bookkeeping table the package's migrations create.
func (d *DB) checkTables(ctx context.Context) error {
	// to_regclass resolves a name through search_path, as the queries will.
	exists := "SELECT to_regclass(?) IS NOT NULL"
	if d.dialect == model.SQLite {
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
	if d.dialect != model.Postgres {
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
// sqliteTimeFormat, idem/keys.go).
const sqliteTimeFormat = "2006-01-02T15:04:05.000000000Z"

// at is an instant as a query parameter of the dialect.
func (d *DB) at(t time.Time) any {
	if d.dialect == model.SQLite {
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
func (d *DB) job(name string) *model.Job {
	for _, j := range d.pkg.Jobs {
		if j.Name == name {
			return j
		}
	}
	return nil
}

// effect returns the spec's effect of job, or nil.
func (d *DB) effect(job, name string) *model.Effect {
	if j := d.job(job); j != nil {
		for _, e := range j.Effects {
			if e.Name == name {
				return e
			}
		}
	}
	return nil
}
