package idemrt

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// simPostgres runs each scenario in a schema of its own, cloned from a
// migrated template schema, and kills crashed sessions server-side.
type simPostgres struct {
	url      string
	admin    *pgxpool.Pool
	template string
	tables   []string
	open     func(*pgxpool.Pool) simStore
}

var simSeq atomic.Int64

// simPostgresEnv returns nil (and the caller skips) without IDEMGEN_TEST_POSTGRES.
func simPostgresEnv(t testing.TB, open func(*pgxpool.Pool) simStore) simEnv {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		return nil
	}
	ctx := context.Background()
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	e := &simPostgres{url: url, admin: admin, open: open}
	if os.Getenv(simChildEnv) != "" {
		return e // a child only attaches to its parent's schema
	}
	e.template = e.newSchema(t)
	pool := e.pool(t, e.template, "idemsim_migrate")
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

func (e *simPostgres) pool(t testing.TB, schema, app string) *pgxpool.Pool {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

func (e *simPostgres) fresh(t testing.TB) simDB {
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
	obs := e.pool(t, schema, "idemsim_observer")
	return &simPostgresDB{env: e, schema: schema, obsPool: obs, obs: e.open(obs).engineStore()}
}

type simPostgresDB struct {
	env     *simPostgres
	schema  string
	obsPool *pgxpool.Pool
	obs     store
}

func (d *simPostgresDB) locator() string { return d.schema }

// close ends the scenario: its observer, any session of a crashed
// incarnation still open, and its schema.
func (d *simPostgresDB) close() {
	d.obsPool.Close()
	_, _ = d.env.admin.Exec(context.Background(),
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1", "idemsim_"+d.schema+"_%")
	d.env.dropSchema(d.schema)
}

func (d *simPostgresDB) observer() store { return d.obs }

func (d *simPostgresDB) incarnation(t testing.TB) (store, func(), func()) {
	app := fmt.Sprintf("idemsim_%s_%d", d.schema, simSeq.Add(1))
	pool := d.env.pool(t, d.schema, app)
	kill := func() {
		// The process died: its sessions end, open transactions abort and
		// locks drop. The pool is abandoned, never closed (Close would wait
		// for the parked goroutine's connection).
		_, _ = d.env.admin.Exec(context.Background(),
			"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", app)
	}
	return d.env.open(pool).engineStore(), kill, pool.Close
}
