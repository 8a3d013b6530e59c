package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver" // pure-Go SQLite: nothing to install

	"github.com/idemgen/idemgen/example/billing"
)

// openSQLiteDB opens (creating) a SQLite file: WAL, so readers never wait
// for the writer, and a busy timeout (the store sets one anyway where the
// DSN has none).
func openSQLiteDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
}

// openSQLite opens (creating) a SQLite file and returns a migrated store.
func openSQLite(ctx context.Context, path string) (*billing.Store, func(), error) {
	db, err := openSQLiteDB(path)
	if err != nil {
		return nil, nil, err
	}
	st := billing.NewSQLiteStore(db)
	if err := st.Migrate(ctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return st, func() { db.Close() }, nil
}

// openPostgres connects with search_path set to schema (created if missing)
// and returns a migrated store.
func openPostgres(ctx context.Context, dsn, schema string) (*billing.Store, *pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	if schema != "" {
		admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
		if err != nil {
			return nil, nil, err
		}
		_, err = admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+schema)
		admin.Close()
		if err != nil {
			return nil, nil, err
		}
		cfg.ConnConfig.RuntimeParams["search_path"] = schema
	}
	return openPostgresConfig(ctx, cfg)
}

// openPostgresConfig connects as cfg says (a test's schema comes from
// idem/idemtest with its search_path set) and returns a migrated store.
func openPostgresConfig(ctx context.Context, cfg *pgxpool.Config) (*billing.Store, *pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	st := billing.NewPostgresStore(pool)
	if err := st.Migrate(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	return st, pool, nil
}
