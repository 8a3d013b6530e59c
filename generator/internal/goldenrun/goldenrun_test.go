// Package goldenrun builds and tests the nested testdata module: the
// golden packages' generated crash simulations and hand-written behaviour
// tests. It is a package of its own so its run has its own test timeout.
package goldenrun

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// EnvGoldenRun, set to 1, runs the goldens' whole crash matrices (and,
// with IDEMGEN_TEST_POSTGRES, their PostgreSQL tests); without it the
// default `go test ./...` plays their -short sample on SQLite, a tier that
// keeps the repository's own suite within minutes (.ci/run sets it).
const EnvGoldenRun = "IDEMGEN_GOLDENRUN"

// TestGoldensBuildAndBehave vets the nested testdata module and runs its
// tests: the generated crash simulations and the hand-written behaviour
// tests beside the golden trees, on SQLite and, when IDEMGEN_TEST_POSTGRES
// and EnvGoldenRun are set, on PostgreSQL.
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
	// The goldens' whole crash matrix runs on SQLite; on PostgreSQL (when
	// IDEMGEN_TEST_POSTGRES is set) their behaviour tests run whole and the
	// crash simulations play their -short sample, which keeps this package
	// well inside its timeout on a busy machine. The example's jobs run
	// their whole matrix on both databases in example/billing; the
	// IDEMGEN_CRASHSIM_FULL=1 variable runs everything everywhere.
	pg := os.Getenv("IDEMGEN_TEST_POSTGRES")
	full := os.Getenv("IDEMGEN_CRASHSIM_FULL") != ""
	noPG := slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "IDEMGEN_TEST_POSTGRES=") })
	whole := os.Getenv(EnvGoldenRun) == "1" || full
	sqliteRun := []string{"test", "-count=1", "./..."}
	if !whole {
		sqliteRun = []string{"test", "-count=1", "-short", "./..."}
		t.Logf("the goldens' -short sample on SQLite; %s=1 runs their whole matrices, and on PostgreSQL", EnvGoldenRun)
	}
	runs := []struct {
		args []string
		env  []string
	}{
		{[]string{"vet", "./..."}, os.Environ()},
		{sqliteRun, noPG},
	}
	if pg != "" && whole {
		test := []string{"test", "-count=1", "-short", "./..."}
		if full {
			test = []string{"test", "-count=1", "-timeout=60m", "./..."}
		}
		runs = append(runs, struct {
			args []string
			env  []string
		}{test, os.Environ()})
	}
	for _, run := range runs {
		cmd := exec.Command(gocmd, run.args...)
		cmd.Dir = dir
		// GOFLAGS=-mod=mod would let a stale go.sum pass, so it is cleared.
		cmd.Env = append(run.env, "GOFLAGS=-buildvcs=false", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("go %s: %v", strings.Join(run.args, " "), err)
		}
		if err != nil {
			t.Errorf("go %s in testdata failed:\n%s", strings.Join(run.args, " "), out)
			continue
		}
		t.Logf("go %s:\n%s", strings.Join(run.args, " "), out)
	}
}
