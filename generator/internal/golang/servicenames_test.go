package golang

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestServiceNamesAreIdems: rt refers to package idem for exactly the
// names idem declares (what generated code shows a service), and to
// idemrt, the contract package, for every other runtime name.
func TestServiceNamesAreIdems(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "idem", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					declared[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							declared[s.Name.Name] = true
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.IsExported() {
								declared[id.Name] = true
							}
						}
					}
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("found no exported names in ../../../idem")
	}
	for name := range declared {
		if !serviceNames[name] {
			t.Errorf("package idem declares %s, but rt(%q) refers to idemrt.%s", name, name, name)
		}
	}
	for name := range serviceNames {
		if !declared[name] {
			t.Errorf("rt(%q) refers to idem.%s, which package idem does not declare", name, name)
		}
	}
}
