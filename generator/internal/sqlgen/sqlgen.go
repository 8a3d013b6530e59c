// Package sqlgen knows the SQL dialects: it turns the model into schema
// migrations, sqlc queries and the sqlc configuration, rendering templates/.
package sqlgen

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"text/template"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/idem/names"
	"github.com/idemgen/idemgen/templates"
)

var tmpl = template.Must(template.New("sql").Funcs(template.FuncMap{
	"join": strings.Join,
}).ParseFS(templates.FS, "sql/*.tmpl"))

// Job is the SQL view of one job.
type Job struct {
	GoName     string
	Table      string // empty when the job has no destination
	Columns    []Column
	Unique     []string
	InsertOnce bool
	InsertCols []string
	Params     []string
	SelectCols []string
	UpdateSet  []string
	Distinct   string
	Where      string
	// BatchUnnest and BatchSelect build the PostgreSQL batch write: one
	// array per column, unnested side by side, and NULLs marked in a
	// parallel boolean array (sqlc types array elements as non-null).
	BatchUnnest []string
	BatchSelect []string
	// Holds is the condition of the Holds query (model.Job.ComparesReplays):
	// the row under the unit's key holds exactly the unit's data. Empty
	// when the job has no such query.
	Holds string
}

// data is what the templates see.
type data struct {
	Postgres                             bool // the batch queries are PostgreSQL's; SQLite loops the single ones
	T                                    model.Tables
	Text, Int, BigInt, Bytes, Time, Bool string
	GreatestMark                         string
	// RowLimit is a LIMIT's bound parameter. SQLite recompiles a statement
	// whose LIMIT is a bare parameter every time it is bound anew (its
	// planner reads the value; database/sql's drivers clear bindings
	// between runs), so a prepared statement was parsed at every run;
	// behind a CAST the planner does not look.
	RowLimit string
	Jobs     []Job
}

// ColumnType is the SQL type of a field in a dialect.
func ColumnType(d model.Dialect, t model.Type) string {
	if d == model.Postgres {
		return map[model.Type]string{
			model.String: "text", model.Int32: "integer", model.Int64: "bigint", model.Float64: "double precision",
			model.Bool: "boolean", model.Time: "timestamptz", model.Bytes: "bytea", model.JSON: "jsonb", model.UUID: "uuid",
		}[t]
	}
	// SQLite: times are fixed-width UTC text so text order is time order.
	return map[model.Type]string{
		model.String: "TEXT", model.Int32: "INTEGER", model.Int64: "INTEGER", model.Float64: "REAL",
		model.Bool: "BOOLEAN", model.Time: "TEXT", model.Bytes: "BLOB", model.JSON: "TEXT", model.UUID: "TEXT",
	}[t]
}

func newData(p *model.Package, d model.Dialect) data {
	dd := data{T: p.Tables, Postgres: d == model.Postgres}
	if d == model.Postgres {
		dd.Text, dd.Int, dd.BigInt, dd.Bytes, dd.Time, dd.Bool = "text", "integer", "bigint", "bytea", "timestamptz", "boolean"
		dd.GreatestMark = "GREATEST(p.watermark, excluded.watermark)"
		dd.RowLimit = "@row_limit"
	} else {
		dd.Text, dd.Int, dd.BigInt, dd.Bytes, dd.Time, dd.Bool = "TEXT", "INTEGER", "INTEGER", "BLOB", "TEXT", "BOOLEAN"
		// SQLite's max() is NULL if any argument is; the stored mark may be NULL.
		dd.GreatestMark = "coalesce(max(p.watermark, excluded.watermark), excluded.watermark)"
		dd.RowLimit = "CAST(@row_limit AS INTEGER)"
	}
	for _, j := range p.Jobs {
		dd.Jobs = append(dd.Jobs, newJob(j, d, dd))
	}
	return dd
}

func newJob(j *model.Job, d model.Dialect, dd data) Job {
	sj := Job{GoName: j.GoName}
	dest := j.Dest
	if dest == nil {
		return sj
	}
	sj.Table = dest.Table
	sj.InsertOnce = dest.Write == model.InsertOnce
	for _, f := range j.Unit.Fields {
		sj.Columns = append(sj.Columns, Column{Name: f.Name, Type: ColumnType(d, f.Type), NotNull: !f.Nullable})
		sj.InsertCols = append(sj.InsertCols, f.Name)
		sj.SelectCols = append(sj.SelectCols, f.Name)
		sj.Params = append(sj.Params, "sqlc.narg("+f.Name+")")
		if !f.Nullable {
			sj.Params[len(sj.Params)-1] = "@" + f.Name
		}
		sj.BatchUnnest = append(sj.BatchUnnest, fmt.Sprintf("unnest(@%s::%s[]) AS %s", f.Name, ColumnType(d, f.Type), f.Name))
		if f.Nullable {
			isNull := BatchNullColumn(f.Name)
			sj.BatchUnnest = append(sj.BatchUnnest, fmt.Sprintf("unnest(@%s::boolean[]) AS %s", isNull, isNull))
			sj.BatchSelect = append(sj.BatchSelect, fmt.Sprintf("CASE WHEN b.%s THEN NULL ELSE b.%s END", isNull, f.Name))
		} else {
			sj.BatchSelect = append(sj.BatchSelect, "b."+f.Name)
		}
	}
	sj.BatchUnnest = append(sj.BatchUnnest, "unnest(@idemgen_key::text[]) AS idemgen_key")
	sj.BatchSelect = append(sj.BatchSelect, "b.idemgen_key", "@idemgen_job_version::integer")
	sj.Columns = append(sj.Columns,
		Column{Name: "idemgen_key", Type: dd.Text, NotNull: true},
		Column{Name: "idemgen_job_version", Type: dd.Int, NotNull: true},
		Column{Name: "idemgen_rev", Type: dd.BigInt, NotNull: true, Default: "1"},
		Column{Name: "idemgen_write", Type: dd.Text, NotNull: true, Default: "'inserted'"},
	)
	sj.InsertCols = append(sj.InsertCols, "idemgen_key", "idemgen_job_version")
	sj.Params = append(sj.Params, "@idemgen_key", "@idemgen_job_version")
	for _, f := range dest.Unique {
		sj.Unique = append(sj.Unique, f.Name)
	}
	// Only excluded.* on the right-hand side: sqlc on SQLite drops
	// parameters inside ON CONFLICT DO UPDATE.
	for _, f := range dest.Data {
		sj.UpdateSet = append(sj.UpdateSet, fmt.Sprintf("%s = excluded.%s", f.Name, f.Name))
	}
	sj.UpdateSet = append(sj.UpdateSet,
		"idemgen_key = excluded.idemgen_key",
		"idemgen_job_version = excluded.idemgen_job_version")
	sj.Distinct = distinct(d, dest.Data)
	where := fmt.Sprintf("(%s OR excluded.idemgen_job_version > d.idemgen_job_version)", sj.Distinct)
	if nw := dest.NewerWins; nw != nil {
		// A replay of older data never overwrites newer data.
		where = fmt.Sprintf("excluded.%s >= d.%s AND %s", nw.Name, nw.Name, where)
	}
	sj.Where = where
	if j.ComparesReplays() {
		var same []string
		for _, f := range j.Unit.Fields {
			switch {
			case !f.Nullable:
				same = append(same, fmt.Sprintf("d.%s = @%s", f.Name, f.Name))
			case d == model.Postgres:
				same = append(same, fmt.Sprintf("d.%s IS NOT DISTINCT FROM sqlc.narg(%s)", f.Name, f.Name))
			default:
				same = append(same, fmt.Sprintf("d.%s IS sqlc.narg(%s)", f.Name, f.Name))
			}
		}
		sj.Holds = strings.Join(same, " AND ")
	}
	return sj
}

// BatchNullColumn is the batch write's parameter marking a nullable field's NULLs.
func BatchNullColumn(field string) string { return "idemgen_null_" + field }

// distinct is a SQL condition true when the stored data differs from the new data.
func distinct(d model.Dialect, fields []*model.Field) string {
	if len(fields) == 0 {
		return "false"
	}
	var l, r, ors []string
	for _, f := range fields {
		l = append(l, "d."+f.Name)
		r = append(r, "excluded."+f.Name)
		ors = append(ors, fmt.Sprintf("d.%s IS NOT excluded.%s", f.Name, f.Name))
	}
	if d == model.Postgres {
		return fmt.Sprintf("(%s) IS DISTINCT FROM (%s)", strings.Join(l, ", "), strings.Join(r, ", "))
	}
	return "(" + strings.Join(ors, " OR ") + ")"
}

func render(name string, v any) []byte {
	var b bytes.Buffer
	if err := tmpl.ExecuteTemplate(&b, name, v); err != nil {
		panic(fmt.Sprintf("sqlgen: template %s: %v", name, err)) // a template bug, caught by every test
	}
	return b.Bytes()
}

// InitialMigration is a dialect's first migration: every table the package needs.
func InitialMigration(p *model.Package, d model.Dialect) []byte {
	return initialMigration(SchemaOf(p, d))
}

// TestSchema is the one migration of a test-only dialect's schema
// (TestOnly, TestSchemaDir): every table the package needs, as the spec
// wants it now.
func TestSchema(p *model.Package, d model.Dialect) []byte {
	m := initialPlan(SchemaOf(p, d))
	m.TestOnly = true
	return render("migration.sql.tmpl", m)
}

// AdoptedTables is the CREATE TABLE IF NOT EXISTS of each destination the
// service's own migrations own (destination adopt: true), or nil when there
// is none: the shape idemgen needs and checks at Migrate, handed to sqlc as
// schema and used by the generated crash tests to stand in for the
// service's migrations. It is never a migration.
//
//	CREATE TABLE IF NOT EXISTS signups (
//	    email text NOT NULL,
//	    locale text NOT NULL,
//	    CONSTRAINT signups_unique UNIQUE (email)
//	);
func AdoptedTables(p *model.Package, d model.Dialect) []byte {
	var stmts []string
	for _, t := range SchemaOf(p, d).Tables {
		if t.Adopted {
			stmts = append(stmts, strings.Replace(createTable(t), "CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1))
		}
	}
	if stmts == nil {
		return nil
	}
	return []byte(strings.Join(stmts, "\n") + "\n")
}

// AdoptedTablesForSQLC is the adopted tables' shape for sqlc, which reads
// it after the migrations: each table dropped, if an earlier migration
// made it before it was adopted, and created as the spec now wants it.
func AdoptedTablesForSQLC(p *model.Package, d model.Dialect) []byte {
	var stmts []string
	for _, t := range SchemaOf(p, d).Tables {
		if t.Adopted {
			stmts = append(stmts, "DROP TABLE IF EXISTS "+t.Name+";", createTable(t))
		}
	}
	if stmts == nil {
		return nil
	}
	return []byte(strings.Join(stmts, "\n") + "\n")
}

// migration is what templates/sql/migration.sql.tmpl renders: blocks of statements.
type migration struct {
	Notes    []string
	Up, Down []string
	// NoTransaction has goose run the migration outside a transaction,
	// statement by statement: what CREATE INDEX CONCURRENTLY needs.
	NoTransaction bool
	// TestOnly marks a test-only schema (TestSchema), which is rewritten
	// rather than appended to.
	TestOnly bool
}

func initialMigration(s Schema) []byte {
	return render("migration.sql.tmpl", initialPlan(s))
}

// initialPlan creates every table of s but the adopted ones, which the
// service's own migrations create.
func initialPlan(s Schema) migration {
	var m migration
	var drops []string
	for _, t := range s.Tables {
		if t.Adopted {
			continue
		}
		m.Up = append(m.Up, createTable(t))
		drops = append(drops, "DROP TABLE "+t.Name+";")
	}
	slices.Reverse(drops)
	m.Down = []string{strings.Join(drops, "\n")}
	return m
}

// Queries is the sqlc query file for a dialect: the queries of the jobs'
// destinations. It is nil when no job has a destination: the package then
// has no sqlc code of its own, only the runtime's ledger queries.
func Queries(p *model.Package, d model.Dialect) []byte {
	if !HasQueries(p) {
		return nil
	}
	return render("queries.sql.tmpl", newData(p, d))
}

// HasQueries reports whether the package has queries of its own: whether a
// job writes to a destination.
func HasQueries(p *model.Package) bool {
	for _, j := range p.Jobs {
		if j.Dest != nil {
			return true
		}
	}
	return false
}

// LedgerQueries is the sqlc query file of the runtime's ledger queries for
// a dialect, over the placeholder table names of idemrt.LedgerPlaceholders
// (which the runtime's stores replace at run time with a package's own).
func LedgerQueries(d model.Dialect) []byte {
	dd := newData(&model.Package{}, d)
	dd.T = LedgerPlaceholders()
	return render("ledger.sql.tmpl", dd)
}

// LedgerPlaceholders are the table names the runtime's ledger queries are
// written over (idemrt.LedgerPlaceholders).
func LedgerPlaceholders() model.Tables {
	t := names.LedgerPlaceholders
	return model.Tables{Ledger: t.Ledger, Progress: t.Progress, Seen: t.Seen, Parked: t.Parked, Limits: t.Limits, Migrations: "idem_migrations"}
}
