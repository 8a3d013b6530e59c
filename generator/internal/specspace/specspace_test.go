package specspace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlc"
	_ "github.com/idemgen/idemgen/generator/internal/sqlc/linked" // this test binary is its own sqlc child
)

func TestMain(m *testing.M) {
	if sqlc.IsChild() {
		os.Exit(sqlc.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// The settings, from the environment (docs/specspace.md).
const (
	envN      = "IDEMGEN_SPECSPACE_N"      // how many specs (default defaultN)
	envSeed   = "IDEMGEN_SPECSPACE_SEED"   // the run's seed (default defaultSeed)
	envOnly   = "IDEMGEN_SPECSPACE_ONLY"   // replay specs by their indexes (comma-separated)
	envFrom   = "IDEMGEN_SPECSPACE_FROM"   // the first spec's index (default 0)
	envP      = "IDEMGEN_SPECSPACE_P"      // packages built and tested at once (default 2)
	envKeep   = "IDEMGEN_SPECSPACE_KEEP"   // a directory to keep the generated module in
	envShrink = "IDEMGEN_SPECSPACE_SHRINK" // checks a shrink may spend (default 60; 0: no shrinking)
)

// specModule is the module path of the temporary module the specs are
// generated into, one package each, so they compile together.
const specModule = "specspace.test"

// TestSpecSpace draws specs over the spec's dimensions and requires each
// to pass vet silently, generate, build and pass its own crash
// simulation (-short) on SQLite and, with IDEMGEN_TEST_POSTGRES set, on
// PostgreSQL. A failing spec is shrunk to the smallest one that still
// fails, and printed with its seed and replay command.
func TestSpecSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("generates, builds and crash-tests drawn specs; skipped with -short")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available: cannot build the drawn specs")
	}
	seed := uint64(envInt(t, envSeed, defaultSeed))
	indexes := make([]int, envInt(t, envN, defaultN))
	from := envInt(t, envFrom, 0)
	for i := range indexes {
		indexes[i] = from + i
	}
	if s := os.Getenv(envOnly); s != "" {
		indexes = nil
		for _, f := range strings.Split(s, ",") {
			only, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				t.Fatalf("%s=%q: want indexes, comma-separated: %v", envOnly, s, err)
			}
			indexes = append(indexes, only)
		}
	}
	dir := moduleDir(t)
	var cases []specCase
	for _, i := range indexes {
		c := draw(seed, i)
		if err := write(dir, c); err != nil {
			t.Fatalf("seed %d spec %d does not generate: %v\n%s", seed, i, err, c.yaml())
		}
		cases = append(cases, c)
	}
	start := time.Now()
	results := goTest(t, gocmd, dir, "./...")
	t.Logf("%d specs (seed %d) generated, built and crash-tested in %s; PostgreSQL: %v",
		len(cases), seed, time.Since(start).Round(time.Second), os.Getenv("IDEMGEN_TEST_POSTGRES") != "")
	budget := envInt(t, envShrink, 60)
	for _, c := range cases {
		out, ok := results[specModule+"/"+c.pkg()]
		if ok && out == "" {
			t.Logf("ok   %s", c.summary())
			continue
		}
		if !ok {
			out = "no test result for the package"
		}
		report := fmt.Sprintf("seed %d spec %d fails: %s\nreplay: %s=%d %s=%d go test -run TestSpecSpace ./generator/internal/specspace\n--- spec\n%s--- failure\n%s",
			seed, c.index, c.summary(), envSeed, seed, envOnly, c.index, c.yaml(), tail(out, 60))
		if budget > 0 {
			// Said at once (go test -v shows it as it comes): a shrink
			// spends minutes a check, and a long run that is stopped
			// meanwhile would lose the failure itself.
			t.Logf("%s\n--- shrinking it (at most %d checks; %s=0: none)", report, budget, envShrink)
			s := shrink(c, out, budget, func(next specCase) string {
				if err := write(dir, next); err != nil {
					return "generate: " + err.Error()
				}
				return goTest(t, gocmd, dir, "./"+next.pkg())[specModule+"/"+next.pkg()]
			})
			report += fmt.Sprintf("--- shrunk in %d checks to\n%s--- each of these makes it pass (the dimensions it needs)\n  %s\n--- its failure\n%s",
				s.attempts, s.spec.yaml(), strings.Join(s.needs, "\n  "), tail(s.output, 40))
		}
		t.Error(report)
	}
}

// write vets c's spec (no finding allowed), generates it and writes its
// package under dir, replacing what was there.
func write(dir string, c specCase) error {
	return writeSpec(dir, c.pkg(), c.yaml(), false)
}

// errVetRefuses is writeSpec's answer for a spec vet refuses.
var errVetRefuses = errors.New("vet refuses the spec")

// writeSpec vets yaml, generates it and writes its package pkg under dir,
// replacing what was there. A finding of vet stops it (errVetRefuses
// for an error), a warning too unless warningsAllowed.
func writeSpec(dir, pkg, yaml string, warningsAllowed bool) error {
	f, ds := spec.Parse("idemgen.yaml", []byte(yaml))
	if !ds.HasErrors() {
		ds = append(ds, spec.Check(f)...)
	}
	if ds.HasErrors() {
		return fmt.Errorf("%w: %v", errVetRefuses, ds.Sorted())
	}
	if len(ds) > 0 && !warningsAllowed {
		return fmt.Errorf("vet: %v", ds.Sorted())
	}
	files, err := generator.Generate(context.Background(), f, generator.Options{
		SQLC: sqlc.Runner{Exe: os.Args[0]}, ImportPath: specModule + "/" + pkg,
	})
	if err != nil {
		return err
	}
	pkgDir := filepath.Join(dir, pkg)
	if err := os.RemoveAll(pkgDir); err != nil {
		return err
	}
	files["idemgen.yaml"] = []byte(yaml)
	for name, data := range files {
		p := filepath.Join(pkgDir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// moduleDir makes the module the specs are generated into: the nested
// testdata module's requirements, the runtime of this checkout.
func moduleDir(t *testing.T) string {
	dir := t.TempDir()
	if keep := os.Getenv(envKeep); keep != "" {
		dir = keep
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	mod, err := os.ReadFile(filepath.Join(root, "testdata", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	sum, err := os.ReadFile(filepath.Join(root, "testdata", "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	mod = regexp.MustCompile(`(?m)^module .*$`).ReplaceAll(mod, []byte("module "+specModule))
	mod = regexp.MustCompile(`(?m)^replace github.com/idemgen/idemgen => .*$`).ReplaceAll(mod, []byte("replace github.com/idemgen/idemgen => "+root))
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), mod, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// goTest runs the packages' generated tests (-short) and returns, per
// package, "" when it passed and its output when it failed or did not
// build.
func goTest(t *testing.T, gocmd, dir, pattern string) map[string]string {
	return goTestArgs(t, gocmd, dir, pattern, "-short")
}

// goTestArgs is goTest with go test's own flags (-short, or none for the
// whole matrix).
func goTestArgs(t *testing.T, gocmd, dir, pattern string, flags ...string) map[string]string {
	p := strconv.Itoa(envInt(t, envP, 2))
	args := append([]string{"test", "-json", "-count=1", "-p", p, "-timeout", "20m"}, flags...)
	cmd := exec.Command(gocmd, append(args, pattern)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false -mod=mod", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("go test %s: %v\n%s", pattern, err, stderr.String())
	}
	if keep := os.Getenv(envKeep); keep != "" && pattern == "./..." {
		// The whole run's events, each package's output in full, kept
		// beside the module.
		if err := os.WriteFile(filepath.Join(keep, "go-test.json"), stdout, 0o644); err != nil {
			t.Logf("keep go test's output: %v", err)
		}
	}
	out := map[string]*strings.Builder{}
	failed := map[string]bool{}
	passed := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Package, ImportPath, Test, Output string
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil {
			continue
		}
		pkg := ev.Package
		if pkg == "" {
			pkg, _, _ = strings.Cut(ev.ImportPath, " ") // build output: "pkg [pkg.test]"
		}
		if out[pkg] == nil {
			out[pkg] = &strings.Builder{}
		}
		out[pkg].WriteString(ev.Output)
		switch {
		case ev.Test != "":
		case ev.Action == "fail" || ev.Action == "build-fail":
			failed[pkg] = true
		case ev.Action == "pass":
			passed[pkg] = true
		}
	}
	res := map[string]string{}
	for pkg, b := range out {
		switch {
		case failed[pkg]:
			res[pkg] = b.String() + stderr.String()
		case passed[pkg]:
			res[pkg] = ""
		}
	}
	return res
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number", name, s)
	}
	return n
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n") + "\n"
}
