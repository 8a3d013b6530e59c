package lint

import (
	"go/ast"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// TestOnly reports imports of idemgen's test packages outside tests.
var TestOnly = &analysis.Analyzer{
	Name: "testonly",
	Doc: `check that idemgen's test packages are imported by tests only

The package idem/idemtest holds the hooks a test sets in a job, which the
runtime's API leaves out: a crash hook at the job's crash points, an edit
of its definition (versions, rate, lease), a clock of its own for leases.
Production code that reaches them by accident runs a job that stops where
a test told it to, or whose leases expire on a clock no other worker
shares. The crash-simulation harness idem/crashsim is for the generated
tests only. testonly reports an import of either from a file that is not
a _test.go file: move the use into a test. A program that simulates time
on purpose (a demo, a benchmark) says so on the import line, with why:
"//idemgen:allow-testonly the demo simulates a day".`,
	URL: "https://github.com/idemgen/idemgen#checking-the-code-around-it",
	Run: runTestOnly,
}

// TestOnlyPackages are the packages of idemgen for tests only; they may
// import each other.
var TestOnlyPackages = []string{
	"github.com/idemgen/idemgen/idem/idemtest",
	"github.com/idemgen/idemgen/idem/crashsim",
}

// allowTestOnly is the directive that allows one import, with its reason.
const allowTestOnly = "//idemgen:allow-testonly"

func runTestOnly(pass *analysis.Pass) (any, error) {
	if slices.Contains(TestOnlyPackages, strings.TrimSuffix(pass.Pkg.Path(), "_test")) {
		return nil, nil
	}
	for _, f := range pass.Files {
		if strings.HasSuffix(pass.Fset.File(f.Pos()).Name(), "_test.go") {
			continue
		}
		for _, imp := range f.Imports {
			path, err := strconv.Unquote(imp.Path.Value)
			if err != nil || !slices.Contains(TestOnlyPackages, path) {
				continue
			}
			switch why, found := allowed(imp); {
			case found && why != "":
				continue
			case found:
				pass.Reportf(imp.Pos(), "%s needs its reason: %s <why this program sets test hooks>", allowTestOnly, allowTestOnly)
			default:
				pass.Reportf(imp.Pos(), "%s is for tests only, imported here by a file that is not a _test.go file: "+
					"production code could reach its test hooks (a crash hook, a lease clock of its own); move the use into a test, "+
					"or, for a program that simulates on purpose, put %s <why> on the import line", path, allowTestOnly)
			}
		}
	}
	return nil, nil
}

// allowed returns the reason the import's line comment, or the comment
// above it, gives after the directive, and whether the directive is there.
func allowed(imp *ast.ImportSpec) (why string, found bool) {
	for _, g := range []*ast.CommentGroup{imp.Comment, imp.Doc} {
		if g == nil {
			continue
		}
		for _, c := range g.List {
			if rest, ok := strings.CutPrefix(c.Text, allowTestOnly); ok && (rest == "" || rest[0] == ' ') {
				return strings.TrimSpace(rest), true
			}
		}
	}
	return "", false
}
