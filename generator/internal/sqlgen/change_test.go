package sqlgen

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/ncruces/go-sqlite3/driver"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/idem/idemtest"
)

const shopSpec = `version: 1
package: shop
dialects: [postgres, sqlite]
jobs:
  - name: order_sync
    unit:
      type: Order
      fields:
        - order_id: string
        - updated_at: time
      key: "order:{order_id}"
      max_attempts: 3
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: orders
`

func shopPackage(t *testing.T) *model.Package {
	t.Helper()
	f, ds := spec.Parse("idemgen.yaml", []byte(shopSpec))
	if ds = append(ds, spec.Check(f)...); ds.HasErrors() {
		t.Fatal(ds)
	}
	p, err := model.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A database made before idemgen kept parked units has every table but the
// parked one; the next migration creates it (and its index), touches
// nothing else, and Down takes it away again.
func TestNewBookkeepingTableIsMigrated(t *testing.T) {
	p := shopPackage(t)
	for _, d := range []model.Dialect{model.SQLite, model.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			want := SchemaOf(p, d)
			if byRole(want, RoleParked) == nil {
				t.Fatal("the wanted schema has no parked table")
			}
			old := want
			old.Tables = slices.DeleteFunc(slices.Clone(want.Tables), func(t Table) bool { return t.Role == RoleParked })
			first := initialMigration(old)
			migs, next, err := ChangeMigration(old, want, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(migs) != 1 {
				t.Fatalf("%d migrations, want 1", len(migs))
			}
			second := migs[0]
			up, down, _ := strings.Cut(string(second), "-- +goose Down")
			for _, w := range []string{"-- It creates shop_idem_parked, the parked table that this version of idemgen keeps in every package", "CREATE TABLE shop_idem_parked (", "PRIMARY KEY (job, unit_key)", "CHECK (state IN ('failing', 'parked', 'retry'))", "CREATE INDEX shop_idem_parked_state ON shop_idem_parked (job, state, unit_key);"} {
				if !strings.Contains(up, w) {
					t.Errorf("migration 2 Up lacks %q:\n%s", w, second)
				}
			}
			if strings.Count(up, "CREATE TABLE") != 1 || strings.Contains(up, "ALTER") || strings.Contains(up, "DROP") {
				t.Errorf("migration 2 does more than create the parked table:\n%s", second)
			}
			if strings.TrimSpace(down) != "DROP TABLE shop_idem_parked;" {
				t.Errorf("migration 2 Down is %q, want the parked table dropped", strings.TrimSpace(down))
			}
			if again, _, err := ChangeMigration(next, want, 3, nil); err != nil || len(again) > 0 {
				t.Fatalf("after migration 2 the schema still differs: %v\n%s", err, again)
			}

			db := openDB(t, d)
			prov := shopMigratedTo1(t, db, d, first, second)
			ctx := context.Background()
			mustExec(t, db, `INSERT INTO orders (order_id, updated_at, idemgen_key, idemgen_job_version) VALUES ('o1', '2024-01-02T03:04:05Z', 'order:o1', 1)`)
			if _, err := prov.Up(ctx); err != nil {
				t.Fatalf("migration 2 on a database with rows: %v", err)
			}
			blob := blobLiteral(d)
			row := func(key, state string) string {
				return `INSERT INTO shop_idem_parked (job, unit_key, payload, payload_hash, attempts, last_error, state, job_version, first_failed_at, updated_at)
					VALUES ('order_sync', '` + key + `', ` + blob + `, ` + blob + `, 3, 'boom', '` + state + `', 1, '2024-01-02T03:04:05Z', '2024-01-02T03:04:05Z')`
			}
			mustExec(t, db, row("order:o2", "parked"))
			for _, bad := range []string{row("order:o2", "failing"), row("order:o3", "forgotten")} {
				if _, err := db.Exec(bad); err == nil {
					t.Errorf("%s succeeded; want the primary key or the state CHECK to refuse it", bad)
				}
			}
			if _, err := prov.DownTo(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec(`SELECT count(*) FROM shop_idem_parked`); err == nil {
				t.Error("the parked table is still there after Down")
			}
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM orders`).Scan(&n); err != nil || n != 1 {
				t.Errorf("orders after Down: %d rows, %v; want the row kept", n, err)
			}
		})
	}
}

// shopMigratedTo1 is goose over db with migrations (00001, 00002, ...) in
// shop's migration table, with the first applied.
func shopMigratedTo1(t *testing.T, db *sql.DB, d model.Dialect, migrations ...[]byte) *goose.Provider {
	t.Helper()
	fsys := fstest.MapFS{}
	for i, m := range migrations {
		fsys[fmt.Sprintf("%05d_idemgen.sql", i+1)] = &fstest.MapFile{Data: m}
	}
	dialect := goose.DialectSQLite3
	if d == model.Postgres {
		dialect = goose.DialectPostgres
	}
	prov, err := goose.NewProvider(dialect, db, fsys, goose.WithTableName("shop_idem_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := prov.UpTo(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	return prov
}

// blobLiteral is the bytes {} as a literal of dialect d.
func blobLiteral(d model.Dialect) string {
	if d == model.Postgres {
		return "decode('7b7d', 'hex')"
	}
	return "X'7B7D'"
}

func mustExec(t *testing.T, db *sql.DB, q string) {
	t.Helper()
	if _, err := db.Exec(q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// openDB opens a fresh SQLite file, or a fresh PostgreSQL schema (dropped
// afterwards); the PostgreSQL variant skips without IDEMGEN_TEST_POSTGRES.
func openDB(t *testing.T, d model.Dialect) *sql.DB {
	t.Helper()
	if d == model.Postgres {
		pg := idemtest.OpenPostgres(t)
		db := stdlib.OpenDB(*pg.Config(pg.NewSchema(t)).ConnConfig)
		t.Cleanup(func() { db.Close() })
		return db
	}
	db, err := sql.Open("sqlite3", "file:"+filepath.Join(t.TempDir(), "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
