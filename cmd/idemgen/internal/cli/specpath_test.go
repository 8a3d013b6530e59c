package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestSpecErrorsNameTheFileAsGoVetDoes: every verb that reads a spec names
// it in its errors the same way from one working directory, however the
// file was given (a pattern, ./x, ../x, an absolute path), and that way is
// the one go vet uses for a Go file beside the spec: relative to the
// working directory.
func TestSpecErrorsNameTheFileAsGoVetDoes(t *testing.T) {
	bad := strings.Replace(goodSpec, "{invoice_id}", "{invoce_id}", 1)
	dir := module(t, map[string]string{
		"jobs/idemgen.yaml": bad,
		// A Go file go vet finds fault with, to hold our paths against.
		"jobs/x.go":    "package jobs\n\nimport \"fmt\"\n\nfunc F() { fmt.Printf(\"%d\", \"s\") }\n",
		"other/doc.go": "package other\n",
	})
	abs := filepath.Join(dir, "jobs", "idemgen.yaml")
	const line = ":13:29: " // the placeholder's position in bad
	for _, tc := range []struct {
		wd   string     // relative to the module
		runs [][]string // each must print the spec's path as want
		want string
	}{
		{".", [][]string{
			{"vet", "./..."},
			{"vet", "./jobs"},
			{"vet", "-f", "./jobs/idemgen.yaml"},
			{"diff", "-f", "jobs/../jobs/idemgen.yaml"},
			{"generate", "-f", abs},
			{"status", "-db", "unused.db", "-f", "jobs/idemgen.yaml"},
		}, filepath.Join("jobs", "idemgen.yaml")},
		{"jobs", [][]string{
			{"generate"}, // as go generate runs it
			{"vet"},
			{"vet", "."},
			{"diff", "-f", "../jobs/idemgen.yaml"},
			{"ledger", "-db", "unused.db", "-f", abs, "list"},
		}, "idemgen.yaml"},
		{"other", [][]string{
			{"vet", "../jobs"},
			{"generate", "-f", abs},
		}, filepath.Join("..", "jobs", "idemgen.yaml")},
	} {
		t.Chdir(filepath.Join(dir, tc.wd))
		for _, args := range tc.runs {
			code, _, errOut := run(t, args...)
			if want := tc.want + line; code != 1 || !strings.HasPrefix(errOut, want) {
				t.Errorf("in %s: idemgen %s = %d, %q; want 1 and %s...", tc.wd, strings.Join(args, " "), code, errOut, want)
			}
		}
		if goVet := goVetPath(t, tc.wd); goVet != "" && filepath.Dir(goVet) != filepath.Dir(tc.want) {
			t.Errorf("in %s: go vet names the Go file beside the spec %s, idemgen names the spec %s; want the same directory", tc.wd, goVet, tc.want)
		}
	}
}

// goVetPath runs go vet in the working directory on the package holding
// x.go and returns the path it prints for x.go, or "" without a go command.
func goVetPath(t *testing.T, wd string) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Log("no go command; not comparing with go vet")
		return ""
	}
	pkg := "./jobs"
	switch wd {
	case "jobs":
		pkg = "."
	case "other":
		pkg = "../jobs"
	}
	cmd := exec.Command(goCmd, "vet", pkg)
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	out, _ := cmd.CombinedOutput()
	m := regexp.MustCompile(`(?m)^(?:vet: )?(\S*x\.go):5:\d+: `).FindSubmatch(out)
	if m == nil {
		t.Fatalf("go vet %s in %s printed no finding for x.go:\n%s", pkg, wd, out)
	}
	return string(m[1])
}
