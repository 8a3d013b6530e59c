package sqlgen

import (
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// Layout of one dialect inside the generated package.
type Layout struct {
	Migrations string // migrations/<dialect>
	Queries    string // internal/<pkg>/queries.sql
	Out        string // internal/<pkg>
	GoPackage  string
}

// LayoutOf returns where a dialect's SQL and sqlc output live.
func LayoutOf(d model.Dialect) Layout {
	pkg := map[model.Dialect]string{model.Postgres: "pgdb", model.SQLite: "sqlitedb"}[d]
	return Layout{
		Migrations: "migrations/" + string(d),
		Queries:    "internal/" + pkg + "/queries.sql",
		Out:        "internal/" + pkg,
		GoPackage:  pkg,
	}
}

// TestSchemaDir is where a package whose dialects lack sqlite keeps the
// SQLite schema its tests run on: the whole schema in one goose migration,
// rewritten at every generate (a test database is always new, so it needs
// no history), beside the sqlc code compiled against it. Only _test.go
// files use either, so no build of the package links them.
const TestSchemaDir = "internal/sqlitedb/schema"

// TestOnly reports whether the package has SQL for dialect d for its tests
// only: generated tests always run on an embedded SQLite, whatever the
// spec's dialects, so a package without sqlite among them gets a SQLite
// store in its _test.go files.
func TestOnly(p *model.Package, d model.Dialect) bool {
	return d == model.SQLite && !p.Has(model.SQLite)
}

// Dialects are the dialects the package has SQL for: its own, then SQLite
// for its tests when they lack it (TestOnly).
func Dialects(p *model.Package) []model.Dialect {
	if p.Has(model.SQLite) {
		return p.Dialects
	}
	return append(slices.Clip(p.Dialects), model.SQLite)
}

// MigrationsOf is the directory of the migrations the package's store for
// d applies, and sqlc compiles d's queries against: the dialect's
// migrations, or TestSchemaDir for a test-only dialect.
func MigrationsOf(p *model.Package, d model.Dialect) string {
	if TestOnly(p, d) {
		return TestSchemaDir
	}
	return LayoutOf(d).Migrations
}

// SQLCConfig is sqlc.yaml for the package's dialects (Dialects). Names follow
// model.GoName (initialisms included) so Go code can predict sqlc's fields.
// A package whose jobs have no destination has no queries of its own, and
// no sqlc configuration.
func SQLCConfig(p *model.Package) []byte {
	if !HasQueries(p) {
		return nil
	}
	var b strings.Builder
	b.WriteString("version: \"2\"\nsql:\n")
	for _, d := range Dialects(p) {
		l := LayoutOf(d)
		writeSQLCGo(&b, d, MigrationsOf(p, d), l.Queries, l.Out, l.GoPackage)
		if d == model.SQLite {
			writeSQLiteOverrides(&b, p)
		}
	}
	return []byte(b.String())
}

// LedgerLayout is where the runtime keeps a dialect's ledger queries and
// their sqlc code, relative to the idem directory.
func LedgerLayout(d model.Dialect) Layout {
	dir := map[model.Dialect]string{model.Postgres: "idempg", model.SQLite: "idemsqlite"}[d] + "/internal/ledgerdb"
	return Layout{Migrations: "schema/" + string(d), Queries: dir + "/queries.sql", Out: dir, GoPackage: "ledgerdb"}
}

// LedgerSQLCConfig is sqlc.yaml for the runtime's ledger queries (see
// LedgerQueries), relative to the idem directory.
func LedgerSQLCConfig() []byte {
	var b strings.Builder
	b.WriteString("version: \"2\"\nsql:\n")
	for _, d := range []model.Dialect{model.Postgres, model.SQLite} {
		l := LedgerLayout(d)
		writeSQLCGo(&b, d, l.Migrations, l.Queries, l.Out, l.GoPackage)
	}
	return []byte(b.String())
}

// writeSQLCGo writes one dialect's entry of sqlc.yaml.
func writeSQLCGo(b *strings.Builder, d model.Dialect, schema, queries, out, pkg string) {
	inits := model.Initialisms()
	slices.Sort(inits)
	engine := map[model.Dialect]string{model.Postgres: "postgresql", model.SQLite: "sqlite"}[d]
	fmt.Fprintf(b, "  - engine: %s\n    schema: %s\n    queries: %s\n    gen:\n      go:\n", engine, schema, queries)
	fmt.Fprintf(b, "        package: %s\n        out: %s\n        initialisms: [%s]\n", pkg, out, strings.Join(inits, ", "))
	if d == model.Postgres {
		b.WriteString(`        sql_package: pgx/v5
        emit_pointers_for_null_types: true
        overrides:
          - {db_type: timestamptz, go_type: time.Time}
          - {db_type: timestamptz, nullable: true, go_type: {type: time.Time, pointer: true}}
          - {db_type: uuid, go_type: github.com/google/uuid.UUID}
          - {db_type: uuid, nullable: true, go_type: {import: github.com/google/uuid, type: UUID, pointer: true}}
          - {db_type: jsonb, go_type: encoding/json.RawMessage}
          - {db_type: jsonb, nullable: true, go_type: encoding/json.RawMessage}
`)
	}
}

// writeSQLiteOverrides gives each nullable BLOB destination column (a
// bytes? field) the Go type *[]byte. sqlc's default, []byte, cannot say
// NULL to the SQLite driver, which binds a nil []byte as an empty BLOB;
// database/sql binds a nil pointer as NULL and scans NULL into one. The
// ledger's own nullable BLOBs keep []byte.
func writeSQLiteOverrides(b *strings.Builder, p *model.Package) {
	var cols []string
	for _, j := range p.Jobs {
		if j.Dest == nil {
			continue
		}
		for _, f := range j.Unit.Fields {
			if f.Type == model.Bytes && f.Nullable {
				cols = append(cols, j.Dest.Table+"."+f.Name)
			}
		}
	}
	if len(cols) == 0 {
		return
	}
	b.WriteString("        overrides:\n")
	for _, c := range cols {
		fmt.Fprintf(b, "          - {column: %s, go_type: {type: \"[]byte\", pointer: true}}\n", c)
	}
}
