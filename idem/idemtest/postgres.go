// Package idemtest is for tests only: production code must not import it
// (idemgen lint reports an import from a file that is not a _test.go
// file). It holds two things.
//
// The hooks a test sets in a job, which the runtime's API (idem, idemrt)
// does not offer: a crash hook called at the job's crash points
// (WithCrashHook, Hit), an edit of its definition (WithJobEdit), and a
// simulated clock for leases and waits (WithLeaseClock, WithPaceWait,
// WithSlotWait). The crash tests idemgen generates set them through
// idem/crashsim.
//
// A PostgreSQL schema of its own for a test, on the database that
// IDEMGEN_TEST_POSTGRES names, dropped when the test ends; the schemas
// that test processes killed before their cleanup left behind are dropped
// too. Every PostgreSQL test of idemgen uses it: the generated crash tests
// (through idem/crashsim, so it lives in the runtime module users already
// import), the generator's and the example's.
//
//	func TestOnPostgres(t *testing.T) {
//		pg := idemtest.OpenPostgres(t) // skips t when IDEMGEN_TEST_POSTGRES is unset
//		schema := pg.NewSchema(t)      // dropped when t ends
//		pool, err := pgxpool.NewWithConfig(ctx, pg.Config(schema)) // search_path = schema
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(pool.Close) // cleanups run last first: the pool closes before the drop
//		...
//	}
//
// For database/sql: stdlib.OpenDB(*pg.Config(schema).ConnConfig).
package idemtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvPostgres names the variable that holds the test database's URL.
const EnvPostgres = "IDEMGEN_TEST_POSTGRES"

// Postgres is one test's hold on the test database. Its admin session,
// named after the test's run, tells other test processes that the run's
// schemas are in use for as long as the test lasts.
type Postgres struct {
	base      *pgxpool.Config // the database as EnvPostgres names it
	run       string
	admin     *pgxpool.Pool
	dropStale sync.Once
}

// Schema names: idemsim_<run>_<n>, where <run> is a test run's id (see
// newRunID: lower case letters and digits, never 19 digits) and the run's
// admin session is named adminAppPrefix + <run>. A schema named
// idemsim_<19 digits>_<n> was made by an older idemgen's crash harness
// (after the time, in nanoseconds); dropStale relies on both shapes, and
// so do the tests of older idemgen versions that may share the database.
const (
	schemaPrefix   = "idemsim_"
	adminAppPrefix = "idemsim_admin_"
)

// schemaSeq numbers schemas across the process, so two runs that read the
// same clock (and so got the same run id) still name different schemas.
var schemaSeq atomic.Int64

// OpenPostgres connects to the database at IDEMGEN_TEST_POSTGRES, or skips
// t when the variable is unset. A variable that is set but names a database
// that cannot be reached fails t: a run that means to test on PostgreSQL
// never passes without it. The connection closes when t ends.
func OpenPostgres(t testing.TB) *Postgres {
	t.Helper()
	url := os.Getenv(EnvPostgres)
	if url == "" {
		t.Skip(EnvPostgres + " is not set; set it to a PostgreSQL URL to run this variant")
	}
	base, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("%s: %v", EnvPostgres, err)
	}
	plainOnLoopback(base.ConnConfig)
	run := newRunID()
	cfg := base.Copy()
	cfg.ConnConfig.RuntimeParams["application_name"] = adminAppPrefix + run
	// A test's schemas are thrown away: commits need not wait for the disk.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	// One admin session stays open for the whole test, and is never
	// recycled for its age: while it is gone, the run would look dead.
	cfg.MinConns = 1
	cfg.MaxConnLifetime = 0
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("%s: %v", EnvPostgres, err)
	}
	t.Cleanup(admin.Close)
	if err := admin.Ping(ctx); err != nil {
		t.Fatalf("%s is set, but its database cannot be reached: %v", EnvPostgres, err)
	}
	return &Postgres{base: base, run: run, admin: admin}
}

// plainOnLoopback connects without TLS where the URL lets a connection go
// plain (sslmode prefer, pgx's default when the URL says none, or allow)
// and its host is this machine's loopback: TLS there protects nothing,
// and a test opens hundreds of short sessions. Each one's handshake, and
// the encryption of every message after it, made a drawn job's whole
// PostgreSQL matrix a sixth slower (s007 of the spec-space draw on two
// cores: 0.86 of the time without them, the median of four paired runs).
// A URL that asks for TLS (require, verify-ca, verify-full) keeps it, and
// so does any other host.
func plainOnLoopback(cc *pgx.ConnConfig) {
	if cc.TLSConfig == nil || !loopbackHost(cc.Host) {
		return
	}
	plain := func(fb *pgconn.FallbackConfig) bool {
		return fb.TLSConfig == nil && fb.Host == cc.Host && fb.Port == cc.Port
	}
	if !slices.ContainsFunc(cc.Fallbacks, plain) {
		return // TLS is required
	}
	cc.TLSConfig = nil
	cc.Fallbacks = slices.DeleteFunc(cc.Fallbacks, plain)
}

// loopbackHost reports whether host names this machine's loopback.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// newRunID names one run (one OpenPostgres): short, lower case, and
// without an underscore, since it is part of schema names.
func newRunID() string {
	return strconv.FormatInt(time.Now().UnixNano(), 36) + strconv.FormatInt(int64(os.Getpid()), 36)
}

// NewSchema creates an empty schema and drops it when t ends; t is the test
// OpenPostgres was given or one of its subtests. The run's first schema
// first drops the schemas of dead runs.
func (pg *Postgres) NewSchema(t testing.TB) string {
	t.Helper()
	pg.dropStale.Do(func() {
		dropStale(t, pg.admin)
		vacuumCatalogs(t, pg.admin, vacuumCatalogsAt)
	})
	schema := fmt.Sprintf("%s%s_%d", schemaPrefix, pg.run, schemaSeq.Add(1))
	if _, err := pg.admin.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		if err := pg.DropSchema(schema); err != nil {
			t.Logf("idemtest: schema %s is kept for a later run to drop: %v", schema, err)
		}
	})
	return schema
}

// DropSchema drops a schema before its test ends (NewSchema's cleanup then
// finds nothing to drop).
func (pg *Postgres) DropSchema(schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := pg.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	return err
}

// Config returns a new pool configuration for the database with
// search_path set to schema; the caller may change it.
//
// Under IDEMGEN_TEST_POOL_ONE=1 the pool has one connection, and an
// acquire that waits longer than poolOneAcquire ends the test process with
// the stack of the goroutine that asked: with one connection, a transaction that asks
// its own pool for a second one (a nested acquire, the pool deadlock of a
// burst) waits forever, so the run shows where instead.
func (pg *Postgres) Config(schema string) *pgxpool.Config {
	cfg := pg.base.Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if os.Getenv(EnvPoolOne) != "" {
		cfg.MaxConns = 1
		cfg.ConnConfig.Tracer = poolOneTracer{}
	}
	return cfg
}

// EnvPoolOne names the variable that gives every test pool one connection.
const EnvPoolOne = "IDEMGEN_TEST_POOL_ONE"

// poolOneAcquire is how long an acquire may wait for the one connection:
// transactions take milliseconds, so a wait this long is a nested acquire.
const poolOneAcquire = 20 * time.Second

// poolOneTracer bounds each acquire of a pool of one (EnvPoolOne).
type poolOneTracer struct{}

type poolOneCancel struct{}

func (poolOneTracer) TraceAcquireStart(ctx context.Context, _ *pgxpool.Pool, _ pgxpool.TraceAcquireStartData) context.Context {
	ctx, cancel := context.WithTimeoutCause(ctx, poolOneAcquire, errPoolOneAcquire)
	return context.WithValue(ctx, poolOneCancel{}, cancel)
}

func (poolOneTracer) TraceAcquireEnd(ctx context.Context, _ *pgxpool.Pool, data pgxpool.TraceAcquireEndData) {
	if cancel, ok := ctx.Value(poolOneCancel{}).(context.CancelFunc); ok {
		defer cancel()
	}
	if data.Err != nil && context.Cause(ctx) == errPoolOneAcquire {
		// Not a panic: the test's cleanups would close the pool, and
		// closing a pool waits for the connection the stuck transaction
		// holds (the run of 2026-11-28 hung so until go test's timeout).
		fmt.Fprintf(os.Stderr, "idemtest: %s: an acquire waited %s for the pool's one connection: a nested acquire? (a transaction asking its own pool for a second connection)\n%s",
			EnvPoolOne, poolOneAcquire, debug.Stack())
		os.Exit(3)
	}
}

// TraceQueryStart and TraceQueryEnd make poolOneTracer a pgx tracer.
func (poolOneTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (poolOneTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

var errPoolOneAcquire = errors.New("idemtest: pool-of-one acquire bound")

// Admin is the run's admin pool, for statements outside any one schema
// (copying tables between schemas, ending sessions). Closing it is
// OpenPostgres's cleanup's job.
func (pg *Postgres) Admin() *pgxpool.Pool { return pg.admin }

// vacuumCatalogsAt is how many dead rows pg_attribute holds before a run
// vacuums the catalogs.
const vacuumCatalogsAt = 10_000

// vacuumCatalogs clears the catalog rows that test runs' schemas left
// dead, where the server's autovacuum is off and pg_attribute holds at
// least deadAt of them. Every schema's tables are created and dropped
// again (a matrix makes a dozen schemas, a CI run thousands), and with
// no vacuum their dead rows slowed every new session's catalog reads:
// a drawn job's PostgreSQL -short sample took 8.1 s with 225,000 dead
// rows in pg_attribute, 6.9 s once they were vacuumed. It vacuums the
// catalogs a schema's tables write, skips one another run is vacuuming
// (SKIP_LOCKED), and a role that may not vacuum them (neither the
// database's owner nor a superuser) gets the server's warning only: a
// test never fails for it.
func vacuumCatalogs(t testing.TB, admin *pgxpool.Pool, deadAt int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var autovacuum string
	var dead int64
	if err := admin.QueryRow(ctx, `SELECT current_setting('autovacuum'),
  coalesce((SELECT n_dead_tup FROM pg_stat_sys_tables WHERE relname = 'pg_attribute'), 0)`).Scan(&autovacuum, &dead); err != nil {
		t.Logf("idemtest: reading the catalogs' dead rows: %v", err)
		return
	}
	if autovacuum == "on" || dead < deadAt {
		return
	}
	if _, err := admin.Exec(ctx, "VACUUM (SKIP_LOCKED) pg_catalog.pg_attribute, pg_catalog.pg_class, pg_catalog.pg_depend, pg_catalog.pg_type, pg_catalog.pg_index, pg_catalog.pg_attrdef, pg_catalog.pg_constraint, pg_catalog.pg_namespace",
		pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Logf("idemtest: vacuuming the catalogs (%d dead rows in pg_attribute, autovacuum off): %v", dead, err)
	}
}

// dropStale drops the schemas of test processes that died before their
// cleanup (killed by go test's timeout, a SIGKILL, a machine restart). A
// schema named after a run (idemsim_<run>_<n>) is stale when its run has no
// admin session left; one named the older way, after the time it was made
// (idemsim_<unix nanoseconds>_<n>, which a test of an older idemgen may
// still be using), when it is over a day old. A schema some session still
// holds a lock in is in use, whatever its name says: its drop gives up
// after a moment and it is kept. Cleanup never fails a test; what it could
// not drop it logs.
func dropStale(t testing.TB, admin *pgxpool.Pool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rows, err := admin.Query(ctx, `
SELECT n.nspname FROM pg_namespace n
WHERE n.nspname LIKE 'idemsim\_%'
  AND CASE
    WHEN split_part(n.nspname, '_', 2) ~ '^[0-9]{19}$'
      THEN to_timestamp(split_part(n.nspname, '_', 2)::numeric / 1e9) < now() - interval '1 day'
    ELSE NOT EXISTS (
      SELECT 1 FROM pg_stat_activity a
      WHERE a.datname = current_database()
        AND a.application_name = $1 || split_part(n.nspname, '_', 2))
  END`, adminAppPrefix)
	if err != nil {
		t.Logf("idemtest: looking for the schemas of dead test runs: %v", err)
		return
	}
	stale, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Logf("idemtest: looking for the schemas of dead test runs: %v", err)
		return
	}
	for _, schema := range stale {
		err := pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			return err
		})
		if err != nil {
			t.Logf("idemtest: schema %s of a test run that looks dead is kept: %v", schema, err)
		}
	}
}
