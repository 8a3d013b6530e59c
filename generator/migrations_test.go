package generator_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/ncruces/go-sqlite3/driver"
	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlc"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// specText builds a spec from job blocks; each job is a YAML list item.
func specText(extra string, jobs ...string) string {
	return "version: 1\npackage: shop\nout: .\ndialects: [postgres, sqlite]\n" + extra + "jobs:\n" + strings.Join(jobs, "")
}

const (
	ordersV1 = `
  - name: order_sync
    version: 1
    unit:
      type: Order
      fields:
        - order_id: string
        - amount_cents: int64
        - updated_at: time
      key: "order:{order_id}"
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: orders
      unique: [order_id]
`
	// ordersV2 adds a nullable field and an effect.
	ordersV2 = `
  - name: order_sync
    version: 1
    unit:
      type: Order
      fields:
        - order_id: string
        - amount_cents: int64
        - updated_at: time
        - note: string?
      key: "order:{order_id}"
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: orders
      unique: [order_id]
    effects:
      - name: notify
        key: "notify:{order_id}"
        when: inserted
`
	// ordersV3 renames the table, drops amount_cents and makes note NOT NULL.
	ordersV3 = `
  - name: order_sync
    version: 1
    unit:
      type: Order
      fields:
        - order_id: string
        - updated_at: time
        - note: string
      key: "order:{order_id}"
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: sales_orders
      unique: [order_id]
    effects:
      - name: notify
        key: "notify:{order_id}"
        when: inserted
`
	refundsV1 = `
  - name: refund_sync
    version: 1
    unit:
      type: Refund
      fields:
        - order_id: string
        - refund_id: string
        - updated_at: time
      key: "refund:{order_id}:{refund_id}"
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: refunds
      unique: [refund_id]
`
	// refundsV2 widens the unique constraint.
	refundsV2 = `
  - name: refund_sync
    version: 1
    unit:
      type: Refund
      fields:
        - order_id: string
        - refund_id: string
        - updated_at: time
      key: "refund:{order_id}:{refund_id}"
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: refunds
      unique: [order_id, refund_id]
`
	legacy = `
  - name: legacy_sync
    version: 1
    unit:
      type: Legacy
      fields:
        - legacy_id: string
      key: "legacy:{legacy_id}"
    source:
      none: {}
    destination:
      table: legacy_rows
`
	customers = `
  - name: customer_sync
    version: 1
    unit:
      type: Customer
      fields:
        - customer_id: string
        - email: string?
      key: "customer:{customer_id}"
    source:
      none: {}
    destination:
      table: customers
`
)

var (
	specV1 = specText("", ordersV1, refundsV1, legacy)
	// V2: a field, a job, an effect, a unique change, a job removed.
	specV2 = specText("allow_drop: [legacy_rows]\n", ordersV2, refundsV2, customers)
	// V3: a renamed destination table, a dropped field (allowed under the
	// table's old name), a field made NOT NULL.
	specV3 = specText("allow_drop: [orders.amount_cents]\n", ordersV3, refundsV2, customers)
)

// generateText runs Generate over spec text with dir as the existing output.
func generateText(t *testing.T, dir, text string) (generator.Files, error) {
	t.Helper()
	f, ds := spec.Parse("idemgen.yaml", []byte(text))
	if ds.HasErrors() {
		t.Fatal(ds)
	}
	return generator.Generate(context.Background(), f, generator.Options{
		SQLC: sqlc.Runner{Exe: os.Args[0]}, ImportPath: "example.com/shop", Existing: os.DirFS(dir),
	})
}

// regenerate generates text into dir, as the CLI would (files written, none
// deleted: nothing under migrations/ ever is), and returns the files.
func regenerate(t *testing.T, dir, text string) generator.Files {
	t.Helper()
	files, err := generateText(t, dir, text)
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, files)
	return files
}

func migrationNames(files generator.Files, d model.Dialect) []string {
	var out []string
	for _, name := range files.Names() {
		if strings.HasPrefix(name, "migrations/"+string(d)+"/") && strings.HasSuffix(name, ".sql") {
			out = append(out, strings.TrimPrefix(name, "migrations/"+string(d)+"/"))
		}
	}
	return out
}

// checkStep asserts the migrations after a generate: the old ones byte for
// byte, the expected names, and a sum that lists each of them.
func checkStep(t *testing.T, before, after generator.Files, want []string) {
	t.Helper()
	for _, d := range []model.Dialect{model.Postgres, model.SQLite} {
		if got := migrationNames(after, d); !slices.Equal(got, want) {
			t.Errorf("%s migrations: %v, want %v", d, got, want)
		}
		for _, name := range migrationNames(before, d) {
			p := "migrations/" + string(d) + "/" + name
			if !bytes.Equal(before[p], after[p]) {
				t.Errorf("%s was rewritten", p)
			}
		}
		sum := string(after["migrations/"+string(d)+"/"+generator.SumName])
		if !strings.HasPrefix(sum, generator.Header+"\n") {
			t.Errorf("%s sum has no header:\n%s", d, sum)
		}
		for _, name := range want {
			if !strings.Contains(sum, "\n"+name+" h1:") {
				t.Errorf("%s sum does not list %s:\n%s", d, name, sum)
			}
		}
		if !strings.Contains(sum, "\n"+generator.SnapshotName+" h1:") {
			t.Errorf("%s sum does not list the snapshot:\n%s", d, sum)
		}
	}
}

func TestMigrationsFollowTheSpec(t *testing.T) {
	dir := t.TempDir()
	v1 := regenerate(t, dir, specV1)
	checkStep(t, nil, v1, []string{"00001_idemgen.sql"})
	if again := regenerate(t, dir, specV1); !filesEqual(v1, again) {
		t.Fatal("regenerating an unchanged spec changed files")
	}

	dbs := openDatabases(t)
	for _, db := range dbs {
		db.up(t, dir)
		db.exec(t, `INSERT INTO orders (order_id, amount_cents, updated_at, idemgen_key, idemgen_job_version) VALUES ('o1', 100, $TIME, 'order:o1', 1)`)
		db.exec(t, `INSERT INTO refunds (order_id, refund_id, updated_at, idemgen_key, idemgen_job_version) VALUES ('o1', 'r1', $TIME, 'refund:o1:r1', 1)`)
		db.exec(t, `INSERT INTO legacy_rows (legacy_id, idemgen_key, idemgen_job_version) VALUES ('l1', 'legacy:l1', 1)`)
		db.columnsMatch(t, specV1)
	}

	v2 := regenerate(t, dir, specV2)
	checkStep(t, v1, v2, []string{"00001_idemgen.sql", "00002_idemgen.sql"})
	if again := regenerate(t, dir, specV2); !filesEqual(v2, again) {
		t.Fatal("regenerating an unchanged spec changed files")
	}
	for _, db := range dbs {
		db.up(t, dir)
		db.columnsMatch(t, specV2)
		// The new column takes values; the old row is kept.
		db.exec(t, `INSERT INTO orders (order_id, amount_cents, updated_at, note, idemgen_key, idemgen_job_version) VALUES ('o2', 200, $TIME, 'hello', 'order:o2', 1)`)
		db.count(t, `SELECT count(*) FROM orders WHERE note IS NULL`, 1)
		// The new unique: the same refund id under another order is another row,
		// and an upsert on the new columns finds its row.
		db.exec(t, `INSERT INTO refunds (order_id, refund_id, updated_at, idemgen_key, idemgen_job_version) VALUES ('o2', 'r1', $TIME, 'refund:o2:r1', 1)`)
		db.exec(t, `INSERT INTO refunds AS d (order_id, refund_id, updated_at, idemgen_key, idemgen_job_version) VALUES ('o2', 'r1', $TIME, 'refund:o2:r1', 2)
			ON CONFLICT (order_id, refund_id) DO UPDATE SET idemgen_job_version = excluded.idemgen_job_version, idemgen_rev = d.idemgen_rev + 1`)
		db.count(t, `SELECT count(*) FROM refunds`, 2)
		db.count(t, `SELECT count(*) FROM refunds WHERE order_id = 'o2' AND idemgen_rev = 2`, 1)
		db.exec(t, `INSERT INTO customers (customer_id, email, idemgen_key, idemgen_job_version) VALUES ('c1', NULL, 'customer:c1', 1)`)
		db.mustFail(t, `INSERT INTO legacy_rows (legacy_id, idemgen_key, idemgen_job_version) VALUES ('l2', 'legacy:l2', 1)`)
	}

	// Once every row has a note, the note may become NOT NULL.
	for _, db := range dbs {
		db.exec(t, `UPDATE orders SET note = 'backfilled' WHERE note IS NULL`)
	}
	v3 := regenerate(t, dir, specV3)
	checkStep(t, v2, v3, []string{"00001_idemgen.sql", "00002_idemgen.sql", "00003_idemgen.sql"})
	for _, db := range dbs {
		db.up(t, dir)
		db.columnsMatch(t, specV3)
		db.count(t, `SELECT count(*) FROM sales_orders WHERE note IN ('hello', 'backfilled')`, 2)
		db.mustFail(t, `INSERT INTO sales_orders (order_id, updated_at, note, idemgen_key, idemgen_job_version) VALUES ('o3', $TIME, NULL, 'order:o3', 1)`)
		db.exec(t, `INSERT INTO sales_orders AS d (order_id, updated_at, note, idemgen_key, idemgen_job_version) VALUES ('o1', $TIME, 'again', 'order:o1', 1)
			ON CONFLICT (order_id) DO UPDATE SET note = excluded.note`)
		db.count(t, `SELECT count(*) FROM sales_orders WHERE note = 'again'`, 1)
		db.mustFail(t, `SELECT count(*) FROM orders`)
	}

	// Down undoes the chain on emptied tables, and Up builds it again.
	for _, db := range dbs {
		for _, table := range []string{"sales_orders", "refunds", "customers"} {
			db.exec(t, "DELETE FROM "+table)
		}
		if _, err := db.provider(t, dir).DownTo(context.Background(), 0); err != nil {
			t.Fatalf("%s: down: %v", db.dialect, err)
		}
		db.mustFail(t, `SELECT count(*) FROM shop_idem_ledger`)
		db.up(t, dir)
		db.columnsMatch(t, specV3)
	}
}

// A fresh database that runs the whole chain ends with the same columns as
// one that followed the spec step by step.
func TestMigrationChainOnFreshDatabase(t *testing.T) {
	dir := t.TempDir()
	regenerate(t, dir, specV1)
	regenerate(t, dir, specV2)
	regenerate(t, dir, specV3)
	for _, db := range openDatabases(t) {
		db.up(t, dir)
		db.columnsMatch(t, specV3)
	}
}

func TestHandEditedMigrationIsRefused(t *testing.T) {
	dir := t.TempDir()
	regenerate(t, dir, specV1)
	p := filepath.Join(dir, "migrations", "postgres", "00001_idemgen.sql")
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "-- my tweak")
	f.Close()
	for _, text := range []string{specV1, specV2} {
		_, err := generateText(t, dir, text)
		const want = "migrations/postgres/00001_idemgen.sql was edited by hand (sum mismatch); emitted migrations are append-only: restore it and put changes in the spec"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Generate: %v, want an error with %q", err, want)
		}
	}
}

func TestRefusals(t *testing.T) {
	cases := []struct {
		name, spec string
		prepare    func(t *testing.T, dir string)
		want       string
	}{
		{"not null field", specText("", strings.Replace(ordersV1, "- updated_at: time\n", "- updated_at: time\n        - region: string\n", 1), refundsV1, legacy), nil,
			"idemgen.yaml:15:11: table orders (job order_sync): new column region is NOT NULL, but the table already exists"},
		{"dropped field", specText("", strings.Replace(ordersV1, "        - amount_cents: int64\n", "", 1), refundsV1, legacy), nil,
			"idemgen.yaml:18:14: table orders (job order_sync): field amount_cents is gone from the spec, so the next migration would drop column orders.amount_cents and the data in it; to drop it, add orders.amount_cents to allow_drop"},
		{"dropped field allowed elsewhere", specText("allow_drop: [refunds.amount_cents, orders]\n", strings.Replace(ordersV1, "        - amount_cents: int64\n", "", 1), refundsV1, legacy), nil,
			"idemgen.yaml:19:14: table orders (job order_sync): field amount_cents is gone"},
		{"dropped job", specText("", ordersV1, refundsV1), nil,
			"idemgen.yaml:7:3: job legacy_sync is gone from the spec, so the next migration would drop its table legacy_rows and every row in it; to drop them, add legacy_rows to allow_drop"},
		{"type change", specText("", strings.Replace(ordersV1, "amount_cents: int64", "amount_cents: string", 1), refundsV1, legacy), nil,
			"idemgen.yaml:13:11: table orders (job order_sync): column amount_cents changes type from bigint to text"},
		{"renamed ledger", specText("tables: {ledger: shop_ledger}\n", ordersV1, refundsV1, legacy), nil,
			"idemgen.yaml:5:18: the ledger table was renamed from shop_idem_ledger to shop_ledger"},
		{"renamed parked table", specText("tables: {parked: shop_parked}\n", ordersV1, refundsV1, legacy), nil,
			"the parked table was renamed from shop_idem_parked to shop_parked"},
		{"hand-written migration", specV1, func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "migrations", "sqlite", "00002_mine.sql"), []byte("-- +goose Up\nSELECT 1;\n"), 0o644)
		}, "migrations/sqlite/00002_mine.sql has no idemgen header"},
		{"edited snapshot", specV1, func(t *testing.T, dir string) {
			p := filepath.Join(dir, "migrations", "sqlite", generator.SnapshotName)
			data, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(data, []byte(`"amount_cents"`), []byte(`"amount"`), 1), 0o644)
		}, "migrations/sqlite/idemgen.schema was edited by hand (sum mismatch)"},
		{"missing sum", specV1, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(dir, "migrations", "postgres", generator.SumName))
		}, "migrations/postgres/idemgen.sum is missing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			regenerate(t, dir, specV1)
			if c.prepare != nil {
				c.prepare(t, dir)
			}
			_, err := generateText(t, dir, c.spec)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Generate: %v\nwant an error with %q", err, c.want)
			}
		})
	}
}

// A package generated before snapshots (00001 alone) is adopted as it is.
func TestMigrationsWithoutSnapshotAreAdopted(t *testing.T) {
	dir := t.TempDir()
	v1 := regenerate(t, dir, specV1)
	for _, d := range []string{"postgres", "sqlite"} {
		os.Remove(filepath.Join(dir, "migrations", d, generator.SumName))
		os.Remove(filepath.Join(dir, "migrations", d, generator.SnapshotName))
	}
	if again := regenerate(t, dir, specV1); !filesEqual(v1, again) {
		t.Error("adopting the first migration changed files")
	}
	for _, d := range []string{"postgres", "sqlite"} {
		os.Remove(filepath.Join(dir, "migrations", d, generator.SumName))
		os.Remove(filepath.Join(dir, "migrations", d, generator.SnapshotName))
	}
	if _, err := generateText(t, dir, specV2); err == nil || !strings.Contains(err.Error(), "cannot tell which schema they produce") {
		t.Errorf("Generate over unknown migrations: %v", err)
	}
}

func filesEqual(a, b generator.Files) bool {
	if len(a) != len(b) {
		return false
	}
	for name, data := range a {
		if !bytes.Equal(data, b[name]) {
			return false
		}
	}
	return true
}

// testDB is a database the migration chain is applied to.
type testDB struct {
	dialect model.Dialect
	db      *sql.DB
	target  string // as idemgen's -db names it: the SQLite file, or a PostgreSQL URL with the schema's search_path
}

// openDatabases opens a fresh SQLite file and, with IDEMGEN_TEST_POSTGRES, a
// fresh PostgreSQL schema, dropped when the test ends.
func openDatabases(t *testing.T) []*testDB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.db")
	lite, err := sql.Open("sqlite3", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	dbs := []*testDB{{model.SQLite, lite, path}}
	if os.Getenv(idemtest.EnvPostgres) == "" {
		t.Log("IDEMGEN_TEST_POSTGRES is not set: the PostgreSQL migration checks are skipped (SQLite only)")
		return dbs
	}
	pg := idemtest.OpenPostgres(t)
	schema := pg.NewSchema(t)
	db := stdlib.OpenDB(*pg.Config(schema).ConnConfig)
	t.Cleanup(func() { db.Close() })
	u, err := url.Parse(os.Getenv(idemtest.EnvPostgres))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return append(dbs, &testDB{model.Postgres, db, u.String()})
}

func (db *testDB) provider(t *testing.T, dir string) *goose.Provider {
	t.Helper()
	dialect := goose.DialectSQLite3
	if db.dialect == model.Postgres {
		dialect = goose.DialectPostgres
	}
	// The directory as generated, sum and snapshot included: goose skips them.
	fsys := os.DirFS(filepath.Join(dir, "migrations", string(db.dialect)))
	p, err := goose.NewProvider(dialect, db.db, fsys, goose.WithTableName("shop_idem_migrations"), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (db *testDB) up(t *testing.T, dir string) {
	t.Helper()
	if _, err := db.provider(t, dir).Up(context.Background()); err != nil {
		t.Fatalf("%s: migrate up: %v", db.dialect, err)
	}
}

// sqlText makes a statement portable: $TIME is a time literal.
func (db *testDB) sqlText(q string) string {
	return strings.ReplaceAll(q, "$TIME", "'2024-01-02T03:04:05.000000000Z'")
}

func (db *testDB) exec(t *testing.T, q string) {
	t.Helper()
	if _, err := db.db.Exec(db.sqlText(q)); err != nil {
		t.Fatalf("%s: %s: %v", db.dialect, q, err)
	}
}

func (db *testDB) mustFail(t *testing.T, q string) {
	t.Helper()
	if _, err := db.db.Exec(db.sqlText(q)); err == nil {
		t.Fatalf("%s: %s succeeded, want an error", db.dialect, q)
	}
}

func (db *testDB) count(t *testing.T, q string, want int) {
	t.Helper()
	var n int
	if err := db.db.QueryRow(db.sqlText(q)).Scan(&n); err != nil {
		t.Fatalf("%s: %s: %v", db.dialect, q, err)
	}
	if n != want {
		t.Errorf("%s: %s = %d, want %d", db.dialect, q, n, want)
	}
}

// columnsMatch checks every table the spec asks for holds exactly its
// columns, with their nullability, and that no other table of the spec's
// earlier versions is left.
func (db *testDB) columnsMatch(t *testing.T, text string) {
	t.Helper()
	f, ds := spec.Parse("idemgen.yaml", []byte(text))
	if ds.HasErrors() {
		t.Fatal(ds)
	}
	p, err := model.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	want := sqlgen.SchemaOf(p, db.dialect)
	var names []string
	for _, table := range want.Tables {
		names = append(names, table.Name)
		wantCols := map[string]bool{}
		for _, c := range table.Columns {
			wantCols[c.Name] = c.NotNull || c.PrimaryKey && db.dialect == model.Postgres
		}
		got := db.columns(t, table.Name)
		if fmt.Sprint(got) != fmt.Sprint(wantCols) {
			t.Errorf("%s: table %s has columns (name: not null) %v, want %v", db.dialect, table.Name, got, wantCols)
		}
	}
	for _, gone := range []string{"orders", "legacy_rows", "sales_orders", "refunds", "customers"} {
		if !slices.Contains(names, gone) && len(db.columns(t, gone)) > 0 {
			t.Errorf("%s: table %s is still there", db.dialect, gone)
		}
	}
}

// columns maps a table's columns to whether they are NOT NULL; empty if there is no such table.
func (db *testDB) columns(t *testing.T, table string) map[string]bool {
	t.Helper()
	q := `SELECT name, "notnull" FROM pragma_table_info(?)`
	if db.dialect == model.Postgres {
		q = `SELECT column_name, is_nullable = 'NO' FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
	}
	rows, err := db.db.Query(q, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		var notNull bool
		if err := rows.Scan(&name, &notNull); err != nil {
			t.Fatal(err)
		}
		out[name] = notNull
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A table idemgen created can be handed to the service's own migrations
// (adopt: true): no migration follows, on either database, not even when
// the job's fields change or the job goes; the first migration of a spec
// with an adopted table creates none; and a table idemgen never created
// cannot be taken back.
func TestAdoptedTablesAreNeverMigrated(t *testing.T) {
	adopt := func(job string) string {
		return strings.Replace(job, "      table: orders\n", "      table: orders\n      adopt: true\n", 1)
	}
	dir := t.TempDir()
	v1 := regenerate(t, dir, specV1)
	dbs := openDatabases(t)
	for _, db := range dbs {
		db.up(t, dir)
		db.exec(t, `INSERT INTO orders (order_id, amount_cents, updated_at, idemgen_key, idemgen_job_version) VALUES ('o1', 100, $TIME, 'order:o1', 1)`)
	}
	adopted := regenerate(t, dir, specText("", adopt(ordersV1), refundsV1, legacy))
	checkStep(t, v1, adopted, []string{"00001_idemgen.sql"})
	if bytes.Equal(v1["migrations/sqlite/"+generator.SnapshotName], adopted["migrations/sqlite/"+generator.SnapshotName]) {
		t.Fatal("the snapshot does not record the adoption")
	}
	// A new field (NOT NULL, which idemgen would refuse to add) and a
	// dropped one are the service's business now; so is the job's going.
	changed := strings.Replace(adopt(ordersV1), "        - amount_cents: int64\n", "        - region: string\n", 1)
	checkStep(t, adopted, regenerate(t, dir, specText("", changed, refundsV1, legacy)), []string{"00001_idemgen.sql"})
	gone := regenerate(t, dir, specText("", refundsV1, legacy))
	checkStep(t, adopted, gone, []string{"00001_idemgen.sql"})
	for _, db := range dbs {
		db.up(t, dir)
		db.count(t, `SELECT count(*) FROM orders`, 1)
	}

	// A new package whose destination is adopted: its first migration
	// does not create it, and sqlc still compiles the job's queries.
	fresh := t.TempDir()
	first := regenerate(t, fresh, specText("", adopt(ordersV1), refundsV1))
	for _, d := range []model.Dialect{model.Postgres, model.SQLite} {
		m := string(first["migrations/"+string(d)+"/00001_idemgen.sql"])
		if strings.Contains(m, "CREATE TABLE orders") || !strings.Contains(m, "CREATE TABLE refunds") {
			t.Errorf("%s: the first migration creates the adopted table, or not the other:\n%s", d, m)
		}
	}
	_, err := generateText(t, fresh, specText("", ordersV1, refundsV1))
	if want := "idemgen.yaml:19:14: table orders (job order_sync) is no longer adopted, but idemgen never created it"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Generate: %v\nwant an error with %q", err, want)
	}
}
