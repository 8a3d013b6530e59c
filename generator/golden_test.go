package generator_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestGoldensBuildAndBehave vets the nested testdata module and runs its
// tests: the hand-written behaviour tests beside the golden trees, on SQLite
// and, when IDEMGEN_TEST_POSTGRES is set, on PostgreSQL.
func TestGoldensBuildAndBehave(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and tests the nested testdata module; skipped with -short")
	}
	gocmd := filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	if _, err := os.Stat(gocmd); err != nil {
		if gocmd, err = exec.LookPath("go"); err != nil {
			t.Skip("the go command is not available: cannot build the goldens")
		}
	}
	dir, err := filepath.Abs(filepath.Join("..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"vet", "./..."}, {"test", "-count=1", "./..."}} {
		cmd := exec.Command(gocmd, args...)
		cmd.Dir = dir
		// The parent environment carries IDEMGEN_TEST_POSTGRES through;
		// GOFLAGS=-mod=mod would let a stale go.sum pass, so it is cleared.
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("go %s: %v", strings.Join(args, " "), err)
		}
		if err != nil {
			t.Errorf("go %s in testdata failed:\n%s", strings.Join(args, " "), out)
			continue
		}
		t.Logf("go %s:\n%s", strings.Join(args, " "), out)
	}
}
