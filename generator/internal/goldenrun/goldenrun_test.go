// Package goldenrun builds and tests the nested testdata module: the
// golden packages' generated crash simulations and hand-written behaviour
// tests. It is a package of its own so its run has its own test timeout.
package goldenrun

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata"))
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
