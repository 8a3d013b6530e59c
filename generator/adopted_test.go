package generator_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
	"github.com/idemgen/idemgen/idem/idemrt"
)

func adoptOrders(job string) string {
	return strings.Replace(job, "      table: orders\n", "      table: orders\n      adopt: true\n", 1)
}

// withoutFields drops the named fields' lines from a job block.
func withoutFields(job string, fields ...string) string {
	for _, f := range fields {
		i := strings.Index(job, "        - "+f+": ")
		if i < 0 {
			panic("no field " + f)
		}
		end := i + strings.IndexByte(job[i:], '\n') + 1
		job = job[:i] + job[end:]
	}
	return job
}

func adoptedWarnings(t *testing.T, dir, text string) generator.Diagnostics {
	t.Helper()
	f, ds := spec.Parse("idemgen.yaml", []byte(text))
	if ds.HasErrors() {
		t.Fatal(ds)
	}
	return generator.AdoptedWarnings(os.DirFS(dir), f)
}

// A field that leaves an adopted destination leaves its column behind,
// which idemgen declared NOT NULL without a default: vet and generate warn
// at the destination's adopt with what the table needs, once (the next
// snapshot no longer has the column); a nullable field that leaves needs
// nothing. On a real PostgreSQL table with rows the proposed statement,
// run as it is, lets the job's inserts through and Migrate's check pass.
func TestAdoptedFieldGoneWarns(t *testing.T) {
	const pgFix = "ALTER TABLE orders ALTER COLUMN amount_cents DROP NOT NULL;"
	const want = `idemgen.yaml:19:14: warning: job "order_sync": field amount_cents is gone from the spec, ` +
		`but adopted table orders keeps its column, which idemgen declared NOT NULL without a default: ` +
		`while the table has it so, the job's inserts, which no longer write it, fail, and Migrate refuses the table; ` +
		"change it in the service's own migrations\n" +
		"on PostgreSQL this runs as it is, on a table with rows too:\n" + pgFix + "\n" +
		"on SQLite, which cannot drop NOT NULL or add a default to a column in place: rebuild orders with amount_cents nullable or with a default " +
		"(create the new table, copy the rows, drop the old one, rename the new one), or keep the field in the spec so that the job goes on writing it"

	v1 := specText("", adoptOrders(ordersV2), refundsV1)
	v2 := specText("", withoutFields(adoptOrders(ordersV2), "amount_cents", "note"), refundsV1)
	dir := t.TempDir()
	regenerate(t, dir, v1)
	if ds := adoptedWarnings(t, dir, v1); len(ds) != 0 {
		t.Fatalf("the unchanged spec warns:\n%v", ds)
	}
	ds := adoptedWarnings(t, dir, v2)
	if len(ds) != 1 || ds[0].String() != want || ds[0].Severity != spec.Warning {
		t.Fatalf("warnings:\n%v\nwant one warning:\n%s", ds, want)
	}
	regenerate(t, dir, v2)
	if ds := adoptedWarnings(t, dir, v2); len(ds) != 0 {
		t.Errorf("warned again after the generate that recorded the change:\n%v", ds)
	}

	// Each dialect of the spec says its part, and only its part.
	for _, c := range []struct{ dialects, has, hasNot string }{
		{"[postgres]", pgFix, "on SQLite"},
		{"[sqlite]", "on SQLite, which cannot drop NOT NULL", "ALTER TABLE"},
	} {
		one := func(s string) string { return strings.Replace(s, "[postgres, sqlite]", c.dialects, 1) }
		dir := t.TempDir()
		regenerate(t, dir, one(v1))
		ds := adoptedWarnings(t, dir, one(v2))
		if len(ds) != 1 || !strings.Contains(ds[0].Msg, c.has) || strings.Contains(ds[0].Msg, c.hasNot) {
			t.Errorf("%s: warnings:\n%v\nwant one with %q and without %q", c.dialects, ds, c.has, c.hasNot)
		}
	}

	// A table idemgen created, adopted in the same step as a field leaves:
	// its column stays as idemgen's migrations made it, NOT NULL.
	created := t.TempDir()
	regenerate(t, created, specText("", ordersV1, refundsV1))
	if ds := adoptedWarnings(t, created, v2); len(ds) != 1 || ds[0].String() != want {
		t.Errorf("adopted as the field leaves: warnings:\n%v\nwant:\n%s", ds, want)
	}

	// The statement, run as it is on a PostgreSQL table with rows.
	var pg *testDB
	for _, db := range openDatabases(t) {
		if db.dialect == model.Postgres {
			pg = db
		}
	}
	if pg == nil {
		return
	}
	resolve := func(text string) *model.Package {
		f, _ := spec.Parse("idemgen.yaml", []byte(text))
		p, err := model.Resolve(f)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	pg.exec(t, string(sqlgen.AdoptedTables(resolve(v1), model.Postgres)))
	pg.exec(t, `INSERT INTO orders (order_id, amount_cents, updated_at, idemgen_key, idemgen_job_version) VALUES ('o1', 100, $TIME, 'order:o1', 1)`)
	var shapes []idemrt.TableShape
	for _, tb := range sqlgen.SchemaOf(resolve(v2), model.Postgres).Tables {
		if !tb.Adopted {
			continue
		}
		s := idemrt.TableShape{Job: tb.Job, Name: tb.Name, Unique: tb.Unique.Columns}
		for _, c := range tb.Columns {
			s.Columns = append(s.Columns, idemrt.ColumnShape{Name: c.Name, Type: c.Type, Nullable: !c.NotNull, Default: c.Default})
		}
		shapes = append(shapes, s)
	}
	insert := `INSERT INTO orders (order_id, updated_at, idemgen_key, idemgen_job_version) VALUES ('o2', $TIME, 'order:o2', 1)`
	pg.mustFail(t, insert)
	err := idemrt.CheckTables(context.Background(), pg.db, goose.DialectPostgres, shapes)
	if err == nil || !strings.Contains(err.Error(), "column amount_cents is NOT NULL without a default, and the job does not write it") {
		t.Fatalf("CheckTables before the statement: %v", err)
	}
	var stmts int
	for line := range strings.Lines(ds[0].Msg) {
		if line = strings.TrimSpace(line); strings.HasSuffix(line, ";") {
			pg.exec(t, line)
			stmts++
		}
	}
	if stmts != 1 {
		t.Fatalf("%d statements in the warning, want 1", stmts)
	}
	if err := idemrt.CheckTables(context.Background(), pg.db, goose.DialectPostgres, shapes); err != nil {
		t.Fatalf("CheckTables after the warning's statement: %v", err)
	}
	pg.exec(t, insert)
	pg.count(t, `SELECT count(*) FROM orders WHERE amount_cents IS NULL`, 1)
}
