package generator

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/golang"
	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
)

func generate(ctx context.Context, f *spec.File, opts Options) (Files, error) {
	if ds := spec.Check(f); ds.HasErrors() {
		return nil, ds.Errors().Sorted()
	}
	if opts.SQLC == nil {
		return nil, errors.New("generate: no sqlc runner")
	}
	if opts.ImportPath == "" {
		return nil, errors.New("generate: the output directory's import path is unknown")
	}
	p, err := model.Resolve(f)
	if err != nil {
		return nil, fmt.Errorf("resolve spec: %w", err)
	}
	files := Files{}
	emit := func(name string, jf *jen.File) error {
		var b bytes.Buffer
		if err := jf.Render(&b); err != nil {
			return fmt.Errorf("emit %s: %w", name, err)
		}
		files[name] = withProvenance(groupImports(b.Bytes()), opts)
		return nil
	}
	for _, j := range p.Jobs {
		if err := emit("idemgen_"+j.Name+".go", golang.JobFile(p, j)); err != nil {
			return nil, err
		}
	}
	if err := emit("idemgen_crashsim_test.go", golang.CrashTestFile(p)); err != nil {
		return nil, err
	}
	if err := emit("idemgen_store.go", golang.StoreFile(p)); err != nil {
		return nil, err
	}
	if err := emit("idemgen_ops.go", golang.OpsFile(p)); err != nil {
		return nil, err
	}
	if rf := golang.RiverFile(p); rf != nil {
		if err := emit("idemgen_river.go", rf); err != nil {
			return nil, err
		}
	}
	sqlcIn := map[string][]byte{"sqlc.yaml": sqlgen.SQLCConfig(p)}
	for _, d := range sqlgen.Dialects(p) {
		if sqlgen.TestOnly(p, d) {
			// The SQLite store the generated tests run on when the spec
			// names no SQLite: for tests only, so a _test.go file.
			if err := emit("idemgen_"+string(d)+"_test.go", golang.TestStoreFile(p, d, opts.ImportPath)); err != nil {
				return nil, err
			}
		} else if df := golang.DialectFile(p, d, opts.ImportPath); df != nil {
			if err := emit("idemgen_"+string(d)+".go", df); err != nil {
				return nil, err
			}
		}
		l := sqlgen.LayoutOf(d)
		migs, err := migrations(opts.Existing, f, p, d)
		if err != nil {
			return nil, err
		}
		for name, data := range migs {
			files[name] = data
			sqlcIn[name] = data
		}
		if ddl := sqlgen.AdoptedTablesForSQLC(p, d); ddl != nil {
			// The adopted tables' shape, for sqlc only: the service's own
			// migrations create them, and Migrate checks them. Read after
			// the migrations, it replaces what they made of a table
			// idemgen created before it was adopted.
			sqlcIn[sqlgen.MigrationsOf(p, d)+"/zz_adopted_tables.sql"] = ddl
		}
		if q := sqlgen.Queries(p, d); q != nil {
			files[l.Queries] = q
			sqlcIn[l.Queries] = stripPreamble(q)
		}
	}
	if !sqlgen.HasQueries(p) {
		// No queries of its own: nothing for sqlc to compile. The
		// runtime's ledger queries are compiled against these migrations
		// once, in the runtime (TestRuntimeLedgerQueries).
		return files, nil
	}
	out, err := opts.SQLC.Run(ctx, sqlcIn)
	if err != nil {
		return nil, err
	}
	maps.Copy(files, out) // sqlc's files keep sqlc's header; the manifest makes them idemgen's
	return files, nil
}

// migrations returns a dialect's migration files, its schema snapshot and
// its sum file, or a test-only dialect's schema (sqlgen.TestOnly). Emitted migrations are kept byte for byte (the sum proves
// it); when the spec's schema differs from the snapshot, the next migration
// is added. See migrations.go.
func migrations(existing fs.FS, f *spec.File, p *model.Package, d model.Dialect) (Files, error) {
	if sqlgen.TestOnly(p, d) {
		// A test database is always new: the schema is one migration,
		// planned afresh (sqlgen.TestSchemaDir).
		return Files{sqlgen.TestSchemaDir + "/" + migrationName(1): sqlgen.TestSchema(p, d)}, nil
	}
	dir := sqlgen.LayoutOf(d).Migrations
	st, err := readMigrations(existing, dir)
	if err != nil {
		return nil, err
	}
	return st.next(f, p, d)
}

// stripPreamble drops the comments above the first query: sqlc would attach
// them to that query's Go doc comment.
func stripPreamble(q []byte) []byte {
	if i := bytes.Index(q, []byte("-- name:")); i > 0 {
		return q[i:]
	}
	return q
}

// groupImports groups a Go file's imports as goimports does, the
// standard library first, then the rest: jennifer writes them in one
// sorted block, so splitting it keeps each group sorted. A standard
// library path has no dot in its first element. (x/tools' imports.Process,
// formatting only, does the same at a parse and a print of every file:
// 6% of a generate's CPU.)
func groupImports(src []byte) []byte {
	start := bytes.Index(src, []byte("\nimport (\n"))
	if start < 0 {
		return src
	}
	start += len("\nimport (\n")
	end := bytes.Index(src[start:], []byte("\n)\n"))
	if end < 0 {
		return src
	}
	var std, other [][]byte
	for _, line := range bytes.Split(src[start:start+end], []byte("\n")) {
		_, quoted, _ := bytes.Cut(line, []byte(`"`))
		first, _, _ := bytes.Cut(quoted, []byte("/"))
		if bytes.Contains(first, []byte(".")) {
			other = append(other, line)
		} else {
			std = append(std, line)
		}
	}
	if len(std) == 0 || len(other) == 0 {
		return src
	}
	var b bytes.Buffer
	b.Write(src[:start])
	b.Write(bytes.Join(std, []byte("\n")))
	b.WriteString("\n\n")
	b.Write(bytes.Join(other, []byte("\n")))
	b.Write(src[start+end:])
	return b.Bytes()
}

// withProvenance writes, under a Go file's header, which idemgen wrote it
// and from which spec, as sqlc writes its version and source:
//
//	// Code generated by idemgen. DO NOT EDIT.
//	// versions:
//	//   idemgen v0.3.0
//	// source: ../idemgen.yaml
func withProvenance(src []byte, opts Options) []byte {
	rest, ok := bytes.CutPrefix(src, []byte(Header+"\n"))
	if !ok {
		return src
	}
	version := cmp.Or(opts.Version, "(devel)")
	var b bytes.Buffer
	b.WriteString(Header + "\n// versions:\n//   idemgen " + version + "\n")
	if opts.Source != "" {
		b.WriteString("// source: " + opts.Source + "\n")
	}
	b.Write(rest)
	return b.Bytes()
}
