package generator_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/model"
	"github.com/idemgen/idemgen/generator/spec"
	"github.com/idemgen/idemgen/generator/sqlc"
	_ "github.com/idemgen/idemgen/generator/sqlc/linked" // this test binary is its own sqlc child
	"github.com/idemgen/idemgen/generator/sqlgen"
)

var update = flag.Bool("update", false, "rewrite the checked-in generated trees")

// The test binary doubles as the sqlc child process.
func TestMain(m *testing.M) {
	if sqlc.IsChild() {
		os.Exit(sqlc.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func generate(t *testing.T, specPath, outDir, importPath string) generator.Files {
	t.Helper()
	data, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	f, ds := spec.Parse(filepath.Base(specPath), data)
	if ds.HasErrors() {
		t.Fatal(ds)
	}
	files, err := generator.Generate(context.Background(), f, generator.Options{
		SQLC: sqlc.Runner{Exe: os.Args[0]}, ImportPath: importPath, Existing: os.DirFS(outDir),
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// writeFiles writes a generated tree under dir.
func writeFiles(t *testing.T, dir string, files generator.Files) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// compareTree checks dir holds exactly files (extra and missing included);
// with -update it rewrites dir instead.
func compareTree(t *testing.T, dir string, files generator.Files, ignore func(string) bool) {
	t.Helper()
	if *update {
		writeFiles(t, dir, files)
	}
	onDisk := map[string]bool{}
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if !ignore(rel) {
			onDisk[rel] = true
		}
		return nil
	})
	for _, name := range files.Names() {
		if ignore(name) {
			continue
		}
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Errorf("missing %s (run go test ./generator -update)", name)
			continue
		}
		if !bytes.Equal(got, files[name]) {
			t.Errorf("%s differs from what idemgen generates (run go test ./generator -update)", name)
		}
		delete(onDisk, name)
	}
	for name := range onDisk {
		t.Errorf("stale file %s is not generated any more", name)
	}
}

func TestExampleIsAFixedPoint(t *testing.T) {
	dir := filepath.Join("..", "example", "billing")
	files := generate(t, filepath.Join("..", "example", "idemgen.yaml"), dir, "github.com/idemgen/idemgen/example/billing")
	compareTree(t, dir, files, func(name string) bool { return name == ".idemgen-manifest" })
}

func TestGenerateIsDeterministic(t *testing.T) {
	dir := filepath.Join("..", "example", "billing")
	a := generate(t, filepath.Join("..", "example", "idemgen.yaml"), dir, "example.com/m/billing")
	b := generate(t, filepath.Join("..", "example", "idemgen.yaml"), dir, "example.com/m/billing")
	if len(a) != len(b) {
		t.Fatalf("%d files, then %d", len(a), len(b))
	}
	for name := range a {
		if !bytes.Equal(a[name], b[name]) {
			t.Errorf("%s differs between two runs", name)
		}
	}
	for name, data := range a {
		header := generator.Header
		if strings.HasSuffix(name, ".sql") {
			header = generator.SQLHeader
		}
		if !bytes.HasPrefix(data, []byte(header+"\n")) {
			t.Errorf("%s does not start with the idemgen header", name)
		}
	}
}

// The runtime owns the ledger's queries (idem/idempg, idem/idemsqlite): its
// checked-in queries and their sqlc code must be what the ledger template
// and sqlc make today, over the schema every generated package migrates to.
func TestRuntimeLedgerQueries(t *testing.T) {
	p := &model.Package{Name: "idem", Dialects: []model.Dialect{model.Postgres, model.SQLite}, Tables: sqlgen.LedgerPlaceholders()}
	in := map[string][]byte{"sqlc.yaml": sqlgen.LedgerSQLCConfig()}
	want := generator.Files{}
	for _, d := range p.Dialects {
		l := sqlgen.LedgerLayout(d)
		in[l.Migrations+"/00001_idemgen.sql"] = sqlgen.InitialMigration(p, d)
		q := sqlgen.LedgerQueries(d)
		want[l.Queries] = q
		in[l.Queries] = q[bytes.Index(q, []byte("-- name:")):]
	}
	out, err := sqlc.Runner{Exe: os.Args[0]}.Run(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range out {
		want[name] = data
	}
	compareTree(t, filepath.Join("..", "idem"), want, func(name string) bool { return !strings.Contains(name, "/internal/ledgerdb/") })
}
