package idemtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A schema is the search_path of a pool from Config, and is gone once its
// test has ended.
func TestNewSchemaIsTheSearchPathAndIsDroppedAfterTheTest(t *testing.T) {
	pg := OpenPostgres(t)
	var schema string
	t.Run("uses", func(t *testing.T) {
		schema = pg.NewSchema(t)
		if !strings.HasPrefix(schema, schemaPrefix+pg.run+"_") {
			t.Fatalf("schema %s is not named after run %s", schema, pg.run)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		var current string
		if err := pool.QueryRow(context.Background(), "SELECT current_schema()").Scan(&current); err != nil || current != schema {
			t.Fatalf("current_schema() = %q, %v; want %s", current, err, schema)
		}
	})
	if exists(t, pg.Admin(), schema) {
		t.Fatalf("schema %s outlived its test", schema)
	}
}

// The stale-schema rules: a run with no admin session left is dead and its
// schemas go; a live run's stay; a schema named the older way (after a time)
// goes only once it is a day old; a schema some session holds a lock in
// stays whatever its name says, and the test goes on.
func TestDeadRunsSchemasAreDroppedAndNothingInUse(t *testing.T) {
	pg := OpenPostgres(t)
	ctx := context.Background()
	admin := pg.Admin()
	live := OpenPostgres(t) // another run, alive for the whole test
	old := func(age time.Duration) string {
		return fmt.Sprintf("%s%d_1", schemaPrefix, time.Now().Add(-age).UnixNano())
	}
	var (
		liveSchema = fmt.Sprintf("%s%s_1", schemaPrefix, live.run)
		deadSchema = fmt.Sprintf("%s%s_1", schemaPrefix, newRunID()+"dead")
		lockedDead = fmt.Sprintf("%s%s_2", schemaPrefix, newRunID()+"dead")
		oldRecent  = old(time.Hour)
		oldStale   = old(25 * time.Hour)
	)
	for _, s := range []string{liveSchema, deadSchema, lockedDead, oldRecent, oldStale} {
		if _, err := admin.Exec(ctx, "CREATE SCHEMA "+s+"; CREATE TABLE "+s+".t (id int)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pg.DropSchema(s) })
	}
	// A session of a run that looks dead still works in lockedDead.
	holder, err := pgx.ConnectConfig(ctx, pg.Config(lockedDead).ConnConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "LOCK TABLE "+lockedDead+".t IN ACCESS SHARE MODE"); err != nil {
		t.Fatal(err)
	}

	pg.NewSchema(t) // the run's first schema drops the stale ones

	want := map[string]bool{liveSchema: true, deadSchema: false, lockedDead: true, oldRecent: true, oldStale: false}
	for s, kept := range want {
		if got := exists(t, admin, s); got != kept {
			t.Errorf("schema %s: kept = %t, want %t", s, got, kept)
		}
	}
}

// A database that is named but cannot be reached fails the test: a run
// that means to test on PostgreSQL never passes without it.
func TestUnreachableDatabaseFailsTheTest(t *testing.T) {
	if os.Getenv("IDEMTEST_UNREACHABLE_CHILD") != "" {
		OpenPostgres(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUnreachableDatabaseFailsTheTest$", "-test.v")
	cmd.Env = append(os.Environ(), "IDEMTEST_UNREACHABLE_CHILD=1",
		EnvPostgres+"=postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=5")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--- FAIL") || strings.Contains(string(out), "--- SKIP") {
		t.Fatalf("child on an unreachable database: %v; want it to fail, not skip or pass\n%s", err, out)
	}
}

func exists(t *testing.T, admin *pgxpool.Pool, schema string) bool {
	t.Helper()
	var n int
	if err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// A URL that lets a connection go plain connects plainly on this
// machine's loopback; one that asks for TLS, or names another host, keeps
// what it says.
func TestPlainOnLoopbackOnlyWhereTheURLAllowsIt(t *testing.T) {
	for _, c := range []struct {
		url       string
		tls       bool // the first attempt uses TLS
		fallbacks int  // attempts after the first
	}{
		{"postgres://u@127.0.0.1:5432/db", false, 0},
		{"postgres://u@localhost:5432/db?sslmode=prefer", false, 0},
		{"postgres://u@[::1]:5432/db", false, 0},
		{"postgres://u@127.0.0.1:5432/db?sslmode=disable", false, 0},
		{"postgres://u@127.0.0.1:5432/db?sslmode=require", true, 0},
		{"postgres://u@127.0.0.1:5432/db?sslmode=verify-full", true, 0},
		{"postgres://u@db.example.com:5432/db", true, 1},
		{"postgres://u@10.0.0.7:5432/db?sslmode=prefer", true, 1},
	} {
		cfg, err := pgxpool.ParseConfig(c.url)
		if err != nil {
			t.Fatalf("%s: %v", c.url, err)
		}
		plainOnLoopback(cfg.ConnConfig)
		if tls := cfg.ConnConfig.TLSConfig != nil; tls != c.tls || len(cfg.ConnConfig.Fallbacks) != c.fallbacks {
			t.Errorf("%s: TLS first %t with %d fallbacks; want %t with %d", c.url, tls, len(cfg.ConnConfig.Fallbacks), c.tls, c.fallbacks)
		}
	}
}

// Where the server's autovacuum is off, a run vacuums the catalog rows
// that schemas made and dropped left dead.
func TestDeadCatalogRowsAreVacuumedWithoutAutovacuum(t *testing.T) {
	pg := OpenPostgres(t)
	ctx := context.Background()
	var autovacuum string
	if err := pg.Admin().QueryRow(ctx, "SELECT current_setting('autovacuum')").Scan(&autovacuum); err != nil {
		t.Fatal(err)
	}
	if autovacuum == "on" {
		t.Skip("the server's autovacuum is on: it vacuums the catalogs itself")
	}
	stat := func(column string) int64 {
		var n int64
		if err := pg.Admin().QueryRow(ctx, "SELECT "+column+" FROM pg_stat_sys_tables WHERE relname = 'pg_attribute'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	vacuums := stat("vacuum_count")
	for i := range 3 {
		table := fmt.Sprintf("idemtest_vacuum_%s_%d", pg.run, i)
		if _, err := pg.Admin().Exec(ctx, "CREATE TABLE "+table+" (a int, b text, c jsonb); DROP TABLE "+table); err != nil {
			t.Fatal(err)
		}
	}
	for wait := 0; stat("n_dead_tup") == 0; wait++ { // the counts reach the server's statistics within a second
		if wait == 30 {
			t.Fatal("three tables made and dropped left no dead row in pg_attribute")
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Judged by pg_attribute's vacuum count, not its dead rows: other test
	// processes make and drop tables meanwhile (go test ./..., CI counted
	// 35 dead rows before the vacuum and 60 after). A vacuum another run
	// holds makes this one skip the table (SKIP_LOCKED): it tries again,
	// a bounded number of times.
	for try := 0; ; try++ {
		vacuumCatalogs(t, pg.Admin(), 1)
		if stat("vacuum_count") > vacuums {
			return
		}
		if try == 20 {
			t.Fatalf("pg_attribute was not vacuumed (%d dead rows)", stat("n_dead_tup"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
