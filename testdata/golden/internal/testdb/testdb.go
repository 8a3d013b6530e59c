// Package testdb opens the databases the golden packages' behaviour tests
// run on: an embedded SQLite always, and PostgreSQL when
// IDEMGEN_TEST_POSTGRES holds a connection URL, in a schema of its own that
// is dropped when the test ends. It is hand-written, not generated.
package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver" // pure-Go SQLite: nothing to install
)

// DB is one test database: exactly one of SQL (SQLite) and Pool (PostgreSQL) is set.
type DB struct {
	SQL  *sql.DB
	Pool *pgxpool.Pool
}

// Dialect names the database, as the spec's dialects do.
func (db DB) Dialect() string {
	if db.Pool != nil {
		return "postgres"
	}
	return "sqlite"
}

// Each runs fn once per dialect given (default: both) as subtests named for
// the dialect. The PostgreSQL variant skips, saying why, without IDEMGEN_TEST_POSTGRES.
func Each(t *testing.T, fn func(t *testing.T, db DB), dialects ...string) {
	if len(dialects) == 0 {
		dialects = []string{"sqlite", "postgres"}
	}
	for _, d := range dialects {
		t.Run(d, func(t *testing.T) {
			if d == "sqlite" {
				fn(t, DB{SQL: SQLite(t)})
				return
			}
			fn(t, DB{Pool: Postgres(t)})
		})
	}
}

// SQLite opens a new SQLite file in the test's temporary directory.
func SQLite(t *testing.T) *sql.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// Postgres connects with search_path set to a new schema, dropped after the test.
func Postgres(t *testing.T) *pgxpool.Pool {
	t.Helper()
	dsn := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if dsn == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run this variant")
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	schema := fmt.Sprintf("idemgen_golden_%d", time.Now().UnixNano())
	admin, err := pgxpool.NewWithConfig(ctx, cfg.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-in first-out: the pool closes before the schema is dropped.
	t.Cleanup(func() {
		if _, err := admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	t.Cleanup(pool.Close)
	return pool
}

// Exec runs a statement on whichever database db is, for test setup that
// only the database can do (a trigger that rejects a row, say).
func (db DB) Exec(t *testing.T, sqlite, postgres string) {
	t.Helper()
	var err error
	if db.Pool != nil {
		_, err = db.Pool.Exec(context.Background(), postgres)
	} else {
		_, err = db.SQL.ExecContext(context.Background(), sqlite)
	}
	if err != nil {
		t.Fatalf("%s: %v", db.Dialect(), err)
	}
}

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Clock is a settable clock for WithClock, or idemtest.WithLeaseClock (leases and
// next-attempt times, which a test steps past an effect's backoff).
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock stopped at now.
func NewClock(now time.Time) *Clock { return &Clock{now: now} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Calls counts provider calls per idempotency key.
type Calls struct {
	mu sync.Mutex
	n  map[string]int
}

// Add records one call with key.
func (c *Calls) Add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
}

// Of returns the calls made with key.
func (c *Calls) Of(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// Total returns all calls.
func (c *Calls) Total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	total := 0
	for _, n := range c.n {
		total += n
	}
	return total
}

// Keys returns how many distinct keys were called.
func (c *Calls) Keys() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

// FailedAsReported reports whether a call's error matches its report: nil
// when no unit or effect failed, else a *idem.FailuresError counting every
// failed unit and effect (busy effects too when busyFails, for Process).
func FailedAsReported(rep idem.Report, err error, busyFails bool) bool {
	want := rep.Failed + rep.EffectsFailed
	if busyFails {
		want += rep.EffectsBusy
	}
	var fe *idem.FailuresError
	if err == nil {
		return want == 0
	}
	return errors.As(err, &fe) && fe.Count == want
}
