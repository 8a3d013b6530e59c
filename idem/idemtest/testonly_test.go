package idemtest

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testOnly are the packages of idemgen for tests only (idemgen lint's
// testonly check reports an import of one outside a _test.go file).
var testOnly = []string{"github.com/idemgen/idemgen/idem/idemtest", "github.com/idemgen/idemgen/idem/crashsim"}

// allowedImporters import a test-only package on purpose, each import
// marked //idemgen:allow-testonly: the test packages themselves, the
// helpers of idemgen's own tests, and the example's two programs that
// simulate (the demo's day runs its leases on its clock; the benchmark
// sets its runs' limits on the spec's job).
var allowedImporters = []string{
	"github.com/idemgen/idemgen/idem/idemtest",
	"github.com/idemgen/idemgen/idem/crashsim",
	"github.com/idemgen/idemgen/idem/idembroker/brokertest",
	"github.com/idemgen/idemgen/idem/internal/billingtest",
	"github.com/idemgen/idemgen/example",
	"github.com/idemgen/idemgen/example/bench",
}

// Production code cannot reach the test hooks: no package the runtime,
// the CLI, the example's services or a golden's generated package links
// (their dependencies, their tests' left out) imports idemtest or
// crashsim, other than the few that do on purpose, and those are seen to.
func TestProductionNeverImportsTheTestPackages(t *testing.T) {
	idem := goList(t, "../..", "-f", "{{.ImportPath}}", "./idem/...")
	var roots []string
	for _, p := range idem {
		if !slices.Contains(allowedImporters, p) && !strings.HasSuffix(p, "/storetest") {
			roots = append(roots, p)
		}
	}
	seen := map[string]bool{}
	check := func(dir string, roots ...string) {
		t.Helper()
		for _, line := range goList(t, dir, append([]string{"-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, roots...)...) {
			pkg, imports, _ := strings.Cut(line, " ")
			for _, imp := range strings.Fields(imports) {
				switch {
				case !slices.Contains(testOnly, imp):
				case slices.Contains(allowedImporters, pkg):
					seen[pkg] = true
				default:
					t.Errorf("%s imports %s, which is for tests only (listed from %s in %s)", pkg, imp, strings.Join(roots, " "), dir)
				}
			}
		}
	}
	check("../..", roots...)
	check("../..", "./cmd/...", "./example/...")
	check("../../testdata", "./golden/cursor", "./golden/brokers", "./golden/pgonly_service")
	// The listing sees an import: the demo's and the benchmark's are found.
	for _, p := range []string{"github.com/idemgen/idemgen/example", "github.com/idemgen/idemgen/example/bench"} {
		if !seen[p] {
			t.Errorf("%s no longer imports a test package: take it out of allowedImporters", p)
		}
	}
}

// goList runs go list in dir and returns its lines.
func goList(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %s in %s: %v\n%s", strings.Join(args, " "), dir, err, ee.Stderr)
		}
		t.Fatalf("go list %s in %s: %v", strings.Join(args, " "), dir, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}
