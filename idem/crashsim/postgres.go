package crashsim

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// simPostgres runs each scenario in a schema of its own, cloned from a
// migrated template schema, and kills crashed sessions server-side.
type simPostgres struct {
	url      string
	admin    *pgxpool.Pool
	template string
	tables   []string
	open     func(*pgxpool.Pool) Store
	mu       sync.Mutex
	free     []string // emptied scenario schemas, ready for the next one
}

var simSeq atomic.Int64

// Postgres returns nil (and the caller skips) without IDEMGEN_TEST_POSTGRES.
func Postgres(t testing.TB, open func(*pgxpool.Pool) Store) Env {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		return nil
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	e := &simPostgres{url: url, admin: admin, open: open}
	if os.Getenv(simChildEnv) != "" {
		return e // a child only attaches to its parent's schema
	}
	e.template = e.newSchema(t)
	pool := e.pool(t, e.template, "idemsim_migrate", nil)
	if err := open(pool).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	rows, err := admin.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name", e.template)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		e.tables = append(e.tables, name)
	}
	return e
}

func (e *simPostgres) name() string { return "postgres" }

func (e *simPostgres) newSchema(t testing.TB) string {
	schema := fmt.Sprintf("idemsim_%d_%d", time.Now().UnixNano(), simSeq.Add(1))
	if _, err := e.admin.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.dropSchema(schema) })
	return schema
}

func (e *simPostgres) dropSchema(schema string) {
	_, _ = e.admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
}

func (e *simPostgres) pool(t testing.TB, schema, app string, sqlHook idem.CrashHook) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	// The simulation kills clients, never the server: commits need not wait
	// for the disk, and what every session sees is unchanged.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	if sqlHook != nil {
		cfg.ConnConfig.Tracer = &simTracer{hook: sqlHook, conns: map[*pgx.Conn]*simStatements{}}
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// fresh hands out a scenario schema: a recycled one (emptied when its
// scenario closed) or a new copy of the template.
func (e *simPostgres) fresh(t testing.TB) simDB {
	e.mu.Lock()
	if n := len(e.free); n > 0 {
		schema := e.free[n-1]
		e.free = e.free[:n-1]
		e.mu.Unlock()
		return e.attach(t, schema)
	}
	e.mu.Unlock()
	schema := e.newSchema(t)
	for _, table := range e.tables {
		// LIKE ... INCLUDING ALL copies columns, defaults, constraints and indexes.
		if _, err := e.admin.Exec(context.Background(), fmt.Sprintf("CREATE TABLE %s.%s (LIKE %s.%s INCLUDING ALL)", schema, table, e.template, table)); err != nil {
			t.Fatal(err)
		}
	}
	return e.attach(t, schema)
}

func (e *simPostgres) attach(t testing.TB, schema string) simDB {
	obs := e.pool(t, schema, "idemsim_observer", nil)
	return &simPostgresDB{env: e, schema: schema, obsPool: obs, obs: e.open(obs).Runtime()}
}

type simPostgresDB struct {
	env     *simPostgres
	schema  string
	obsPool *pgxpool.Pool
	obs     idem.Store
}

func (d *simPostgresDB) locator() string { return d.schema }

// close ends the scenario: its observer and any session of a crashed
// incarnation still open; its schema is emptied for the next scenario
// (the test's cleanup drops it).
func (d *simPostgresDB) close() {
	ctx := context.Background()
	d.obsPool.Close()
	_, _ = d.env.admin.Exec(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1", "idemsim_"+d.schema+"_%")
	var tables []string
	for _, table := range d.env.tables {
		tables = append(tables, d.schema+"."+table)
	}
	// DELETE, not TRUNCATE: a handful of rows, and no new relation files.
	if _, err := d.env.admin.Exec(ctx, "DELETE FROM "+strings.Join(tables, "; DELETE FROM ")); err != nil {
		d.env.dropSchema(d.schema)
		return
	}
	d.env.mu.Lock()
	d.env.free = append(d.env.free, d.schema)
	d.env.mu.Unlock()
}

func (d *simPostgresDB) observer() idem.Store { return d.obs }

func (d *simPostgresDB) incarnation(t testing.TB, sqlHook idem.CrashHook) (idem.Store, func(), func()) {
	if sqlHook == nil {
		return d.obs, func() {}, func() {} // a helper outside the faults: the observer's pool serves
	}
	app := fmt.Sprintf("idemsim_%s_%d", d.schema, simSeq.Add(1))
	pool := d.env.pool(t, d.schema, app, sqlHook)
	kill := func() {
		// The process died: its sessions end, open transactions abort and
		// locks drop. The pool is abandoned, never closed (Close would wait
		// for the parked goroutine's connection).
		_, _ = d.env.admin.Exec(context.Background(),
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	}
	return d.env.open(pool).Runtime(), kill, pool.Close
}

// simTracer reports every statement of an incarnation's connections to the
// scenario's hook, as simConn does for SQLite. A crash in TraceQueryStart
// parks the worker before the statement is sent; in TraceQueryEnd, after
// the server ran it (for COMMIT: after it is durable).
type simTracer struct {
	hook  idem.CrashHook
	mu    sync.Mutex
	conns map[*pgx.Conn]*simStatements
}

type simTraceKey struct{}

func (t *simTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	s := t.conns[conn]
	if s == nil {
		s = &simStatements{}
		t.conns[conn] = s
	}
	t.mu.Unlock()
	detail := s.classify(data.SQL)
	if detail != "" {
		_ = t.hook(ctx, pointSQLBefore, detail)
	}
	return context.WithValue(ctx, simTraceKey{}, detail)
}

func (t *simTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if detail, _ := ctx.Value(simTraceKey{}).(string); detail != "" && data.Err == nil {
		_ = t.hook(ctx, pointSQLAfter, detail)
	}
}
