package ops

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idempg"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemsqlite"
)

// isPostgres reports whether target names a PostgreSQL database (a
// postgres:// or postgresql:// URL) rather than a SQLite file.
func isPostgres(target string) bool {
	return strings.HasPrefix(target, "postgres://") || strings.HasPrefix(target, "postgresql://")
}

// Open opens the database of pkg named by target: a PostgreSQL URL (its
// search_path parameter selects the schema) or the path of an existing
// SQLite file. It checks that the package's bookkeeping tables are there.
// Writes are logged to log. Closing the DB closes what Open opened.
func Open(ctx context.Context, target string, pkg *generator.Package, log *slog.Logger) (*idemops.DB, error) {
	desc := Describe(pkg)
	var db *sql.DB
	var st idem.Store
	closePool := func() {}
	dialect := idemops.SQLite
	if isPostgres(target) {
		dialect = idemops.Postgres
		pool, err := pgxpool.New(ctx, target)
		if err != nil {
			return nil, err
		}
		db, st, closePool = stdlib.OpenDBFromPool(pool), idempg.NewStore(pool, desc.Tables, nil), pool.Close
	} else {
		// Never create a file: a mistyped path must not pass as an empty,
		// healthy database. (mode=rw below refuses too; this says why.)
		if _, statErr := os.Stat(target); statErr != nil {
			return nil, fmt.Errorf("SQLite database: %w", statErr)
		}
		// As the generated packages' users open it (example/db.go): a busy
		// timeout to queue behind a running job's writes; IMMEDIATE
		// transactions take the write lock up front, as the runtime's do.
		var err error
		db, err = sql.Open("sqlite3", "file:"+url.PathEscape(target)+"?mode=rw&_txlock=immediate&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, err
		}
		st = idemsqlite.NewStore(db, desc.Tables, nil)
	}
	d, err := idemops.New(ctx, db, st, dialect, desc, log)
	if err != nil {
		db.Close()
		closePool()
		return nil, err
	}
	d.OnClose(closePool)
	return d, nil
}

// Describe is pkg as the runtime's operations read it.
func Describe(pkg *generator.Package) *idemops.Package {
	t := pkg.Tables
	desc := &idemops.Package{Name: pkg.Name, Tables: idemrt.Tables{Ledger: t.Ledger, Progress: t.Progress, Seen: t.Seen, Parked: t.Parked, Limits: t.Limits}}
	for _, j := range pkg.Jobs {
		job := &idemops.Job{Name: j.Name, Doc: j.Doc, Source: string(j.Source)}
		if j.Unit != nil {
			job.UnitMaxAttempts = j.Unit.MaxAttempts
		}
		for _, e := range j.Effects {
			job.Effects = append(job.Effects, &idemops.EffectSpec{Name: e.Name, Version: e.Version, Lease: e.Lease,
				MaxAttempts: e.MaxAttempts, RateN: int(e.Rate.N), RatePer: e.Rate.Per, Concurrency: e.Concurrency,
				RedactPayload: e.RedactPayload, RedactResult: e.RedactResult})
		}
		desc.Jobs = append(desc.Jobs, job)
	}
	return desc
}
