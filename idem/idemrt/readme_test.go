package idemrt

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEErrorSwitchNamesEverySentinel: the README's errors.Is switch,
// which callers copy, names every sentinel error the package exports (in a
// case, or in the default case's comment), and nothing the package lacks.
// Recovery's sentinels (recover.go) answer a person's Retry and Forget, not
// a job's calls; docs/operations.md names them.
func TestREADMEErrorSwitchNamesEverySentinel(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	start := strings.Index(text, "rep, err := hook.Process(ctx, payment)\nswitch {")
	if start < 0 {
		t.Fatal("README.md: the errors.Is switch (after **Errors.**) is gone")
	}
	end := strings.Index(text[start:], "\n}\n")
	block := text[start : start+end]
	named := map[string]bool{}
	for _, m := range regexp.MustCompile(`idem\.(Err\w+)`).FindAllStringSubmatch(block, -1) {
		named[m[1]] = true
	}

	fset := token.NewFileSet()
	exported := map[string]bool{}
	files, _ := filepath.Glob("*.go")
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "recover.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(id.Name, "Err") && id.IsExported() {
						exported[id.Name] = true
					}
				}
			}
		}
	}
	if len(exported) == 0 {
		t.Fatal("found no exported Err variables in package idem")
	}
	for name := range exported {
		if !named[name] {
			t.Errorf("README.md's error switch does not name idem.%s", name)
		}
	}
	for name := range named {
		if !exported[name] {
			t.Errorf("README.md's error switch names idem.%s, which package idem does not export", name)
		}
	}
}

// TestStateNamesInDocsMatchTheCode: docs/runtime.md's state tables name
// every state constant of the package (State*, UnitState*; not the
// deprecated old names) with its value, and no constant the package
// lacks; and neither the README nor the docs call a state by an old name.
func TestStateNamesInDocsMatchTheCode(t *testing.T) {
	consts := stateConstants(t)
	if len(consts) == 0 {
		t.Fatal("found no State or UnitState constants in package idem")
	}
	runtime, err := os.ReadFile(filepath.Join("..", "..", "docs", "runtime.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+)` \\| `idem\\.((?:Unit)?State\\w+)` \\|").FindAllStringSubmatch(string(runtime), -1) {
		word, name := m[1], m[2]
		documented[name] = true
		value, ok := consts[name]
		switch {
		case !ok:
			t.Errorf("docs/runtime.md names idem.%s, which package idem does not declare", name)
		case value != word:
			t.Errorf("docs/runtime.md calls idem.%s %q; its value is %q", name, word, value)
		}
	}
	for name, value := range consts {
		if !documented[name] {
			t.Errorf("docs/runtime.md's state tables leave out idem.%s (%q)", name, value)
		}
	}

	oldNames := regexp.MustCompile("ledger state `?failed|stored_state|StoredState|Shown(Pending|Leased|Done|Parked)|StateFailed")
	docs, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	for _, name := range append(docs, filepath.Join("..", "..", "README.md")) {
		text, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range oldNames.FindAllString(string(text), -1) {
			t.Errorf("%s: %q is an old name of a state", name, m)
		}
	}
}

// stateConstants returns the package's exported State* and UnitState*
// string constants by name, with their values, leaving out those whose
// declaration says Deprecated.
func stateConstants(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	values := map[string]string{}
	refs := map[string]string{} // a constant declared as another
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST || strings.Contains(gd.Doc.Text(), "Deprecated:") {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !strings.HasPrefix(id.Name, "State") && !strings.HasPrefix(id.Name, "UnitState") || i >= len(vs.Values) {
						continue
					}
					switch v := vs.Values[i].(type) {
					case *ast.BasicLit:
						if v.Kind == token.STRING {
							values[id.Name] = strings.Trim(v.Value, "\"`")
							names = append(names, id.Name)
						}
					case *ast.Ident:
						refs[id.Name] = v.Name
						names = append(names, id.Name)
					}
				}
			}
		}
	}
	out := map[string]string{}
	for _, name := range names {
		v, ok := values[name]
		if !ok {
			v, ok = values[refs[name]]
		}
		if !ok {
			t.Fatalf("idem.%s: cannot read its value", name)
		}
		out[name] = v
	}
	return out
}
