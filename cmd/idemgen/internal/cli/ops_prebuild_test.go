package cli

import (
	"os"
	"path/filepath"
	"testing"
)

// generate builds the database child only in a module that takes idemgen
// as its tool.
func TestTakesIdemgenTool(t *testing.T) {
	for goMod, want := range map[string]bool{
		"module example.com/svc\n\ngo 1.26.0\n\ntool github.com/idemgen/idemgen/cmd/idemgen\n":                                            true,
		"module example.com/svc\n\ngo 1.26.0\n\ntool (\n\tgolang.org/x/tools/cmd/stringer\n\tgithub.com/idemgen/idemgen/cmd/idemgen\n)\n": true,
		"module example.com/svc\n\ngo 1.26.0\n\nrequire github.com/idemgen/idemgen v0.4.0\n":                                              false,
		"module example.com/svc\n\ngo 1.26.0\n\ntool golang.org/x/tools/cmd/stringer\n":                                                   false,
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := takesIdemgenTool(dir); got != want {
			t.Errorf("takesIdemgenTool(%q) = %v, want %v", goMod, got, want)
		}
	}
}
