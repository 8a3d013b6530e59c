package goldenrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestOnlySQLiteStaysOutOfBuilds holds the promise behind a
// PostgreSQL-only package's SQLite store (generated for its tests only, in
// idemgen_sqlite_test.go): its build links no SQLite (neither the runtime's
// SQLite store, its sqlc queries nor a driver), while its tests do.
func TestTestOnlySQLiteStaysOutOfBuilds(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available: cannot list the goldens' dependencies")
	}
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	stores, err := filepath.Glob(filepath.Join(dir, "golden", "*", "idemgen_sqlite_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(stores) < 2 {
		t.Fatalf("%d golden packages with a test-only SQLite store (pgonly, pgonly_service), want 2 or more", len(stores))
	}
	list := func(args ...string) []string {
		t.Helper()
		cmd := exec.Command(gocmd, append([]string{"list", "-deps"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false", "GOWORK=off")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", strings.Join(args, " "), err)
		}
		return strings.Fields(string(out))
	}
	for _, store := range stores {
		pkg := "./golden/" + filepath.Base(filepath.Dir(store))
		var linked []string
		for _, dep := range list(pkg) {
			if linksSQLite(dep) {
				linked = append(linked, dep)
			}
		}
		if len(linked) > 0 {
			t.Errorf("%s links SQLite into every build, not only its tests: %s", pkg, strings.Join(linked, ", "))
		}
		var tested bool
		for _, dep := range list("-test", pkg) {
			tested = tested || strings.HasSuffix(dep, "/internal/sqlitedb")
		}
		if !tested {
			t.Errorf("%s: its tests do not use the test-only SQLite store (internal/sqlitedb)", pkg)
		}
	}
}

// linksSQLite reports whether dep is SQLite itself or a SQLite store: the
// embedded engine and its driver, the runtime's store, a generated
// package's sqlitedb. (idemops' SQLite queries are SQL text over
// database/sql, linked beside its PostgreSQL ones, and bring no engine.)
func linksSQLite(dep string) bool {
	return strings.HasPrefix(dep, "github.com/ncruces/") ||
		strings.HasSuffix(dep, "/idem/idemsqlite") || strings.Contains(dep, "/idem/idemsqlite/") ||
		strings.HasSuffix(dep, "/internal/sqlitedb")
}
