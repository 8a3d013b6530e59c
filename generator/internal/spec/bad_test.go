package spec

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/bad/*.stderr from the current output")

const badDir = "../../../testdata/bad"

// diagnose runs what vet runs: Parse, then Check on what it read.
func diagnose(name string, data []byte) Diagnostics {
	f, ds := Parse(name, data)
	return append(ds, Check(f)...).Sorted()
}

func render(ds Diagnostics) []byte {
	var b bytes.Buffer
	for _, d := range ds {
		b.WriteString(d.String())
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// TestBad is the contract for diagnostics: each bad spec's exact output.
func TestBad(t *testing.T) {
	specs, err := filepath.Glob(filepath.Join(badDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) < 40 {
		t.Fatalf("found %d bad specs under %s, want at least 40", len(specs), badDir)
	}
	for _, path := range specs {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ds := diagnose(name, data)
			if !ds.HasErrors() && !strings.HasPrefix(name, "warn_") {
				t.Errorf("%s: no errors; a bad spec must be rejected (name it warn_*.yaml if it only warns)", name)
			}
			got := render(ds)
			golden := strings.TrimSuffix(path, ".yaml") + ".stderr"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./generator/internal/spec -run TestBad -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: diagnostics differ\n--- got\n%s--- want\n%s", name, got, want)
			}
		})
	}
}

// TestBadGenerated covers inputs too big or too binary to commit.
func TestBadGenerated(t *testing.T) {
	valid, err := os.ReadFile("../../../example/idemgen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	big := append(bytes.Clone(valid), []byte("\n# "+strings.Repeat("x", 2<<20)+"\n")...)
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"big.yaml", big, fmt.Sprintf("big.yaml: spec is %d bytes; the limit is 1048576\n", len(big))},
		{"empty.yaml", nil, "empty.yaml:1:1: spec is empty\n"},
		{"comments.yaml", []byte("# nothing here\n"), "comments.yaml:1:1: spec is empty\n"},
		{"nul.yaml", []byte("version: 1\x00\n"), ""},
	} {
		got := string(render(diagnose(tc.name, tc.data)))
		if tc.want == "" {
			if got == "" {
				t.Errorf("%s: accepted", tc.name)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s:\n got %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
