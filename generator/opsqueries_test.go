package generator_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/sqlc"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
)

// idemops reads a package's tables through queries compiled by sqlc
// (idem/idemops/internal/opspg and opssqlite), as the stores do theirs:
// the checked-in code must be what sqlc makes today of its queries.sql,
// over the schema every generated package migrates to (the placeholder
// tables, idemrt.LedgerPlaceholders). -update writes it.
func TestOpsQueries(t *testing.T) {
	p := &model.Package{Name: "idem", Dialects: []model.Dialect{model.Postgres, model.SQLite}, Tables: sqlgen.LedgerPlaceholders()}
	var config strings.Builder
	config.WriteString("version: \"2\"\nsql:\n")
	in := map[string][]byte{}
	want := generator.Files{}
	for _, d := range p.Dialects {
		pkg := map[model.Dialect]string{model.Postgres: "opspg", model.SQLite: "opssqlite"}[d]
		engine := map[model.Dialect]string{model.Postgres: "postgresql", model.SQLite: "sqlite"}[d]
		dir := "idemops/internal/" + pkg
		schema := "schema/" + string(d)
		config.WriteString("  - engine: " + engine + "\n    schema: " + schema + "\n    queries: " + dir + "/queries.sql\n" +
			"    gen:\n      go:\n        package: " + pkg + "\n        out: " + dir + "\n")
		in[schema+"/00001_idemgen.sql"] = sqlgen.InitialMigration(p, d)
		q, err := os.ReadFile(filepath.Join("..", "idem", filepath.FromSlash(dir), "queries.sql"))
		if err != nil {
			t.Fatal(err)
		}
		want[dir+"/queries.sql"] = q
		in[dir+"/queries.sql"] = q[bytes.Index(q, []byte("-- name:")):] // the preamble is no query's doc
	}
	in["sqlc.yaml"] = []byte(config.String())
	out, err := sqlc.Runner{Exe: os.Args[0]}.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range out {
		want[name] = data
	}
	compareTree(t, filepath.Join("..", "idem"), want, func(name string) bool { return !strings.HasPrefix(name, "idemops/internal/") })
}
