package idem

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
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
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
