package cli

import (
	"bytes"
	"go/format"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	sqlccli "github.com/sqlc-dev/sqlc/pkg/cli"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/writeout"
	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/idem/idemops"
)

// TestMain lets this test binary serve as the sqlc child: generate
// re-executes its own binary as the sqlc child.
func TestMain(m *testing.M) {
	generator.LinkSQLC(sqlccli.Run)
	if generator.IsSQLCChild() {
		os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

const goodSpec = `version: 1
package: billing
out: gen
dialects: [sqlite]
jobs:
  - name: invoice_sync
    version: 1
    unit:
      type: Invoice
      fields:
        - invoice_id: string
        - updated_at: time
      key: "billing:invoice:{invoice_id}"
    source:
      watermark: {field: updated_at, overlap: 10m}
`

// effectWithShortRetention extends goodSpec with an effect whose retention
// is shorter than its lease: a warning, not an error.
const effectWithShortRetention = `    effects:
      - name: notify
        key: "notify:v{version}:{invoice_id}"
        when: always
        lease: 5m
        retention: 1m
`

// module makes a Go module in a temporary directory with the given files
// and returns its path.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	tree(t, dir, files)
	return dir
}

func TestVersion(t *testing.T) {
	code, out, errOut := run(t, "version")
	if code != 0 || errOut != "" || !regexp.MustCompile(`^idemgen (v\S+|\(devel\))\n$`).MatchString(out) {
		t.Errorf("version = %d, %q, %q", code, out, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stdout string // substring; "" means must be empty
		stderr string // substring; "" means must be empty
	}{
		{nil, 2, "", "usage: idemgen <command>"},
		{[]string{"frobnicate"}, 2, "", `unknown command "frobnicate"`},
		{[]string{"generate", "-x"}, 2, "", "flag provided but not defined: -x"},
		{[]string{"vet", "extra"}, 2, "", `pattern "extra": not a directory (./extra) and not in the main module`},
		{[]string{"vet", "-f", "x.yaml", "./..."}, 2, "", "-f and package patterns exclude each other"},
		{[]string{"generate", "./..."}, 2, "", `unexpected argument "./..."`},
		{[]string{"init", "a", "b"}, 2, "", `unexpected argument "b"`},
		{[]string{"version", "-f", "x"}, 2, "", "flag provided but not defined: -f"},
		{[]string{"help", "nope"}, 2, "", `unknown command "nope"`},
		{[]string{"-h"}, 0, "usage: idemgen <command>", ""},
		{[]string{"help"}, 0, "usage: idemgen <command>", ""},
		{[]string{"help", "diff"}, 0, "usage: idemgen diff [-f idemgen.yaml | packages] [-strict]", ""},
		{[]string{"help", "lint"}, 0, "usage: idemgen lint [-fix] [packages]", ""},
		{[]string{"generate", "-h"}, 0, "-v\tlist the files written", ""},
	} {
		code, out, errOut := run(t, tc.args...)
		if code != tc.code || !contains(out, tc.stdout) || !contains(errOut, tc.stderr) {
			t.Errorf("idemgen %q = %d\nstdout %q\nstderr %q\nwant %d, stdout with %q, stderr with %q", tc.args, code, out, errOut, tc.code, tc.stdout, tc.stderr)
		}
	}
}

// TestIsVetTool: only go vet's invocations go to unitchecker; a verb
// never does, whatever its arguments end with.
func TestIsVetTool(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"-V=full"}, true},
		{[]string{"-flags"}, true},
		{[]string{"-effectkey=false", "/tmp/go-build1/b001/vet.cfg"}, true},
		{[]string{"/tmp/go-build1/b001/vet.cfg"}, true},
		{nil, false},
		{[]string{"vet", "-f", "odd.cfg"}, false},
		{[]string{"lint", "./..."}, false},
		{[]string{"version"}, false},
	} {
		if got := IsVetTool(tc.args); got != tc.want {
			t.Errorf("IsVetTool(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

// contains is strings.Contains, except that "" requires s to be empty.
func contains(s, sub string) bool {
	if sub == "" {
		return s == ""
	}
	return strings.Contains(s, sub)
}

func TestVet(t *testing.T) {
	dir := module(t, map[string]string{
		"good.yaml": goodSpec,
		"bad.yaml":  strings.Replace(strings.Replace(goodSpec, "package:", "pakage:", 1), "    version: 1\n", "    verison: 1\n", 1),
		"warn.yaml": goodSpec + effectWithShortRetention,
	})
	t.Chdir(dir)
	if code, out, errOut := run(t, "vet", "-f", "good.yaml"); code != 0 || out != "" || errOut != "" {
		t.Errorf("vet good = %d, %q, %q; want 0 and silence", code, out, errOut)
	}
	code, out, errOut := run(t, "vet", "-f", "bad.yaml")
	want := `bad.yaml:2:1: spec: unknown key "pakage" (did you mean package?)
bad.yaml:7:5: job: unknown key "verison" (did you mean version?)
`
	if code != 1 || out != "" || errOut != want {
		t.Errorf("vet bad = %d, %q,\n%s\nwant 1 and\n%s", code, out, errOut, want)
	}
	// A warning is printed and fails nothing, as in generate; -strict
	// makes it fail.
	oneWarning := regexp.MustCompile(`^warn\.yaml:\d+:\d+: warning: .*\n$`)
	code, out, errOut = run(t, "vet", "-f", "warn.yaml")
	if code != 0 || out != "" || !oneWarning.MatchString(errOut) {
		t.Errorf("vet with a warning = %d, %q, %q; want 0 and one warning", code, out, errOut)
	}
	code, out, errOut = run(t, "vet", "-strict", "-f", "warn.yaml")
	if code != 1 || out != "" || !oneWarning.MatchString(errOut) {
		t.Errorf("vet -strict with a warning = %d, %q, %q; want 1 and one warning", code, out, errOut)
	}
	// A spec that cannot be found is exit code 2, with a hint.
	if code, _, errOut := run(t, "vet"); code != 2 || !strings.Contains(errOut, "run 'idemgen init' to write a starter spec here") {
		t.Errorf("vet without idemgen.yaml = %d, %q; want 2 and a hint", code, errOut)
	}
	if code, _, errOut := run(t, "vet", "-f", "jobs/idemgen.yaml"); code != 2 || !strings.Contains(errOut, "run 'idemgen init jobs' to write a starter spec there") {
		t.Errorf("vet -f jobs/idemgen.yaml = %d, %q; want 2 and a hint naming jobs", code, errOut)
	}
}

// TestMissingSpecFoundBelow: the default spec is missing because it sits
// in a subdirectory; the hint names it instead of suggesting init.
func TestMissingSpecFoundBelow(t *testing.T) {
	dir := module(t, map[string]string{"jobs/idemgen.yaml": goodSpec})
	t.Chdir(dir)
	for _, verb := range []string{"vet", "diff", "generate"} {
		code, _, errOut := run(t, verb)
		want := "idemgen: found " + filepath.Join("jobs", "idemgen.yaml") + " below here: name it with -f " + filepath.Join("jobs", "idemgen.yaml")
		if code != 2 || !strings.Contains(errOut, want) || strings.Contains(errOut, "idemgen init") {
			t.Errorf("%s = %d, %q; want 2 and %q", verb, code, errOut, want)
		}
	}
}

func TestGenerateStrict(t *testing.T) {
	dir := module(t, map[string]string{"idemgen.yaml": goodSpec + effectWithShortRetention})
	t.Chdir(dir)
	code, _, errOut := run(t, "generate", "-strict")
	if code != 1 || !regexp.MustCompile(`^idemgen\.yaml:\d+:\d+: warning: `).MatchString(errOut) {
		t.Errorf("generate -strict = %d, %q; want 1 and the warning", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "gen")); err == nil {
		t.Errorf("generate -strict wrote output for a spec with a warning")
	}
}

func TestInitWritesAValidStarter(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "Billing-Jobs")
	if code, _, errOut := run(t, "init", dir); code != 0 {
		t.Fatalf("init = %d, %s", code, errOut)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("init wrote %d files, want 2 (idemgen.yaml, generate.go)", len(entries))
	}
	yml, err := os.ReadFile(filepath.Join(dir, "idemgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const schemaLine = "# yaml-language-server: $schema=https://raw.githubusercontent.com/idemgen/idemgen/main/schema/idemgen.schema.json\n"
	if !strings.HasPrefix(string(yml), schemaLine) {
		t.Errorf("starter spec does not start with the schema line:\n%s", yml)
	}
	f, ds := generator.ParseSpec("idemgen.yaml", yml)
	if len(ds) > 0 {
		t.Errorf("starter spec has findings:\n%v", ds)
	}
	if f.Package.Value != "billingjobs" || len(f.Jobs) != 1 || f.Jobs[0].Source.Kind.Value != "watermark" ||
		f.Jobs[0].Destination == nil || len(f.Jobs[0].Effects) != 1 {
		t.Errorf("starter spec is not one watermark job with a destination and one effect: %+v", f)
	}
	// Every key line carries a comment.
	for i, line := range strings.Split(string(yml), "\n") {
		if trimmed := strings.TrimSpace(line); trimmed != "" && !strings.HasPrefix(trimmed, "#") &&
			!strings.HasPrefix(trimmed, "- ") && strings.Contains(trimmed, ":") && !strings.Contains(line, " # ") {
			t.Errorf("idemgen.yaml:%d: key without a comment: %s", i+1, line)
		}
	}

	gen, err := os.ReadFile(filepath.Join(dir, "generate.go"))
	if err != nil {
		t.Fatal(err)
	}
	if formatted, err := format.Source(gen); err != nil || !bytes.Equal(formatted, gen) {
		t.Errorf("generate.go is not gofmt-clean (%v):\n%s", err, gen)
	}
	if !strings.Contains(string(gen), "\npackage billingjobs\n") || !strings.Contains(string(gen), "\n//go:generate go tool idemgen generate\n") {
		t.Errorf("generate.go =\n%s", gen)
	}

	// A second init refuses and changes nothing.
	mustDo(t, os.WriteFile(filepath.Join(dir, "idemgen.yaml"), []byte("mine\n"), 0o644))
	if code, _, errOut := run(t, "init", dir); code != 1 || !strings.Contains(errOut, "never overwrites") {
		t.Errorf("second init = %d, %q", code, errOut)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "idemgen.yaml")); string(got) != "mine\n" {
		t.Errorf("second init overwrote idemgen.yaml")
	}

	// One existing file stops both from being written.
	other := t.TempDir()
	mustDo(t, os.WriteFile(filepath.Join(other, "generate.go"), []byte("package mine\n"), 0o644))
	if code, _, _ := run(t, "init", other); code != 1 {
		t.Errorf("init over generate.go = %d, want 1", code)
	}
	if _, err := os.Stat(filepath.Join(other, "idemgen.yaml")); err == nil {
		t.Errorf("init wrote idemgen.yaml although generate.go existed")
	}
}

func TestPackageName(t *testing.T) {
	for in, want := range map[string]string{
		"billing":      "billing",
		"Billing-Jobs": "billingjobs",
		"jobs_v2":      "jobsv2",
		"2fa":          "p2fa",
		"main":         "jobs",
		"type":         "jobs",
		"---":          "jobs",
		"größe":        "gre",
	} {
		if got := packageName(in); got != want {
			t.Errorf("packageName(%q) = %q, want %q", in, got, want)
		}
	}
}

// listed returns the files the manifest in dir lists.
func listed(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, writeout.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.Lines(string(data)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		t.Fatal("manifest lists no files")
	}
	return out
}

func TestGenerateDiffRoundTrip(t *testing.T) {
	dir := module(t, map[string]string{"svc/idemgen.yaml": goodSpec})
	t.Chdir(dir)
	const file = "svc/idemgen.yaml"
	gen := filepath.Join(dir, "svc/gen")

	// Paths are relative to the working directory; new files are diffed
	// against /dev/null; stderr says which spec is stale.
	code, out, errOut := run(t, "diff", "-f", file)
	if code != 1 || !strings.Contains(out, "\n--- /dev/null\n+++ b/svc/gen/.idemgen-manifest\n@@ -0,0 +1,") ||
		!regexp.MustCompile(`^idemgen: svc/idemgen.yaml: \d+ generated files differ from the spec; run 'idemgen generate -f svc/idemgen.yaml'\n$`).MatchString(errOut) {
		t.Fatalf("diff before generate = %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(gen); err == nil {
		t.Fatal("diff created the output directory")
	}

	if code, out, errOut := run(t, "generate", "-v", "-f", file); code != 0 || errOut != "" || !strings.Contains(out, "create "+filepath.Join("svc", "gen", writeout.ManifestName)) {
		t.Fatalf("generate = %d\n%s\n%s", code, out, errOut)
	}
	first := listed(t, gen)[0]
	doc := filepath.Join(gen, filepath.FromSlash(first))
	data, err := os.ReadFile(doc)
	if err != nil || !strings.HasPrefix(string(data), generator.Header+"\n") {
		t.Fatalf("%s = %q, %v", first, data, err)
	}
	if code, out, errOut := run(t, "diff", "-f", file); code != 0 || out != "" || errOut != "" {
		t.Errorf("diff after generate = %d, %q, %q; want 0 and silence", code, out, errOut)
	}

	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	mustDo(t, os.Chtimes(doc, old, old))
	if code, out, _ := run(t, "generate", "-v", "-f", file); code != 0 || out != "" {
		t.Errorf("second generate = %d, wrote %q; want nothing", code, out)
	}
	if fi, _ := os.Stat(doc); !fi.ModTime().Equal(old) {
		t.Errorf("second generate rewrote %s", first)
	}

	// An edited generated file shows in diff and is restored by generate.
	mustDo(t, os.WriteFile(doc, append(data, "// edited\n"...), 0o644))
	if code, out, _ := run(t, "diff", "-f", file); code != 1 || !strings.Contains(out, "--- a/svc/gen/"+first+"\n+++ b/svc/gen/"+first+"\n") || !strings.Contains(out, "-// edited\n") {
		t.Errorf("diff after edit = %d\n%s", code, out)
	}
	// A stale file the manifest lists is shown as deleted, then deleted.
	stale := filepath.Join(gen, "jobs/old/old.go")
	mustDo(t, os.MkdirAll(filepath.Dir(stale), 0o755))
	mustDo(t, os.WriteFile(stale, []byte(generator.Header+"\n\npackage old\n"), 0o644))
	manifest := filepath.Join(gen, writeout.ManifestName)
	m, _ := os.ReadFile(manifest)
	mustDo(t, os.WriteFile(manifest, append(m, "jobs/old/old.go\n"...), 0o644))
	code, out, _ = run(t, "diff", "-f", file)
	if code != 1 || !strings.Contains(out, "--- a/svc/gen/jobs/old/old.go\n+++ /dev/null\n@@ -1,3 +0,0 @@\n") {
		t.Errorf("diff with a stale file = %d\n%s", code, out)
	}
	if code, _, errOut := run(t, "generate", "-f", file); code != 0 {
		t.Fatalf("generate = %d, %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(gen, "jobs")); err == nil {
		t.Errorf("stale file or its directories survived generate")
	}
	if got, _ := os.ReadFile(doc); !bytes.Equal(got, data) {
		t.Errorf("generate did not restore %s", first)
	}
}

func TestGenerateWritesNothing(t *testing.T) {
	t.Run("spec errors", func(t *testing.T) {
		dir := module(t, map[string]string{"idemgen.yaml": strings.Replace(goodSpec, "package: billing\n", "", 1)})
		t.Chdir(dir)
		code, _, errOut := run(t, "generate")
		if code != 1 || !strings.HasPrefix(errOut, "idemgen.yaml:1:1: spec: missing package") {
			t.Errorf("generate = %d, %q", code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "gen")); err == nil {
			t.Errorf("generate wrote output for a spec with errors")
		}
	})
	t.Run("user file in the way", func(t *testing.T) {
		dir := module(t, map[string]string{"idemgen.yaml": goodSpec})
		t.Chdir(dir)
		if code, _, errOut := run(t, "generate"); code != 0 {
			t.Fatalf("generate = %d, %s", code, errOut)
		}
		// The last generated Go file, so that a writer that did not check
		// everything first would already have written the others. (Not a
		// migration: the generator reads existing migrations as its own.)
		var mine string
		for _, p := range listed(t, "gen") {
			if strings.HasSuffix(p, ".go") {
				mine = p
			}
		}
		os.RemoveAll("gen")
		mustDo(t, os.MkdirAll(filepath.Dir(filepath.Join("gen", mine)), 0o755))
		mustDo(t, os.WriteFile(filepath.Join("gen", mine), []byte("// mine\n"), 0o644))

		code, _, errOut := run(t, "generate")
		want := "idemgen: " + filepath.Join("gen", filepath.FromSlash(mine)) + " exists and was not generated by idemgen"
		if code != 1 || !strings.HasPrefix(errOut, want) || !strings.HasSuffix(errOut, "idemgen: nothing was written\n") {
			t.Errorf("generate = %d, %q; want 1 and %q", code, errOut, want)
		}
		var n int
		mustDo(t, filepath.WalkDir("gen", func(_ string, d fs.DirEntry, _ error) error {
			if !d.IsDir() {
				n++
			}
			return nil
		}))
		if n != 1 {
			t.Errorf("gen holds %d files after a refusal, want only the user's", n)
		}
	})
}

func TestGenerateWarnsAndGenerates(t *testing.T) {
	dir := module(t, map[string]string{"idemgen.yaml": goodSpec + effectWithShortRetention})
	t.Chdir(dir)
	code, _, errOut := run(t, "generate")
	if code != 0 || !regexp.MustCompile(`^idemgen\.yaml:\d+:\d+: warning: `).MatchString(errOut) {
		t.Errorf("generate = %d, %q; want 0 and the warning", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "gen", writeout.ManifestName)); err != nil {
		t.Errorf("generate with only warnings wrote nothing: %v", err)
	}
}

func TestOutMustStayInTheModule(t *testing.T) {
	outside := t.TempDir()
	for name, tc := range map[string]struct {
		files map[string]string
		setup func(dir string) error
		want  string // regexp for stderr
	}{
		"dot-dot": {
			files: map[string]string{"idemgen.yaml": strings.Replace(goodSpec, "out: gen", "out: ../elsewhere", 1)},
			want:  `^idemgen\.yaml:3:6: out "\.\./elsewhere" `, // caught by the spec check or by outDir

		},
		"absolute": {
			files: map[string]string{"idemgen.yaml": strings.Replace(goodSpec, "out: gen", "out: /tmp/x", 1)},
			want:  `^idemgen\.yaml:3:6: out "/tmp/x" must be a relative path`,
		},
		"symlink": {
			files: map[string]string{"idemgen.yaml": strings.Replace(goodSpec, "out: gen", "out: link/gen", 1)},
			setup: func(dir string) error { return os.Symlink(outside, filepath.Join(dir, "link")) },
			want:  `^idemgen\.yaml:3:6: out "link/gen" resolves to .*, outside the Go module`,
		},
		"nested module": {
			files: map[string]string{"idemgen.yaml": goodSpec, "gen/go.mod": "module example.com/other\n"},
			want:  `^idemgen\.yaml:3:6: out "gen" is inside another Go module`,
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := module(t, tc.files)
			if tc.setup != nil {
				if err := tc.setup(dir); err != nil {
					t.Skip(err)
				}
			}
			t.Chdir(dir)
			for _, verb := range []string{"generate", "diff"} {
				code, _, errOut := run(t, verb)
				if code != 1 || !regexp.MustCompile(tc.want).MatchString(errOut) {
					t.Errorf("%s = %d, %q; want 1 and %s", verb, code, errOut, tc.want)
				}
			}
			if entries, _ := os.ReadDir(outside); len(entries) != 0 {
				t.Errorf("wrote outside the module: %v", entries)
			}
		})
	}

	t.Run("no module", func(t *testing.T) {
		dir := t.TempDir()
		mustDo(t, os.WriteFile(filepath.Join(dir, "idemgen.yaml"), []byte(goodSpec), 0o644))
		t.Chdir(dir)
		if code, _, errOut := run(t, "generate"); code != 1 || !strings.Contains(errOut, "no go.mod") {
			t.Errorf("generate = %d, %q", code, errOut)
		}
	})
}

// The -state values ledger's flags offer are the ones the runtime takes:
// the flags are defined where idemops is not linked (opsdoc.go).
func TestLedgerStatesAreOps(t *testing.T) {
	if !slices.Equal(ledgerStates, idemops.States) {
		t.Errorf("ledgerStates = %v, idemops.States = %v", ledgerStates, idemops.States)
	}
}

// TestSpecSourceIsRelativeToTheOutput: the spec path a generated file
// records is the spec seen from the output directory.
func TestSpecSourceIsRelativeToTheOutput(t *testing.T) {
	for _, c := range []struct{ file, dir, want string }{
		{"example/idemgen.yaml", "example/billing", "../idemgen.yaml"},
		{"idemgen.yaml", ".", "idemgen.yaml"},
		{"jobs/idemgen.yaml", "gen/jobs", "../../jobs/idemgen.yaml"},
	} {
		if got := specSource(c.file, c.dir); got != c.want {
			t.Errorf("specSource(%q, %q) = %q, want %q", c.file, c.dir, got, c.want)
		}
	}
}

// mustDo ends the test when a step of its set-up failed: a test whose
// files were never written would test something else.
func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
