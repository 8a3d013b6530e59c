package billingtest

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/ncruces/go-sqlite3/driver" // pure-Go SQLite: nothing to install

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem/idemops"
	//idemgen:allow-testonly a package of the runtime tests' own
	"github.com/idemgen/idemgen/idem/idemtest"
)

// DB is one test's migrated billing database.
type DB struct {
	Store *billing.Store
	// SQL is the same database through database/sql, as idemops.New
	// reads it, and Dialect names its dialect there.
	SQL     *sql.DB
	Dialect idemops.Dialect
	exec    func(t *testing.T, sqlite, postgres string)
}

// Exec runs, on the database, a statement only the database can (a trigger
// that refuses a row, a row put under a lease, a copied row), given in
// both dialects; it fails the test if the statement does.
func (db DB) Exec(t *testing.T, sqlite, postgres string) {
	t.Helper()
	db.exec(t, sqlite, postgres)
}

// EachDB runs fn on SQLite in the test's temporary directory and, when
// IDEMGEN_TEST_POSTGRES is set, on PostgreSQL in a schema of its own that
// is dropped afterwards, each as a subtest named after the database.
func EachDB(t *testing.T, fn func(t *testing.T, db DB)) {
	t.Run("sqlite", func(t *testing.T) {
		ctx := context.Background()
		db, err := OpenSQLiteDB(filepath.Join(t.TempDir(), "billing.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st := billing.NewSQLiteStore(db)
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		fn(t, DB{Store: st, SQL: db, Dialect: idemops.SQLite, exec: func(t *testing.T, sqlite, _ string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, sqlite); err != nil {
				t.Fatalf("sqlite: %v", err)
			}
		}})
	})
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		pg := idemtest.OpenPostgres(t)
		st, pool, err := OpenPostgres(ctx, pg.Config(pg.NewSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		fn(t, DB{Store: st, SQL: db, Dialect: idemops.Postgres, exec: func(t *testing.T, _, postgres string) {
			t.Helper()
			if _, err := pool.Exec(ctx, postgres); err != nil {
				t.Fatalf("postgres: %v", err)
			}
		}})
	})
}

// OpenSQLiteDB opens (creating) a SQLite file: WAL, so readers never wait
// for the writer, and a busy timeout (the store sets one anyway where the
// DSN has none).
func OpenSQLiteDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
}

// OpenSQLite opens (creating) a SQLite file and returns a migrated store
// with the function that closes it.
func OpenSQLite(ctx context.Context, path string) (*billing.Store, func(), error) {
	db, err := OpenSQLiteDB(path)
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

// OpenPostgres connects as cfg says (a test's schema comes from
// idem/idemtest with its search_path set) and returns a migrated store
// with its pool, which the caller closes.
func OpenPostgres(ctx context.Context, cfg *pgxpool.Config) (*billing.Store, *pgxpool.Pool, error) {
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
