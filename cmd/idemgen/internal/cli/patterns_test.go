package cli

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// tree writes files (slash paths, relative to dir) into dir.
func tree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestMatchSpecs(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, map[string]string{
		"go.mod":                            "module example.com/m // the service\n\ngo 1.26\n",
		"jobs/idemgen.yaml":                 goodSpec,
		"jobs/billing/idemgen.yaml":         goodSpec,
		"jobs/empty/.keep":                  "",
		"testdata/golden/one/idemgen.yaml":  goodSpec,
		"vendor/example.com/v/idemgen.yaml": goodSpec,
		".hidden/idemgen.yaml":              goodSpec,
		"_skip/idemgen.yaml":                goodSpec,
		"nested/go.mod":                     "module example.com/nested\n",
		"nested/idemgen.yaml":               goodSpec,
		"ws/go.mod":                         "module \"example.com/ws\"\n",
		"ws/idemgen.yaml":                   goodSpec,
	})
	t.Chdir(dir)
	t.Setenv("GOWORK", "")
	j := filepath.FromSlash
	for _, tc := range []struct {
		patterns []string
		want     []string
		err      string
	}{
		{[]string{"./..."}, []string{j("jobs/billing/idemgen.yaml"), j("jobs/idemgen.yaml")}, ""},
		{[]string{"..."}, []string{j("jobs/billing/idemgen.yaml"), j("jobs/idemgen.yaml")}, ""},
		{[]string{"./jobs"}, []string{j("jobs/idemgen.yaml")}, ""},
		{[]string{"./jobs/...", "./jobs"}, []string{j("jobs/billing/idemgen.yaml"), j("jobs/idemgen.yaml")}, ""},
		{[]string{"example.com/m/jobs/..."}, []string{j("jobs/billing/idemgen.yaml"), j("jobs/idemgen.yaml")}, ""},
		{[]string{"example.com/m/jobs/billing"}, []string{j("jobs/billing/idemgen.yaml")}, ""},
		// Named explicitly, skipped trees and other modules are searched.
		{[]string{"./testdata/golden/..."}, []string{j("testdata/golden/one/idemgen.yaml")}, ""},
		{[]string{"./nested"}, []string{j("nested/idemgen.yaml")}, ""},
		{[]string{"./nope/..."}, nil, `pattern "./nope/...": no directory ./nope`},
		{[]string{"./jobs/empty"}, nil, `pattern "./jobs/empty" matched no idemgen.yaml`},
		{[]string{"./jobs/empty/..."}, nil, `pattern "./jobs/empty/..." matched no idemgen.yaml`},
		{[]string{"jobs/idemgen.yaml"}, nil, "jobs/idemgen.yaml is a file, not a package pattern; name a spec file with -f jobs/idemgen.yaml"},
		{[]string{"./jobs/.../x"}, nil, `pattern "./jobs/.../x": only a trailing /... is supported`},
		{[]string{"example.com/other/..."}, nil, `pattern "example.com/other/...": not a directory (./example.com/other) and not in the main module or a go.work module`},
	} {
		got, err := matchSpecs(tc.patterns)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.patterns, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q = %q, %v; want %q", tc.patterns, got, err, tc.want)
		}
	}

	// A go.work that uses ws brings it into ./... and its import paths
	// into reach; nested stays out. GOWORK=off turns it off again.
	tree(t, dir, map[string]string{"go.work": "go 1.26\n\nuse (\n\t.\n\t./ws\n)\n"})
	want := []string{j("jobs/billing/idemgen.yaml"), j("jobs/idemgen.yaml"), j("ws/idemgen.yaml")}
	if got, err := matchSpecs([]string{"./..."}); err != nil || !slices.Equal(got, want) {
		t.Errorf("./... in a workspace = %q, %v; want %q", got, err, want)
	}
	if got, err := matchSpecs([]string{"example.com/ws/..."}); err != nil || !slices.Equal(got, want[2:]) {
		t.Errorf("example.com/ws/... in a workspace = %q, %v; want %q", got, err, want[2:])
	}
	t.Setenv("GOWORK", "off")
	if got, err := matchSpecs([]string{"./..."}); err != nil || !slices.Equal(got, want[:2]) {
		t.Errorf("./... with GOWORK=off = %q, %v; want %q", got, err, want[:2])
	}
}

// TestModuleFromGoMod: the module path comes from modfile, quoted paths
// and comments included, and generated code is imported by it.
func TestModuleFromGoMod(t *testing.T) {
	dir := t.TempDir()
	tree(t, dir, map[string]string{"go.mod": "// the service\nmodule \"example.com/quoted\" // v2 soon\n\ngo 1.26\n\ntool example.com/x\n"})
	m, ok, err := findModule(filepath.Join(dir, "a", "b"))
	if err != nil || !ok || m.Path != "example.com/quoted" || m.Root != dir {
		t.Errorf("findModule = %+v, %v, %v", m, ok, err)
	}
	tree(t, dir, map[string]string{"bad/go.mod": "go 1.26\n"})
	if _, _, err := findModule(filepath.Join(dir, "bad")); err == nil || !strings.Contains(err.Error(), "has no module directive") {
		t.Errorf("findModule without a module directive: %v", err)
	}
}

func TestVersionFromBuildInfo(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"go install @v1.2.3", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "v1.2.3"}}, "v1.2.3"},
		{"checkout", &debug.BuildInfo{Main: debug.Module{Path: modulePath, Version: "(devel)"}}, "(devel)"},
		{"go tool in a service", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/svc", Version: "(devel)"},
			Deps: []*debug.Module{{Path: "github.com/jackc/pgx/v5", Version: "v5.12.0"}, {Path: modulePath, Version: "v1.4.0"}},
		}, "v1.4.0"},
		{"replaced by a directory", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/svc", Version: "(devel)"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "../idemgen"}}},
		}, "(devel)"},
		{"replaced by a fork", &debug.BuildInfo{
			Main: debug.Module{Path: "example.com/svc", Version: "(devel)"},
			Deps: []*debug.Module{{Path: modulePath, Version: "v1.4.0", Replace: &debug.Module{Path: "example.com/fork", Version: "v1.4.1"}}},
		}, "v1.4.1"},
		{"no build info", nil, "(devel)"},
	} {
		if got := version(tc.bi); got != tc.want {
			t.Errorf("%s: version = %q, want %q", tc.name, got, tc.want)
		}
	}
}
