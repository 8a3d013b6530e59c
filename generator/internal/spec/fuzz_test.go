package spec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds arbitrary bytes to Parse and Check: neither may panic,
// and every diagnostic must say which file and where.
func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join(badDir, "*.yaml"))
	seeds = append(seeds, "../../../example/idemgen.yaml")
	for _, path := range seeds {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, ds := Parse("fuzz.yaml", data)
		if file == nil {
			t.Fatal("Parse returned a nil File")
		}
		// Check must survive whatever Parse salvaged, errors or not.
		all := append(ds, Check(file)...)
		for _, d := range all {
			if d.File != "fuzz.yaml" || d.Pos.Line < 0 || d.Pos.Col < 0 || d.Msg == "" {
				t.Fatalf("malformed diagnostic %#v", d)
			}
			// Parse turns a yaml panic into a diagnostic; the fuzzer must
			// still see it as the crash it is.
			if strings.HasPrefix(d.Msg, internalError) {
				t.Fatalf("recovered panic: %s", d.Msg)
			}
		}
		_ = all.Sorted().Error()
	})
}
