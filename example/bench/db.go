package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sqlitedriver "github.com/ncruces/go-sqlite3/driver" // the driver the example and the generated tests use

	"github.com/idemgen/idemgen/example/bench/benchjobs"
)

// database is the one database every measurement of a run uses. Each
// measurement gets a space of its own on it: a fresh schema on PostgreSQL,
// a fresh file on SQLite.
type database struct {
	url      string // PostgreSQL URL; "" for SQLite
	dir      string // SQLite: the directory of the files
	removeD  bool   // the directory is ours to remove
	maxConns int32
	seq      atomic.Int64
}

func openDatabase(pgURL string, maxConns int) (*database, error) {
	d := &database{url: pgURL, maxConns: int32(maxConns)}
	if pgURL == "" {
		dir, err := os.MkdirTemp("", "idemgen-bench-")
		if err != nil {
			return nil, err
		}
		d.dir, d.removeD = dir, true
	}
	return d, nil
}

func (d *database) postgres() bool { return d.url != "" }

func (d *database) describe() string {
	if d.postgres() {
		u, err := url.Parse(d.url)
		if err != nil {
			return "PostgreSQL"
		}
		return "PostgreSQL " + u.Host + u.Path + " (a schema per measurement, dropped after it)"
	}
	return "SQLite (github.com/ncruces/go-sqlite3, WAL) in " + d.dir + " (a file per measurement)"
}

func (d *database) close() {
	if d.removeD {
		os.RemoveAll(d.dir)
	}
}

// space is one measurement's fresh schema (PostgreSQL) or file (SQLite).
type space struct {
	name  string
	path  string        // SQLite: the file
	url   string        // PostgreSQL: the URL with this schema as search_path
	pool  *pgxpool.Pool // PostgreSQL
	db    *sql.DB       // SQLite
	store *benchjobs.Store
	drop  func()
}

// fresh makes a new space; with migrate, the generated package's
// migrations are applied and space.store is set.
func (d *database) fresh(ctx context.Context, what string, migrate bool) (*space, error) {
	return d.freshTimed(ctx, what, migrate, nil)
}

// freshTimed is fresh with, unless timer is nil, every statement of the
// space's connections timed into timer (history.go).
func (d *database) freshTimed(ctx context.Context, what string, migrate bool, timer *statementTimer) (*space, error) {
	n := d.seq.Add(1)
	sp := &space{}
	if d.postgres() {
		sp.name = fmt.Sprintf("idemgen_bench_%d_%d_%s", os.Getpid(), n, what)
		cfg, err := pgxpool.ParseConfig(d.url)
		if err != nil {
			return nil, err
		}
		admin, err := pgx.ConnectConfig(ctx, cfg.ConnConfig.Copy())
		if err != nil {
			return nil, fmt.Errorf("connect: %w", err)
		}
		defer admin.Close(context.Background())
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+sp.name); err != nil {
			return nil, fmt.Errorf("create schema: %w", err)
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = sp.name
		cfg.MaxConns = d.maxConns
		if timer != nil {
			cfg.ConnConfig.Tracer = timer
		}
		if u, err := url.Parse(d.url); err == nil {
			q := u.Query()
			q.Set("search_path", sp.name)
			u.RawQuery = q.Encode()
			sp.url = u.String()
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		sp.pool = pool
		sp.drop = func() {
			pool.Close()
			if c, err := pgx.ConnectConfig(context.Background(), cfg.ConnConfig.Copy()); err == nil {
				_, _ = c.Exec(context.Background(), "DROP SCHEMA "+sp.name+" CASCADE")
				c.Close(context.Background())
			}
		}
		if migrate {
			sp.store = benchjobs.NewPostgresStore(pool)
		}
	} else {
		sp.name = fmt.Sprintf("%d_%s.db", n, what)
		path := filepath.Join(d.dir, sp.name)
		sp.path = path
		// As example/db.go opens it: WAL and a busy timeout.
		dsn := "file:" + url.PathEscape(path) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)"
		var db *sql.DB
		var err error
		if timer != nil {
			db, err = sqlitedriver.Open(dsn, timer.sqliteConn)
		} else {
			db, err = sql.Open("sqlite3", dsn)
		}
		if err != nil {
			return nil, err
		}
		sp.db = db
		sp.drop = func() {
			db.Close()
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(path + suffix)
			}
		}
		if migrate {
			sp.store = benchjobs.NewSQLiteStore(db)
		}
	}
	if migrate {
		if err := sp.store.Migrate(ctx); err != nil {
			sp.drop()
			return nil, fmt.Errorf("migrate %s: %w", sp.name, err)
		}
	}
	return sp, nil
}

// exec runs DDL or a statement without results, in either dialect.
func (sp *space) exec(ctx context.Context, stmts ...string) error {
	for _, s := range stmts {
		var err error
		if sp.pool != nil {
			_, err = sp.pool.Exec(ctx, s)
		} else {
			_, err = sp.db.ExecContext(ctx, s)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", strings.Fields(s)[0:min(3, len(strings.Fields(s)))], err)
		}
	}
	return nil
}

// count returns the number of rows of table matching where ("" for all).
func (sp *space) count(ctx context.Context, table, where string) (int, error) {
	q := "SELECT count(*) FROM " + table
	if where != "" {
		q += " WHERE " + where
	}
	var n int
	var err error
	if sp.pool != nil {
		err = sp.pool.QueryRow(ctx, q).Scan(&n)
	} else {
		err = sp.db.QueryRowContext(ctx, q).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", table, err)
	}
	return n, nil
}
