package generator_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/idemgen/idemgen/generator"
)

// goldenModule is the nested module under testdata that holds the golden
// trees, so they are built, vetted and tested as real packages.
const goldenModule = "github.com/idemgen/idemgen/testdata"

// TestGolden generates every testdata/golden/<case>/idemgen.yaml and holds
// the checked-in tree beside it to the output, file by file. Hand-written
// files in a case (its behaviour tests) carry no idemgen header and are left
// out of the comparison, as the CLI leaves them alone.
func TestGolden(t *testing.T) {
	specs, err := filepath.Glob(filepath.Join("..", "testdata", "golden", "*", "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) == 0 {
		t.Fatal("no golden cases under testdata/golden")
	}
	for _, specPath := range specs {
		dir := filepath.Dir(specPath)
		name := filepath.Base(dir)
		t.Run(name, func(t *testing.T) {
			files := generate(t, specPath, dir, goldenModule+"/golden/"+name)
			compareTree(t, dir, files, func(rel string) bool {
				if rel == "idemgen.yaml" || rel == ".idemgen-manifest" {
					return true
				}
				if _, generated := files[rel]; generated {
					return false
				}
				return !ownedByIdemgen(filepath.Join(dir, filepath.FromSlash(rel)))
			})
		})
	}
}

// ownedByIdemgen reports whether the file at p starts with an idemgen header.
func ownedByIdemgen(p string) bool {
	data, err := os.ReadFile(p)
	if err != nil {
		return false
	}
	return bytes.HasPrefix(data, []byte(generator.Header+"\n")) || bytes.HasPrefix(data, []byte(generator.SQLHeader+"\n"))
}
