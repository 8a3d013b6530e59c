package generator_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlc"
)

// TestLeanSqlcChild builds the sqlc child as generate builds it on a
// user's machine (lean: generator/internal/sqlc/lean.go) and holds its output to
// whole sqlc's (this test binary links it) on every spec the repository
// generates, both dialects, and on SQL that sqlc must reject.
func TestLeanSqlcChild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sqlc child")
	}
	ctx := context.Background()
	exe := filepath.Join(t.TempDir(), "idemgen-sqlc")
	var said bytes.Buffer
	if err := sqlc.BuildChild(ctx, &said, "", "github.com/idemgen/idemgen/generator/internal/sqlc/child", exe); err != nil {
		t.Fatal(err)
	}
	if said.Len() > 0 {
		t.Fatalf("the sqlc child was not built lean: %s", said.String())
	}
	lean, whole := sqlc.Runner{Exe: exe}, sqlc.Runner{Exe: os.Args[0]}

	specs, err := filepath.Glob(filepath.Join("..", "testdata", "golden", "*", "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	more, err := filepath.Glob(filepath.Join("..", "example", "*", "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	specs = append(append(specs, filepath.Join("..", "example", "idemgen.yaml")), more...)
	sqlcFiles := 0 // files sqlc wrote, over every spec
	for _, specPath := range specs {
		t.Run(filepath.ToSlash(specPath), func(t *testing.T) {
			data, err := os.ReadFile(specPath)
			if err != nil {
				t.Fatal(err)
			}
			f, ds := spec.Parse(filepath.Base(specPath), data)
			if ds.HasErrors() {
				t.Fatal(ds)
			}
			gen := func(r sqlc.Runner) generator.Files {
				files, err := generator.Generate(ctx, f, generator.Options{
					SQLC: r, ImportPath: "example.com/svc/jobs", Existing: os.DirFS(filepath.Dir(specPath)),
				})
				if err != nil {
					t.Fatal(err)
				}
				return files
			}
			want, got := gen(whole), gen(lean)
			for name, data := range want {
				if strings.HasSuffix(name, ".sql.go") {
					sqlcFiles++
				}
				if !bytes.Equal(got[name], data) {
					t.Errorf("%s: the lean child wrote something else than sqlc", name)
				}
			}
			for name := range got {
				if _, ok := want[name]; !ok {
					t.Errorf("%s: written by the lean child only", name)
				}
			}
		})
	}
	if sqlcFiles < len(specs) {
		t.Errorf("sqlc wrote %d files for %d specs: too few to compare", sqlcFiles, len(specs))
	}

	t.Run("rejected SQL", func(t *testing.T) {
		for _, engine := range []string{"postgresql", "sqlite"} {
			in := map[string][]byte{
				sqlc.ConfigName: []byte("version: \"2\"\nsql:\n  - engine: " + engine + "\n    schema: schema.sql\n    queries: queries.sql\n" +
					"    gen:\n      go: {package: db, out: db}\n"),
				"schema.sql":  []byte("CREATE TABLE t (id TEXT PRIMARY KEY);\n"),
				"queries.sql": []byte("-- name: Broken :many\nSELECT nope FROM t;\n"),
			}
			_, wantErr := whole.Run(ctx, in)
			_, gotErr := lean.Run(ctx, in)
			if wantErr == nil || gotErr == nil || wantErr.Error() != gotErr.Error() {
				t.Errorf("%s: sqlc says %v\nthe lean child says %v", engine, wantErr, gotErr)
			}
		}
	})
}
