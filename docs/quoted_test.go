package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// goBlockThenLink is a ```go block whose code is a whole function, and the
// first link to a .go file after it: the file it is quoted from.
var goBlockThenLink = regexp.MustCompile("(?s)```go\n(func .*?)```.*?\\]\\(\\.\\./([^)]+\\.go)\\)")

// TestQuotedGoIsCompiled: a function a page shows is quoted, verbatim, from
// the Go file the page links to next, so it compiles and is tested there
// (docs/runtime.md's modelling answers: testdata/golden/modelling/handler.go).
func TestQuotedGoIsCompiled(t *testing.T) {
	quoted := 0
	for _, page := range []string{"runtime.md"} {
		data, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range goBlockThenLink.FindAllStringSubmatch(string(data), -1) {
			src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m[2])))
			if err != nil {
				t.Fatalf("%s: %v", page, err)
			}
			if !strings.Contains(string(src), m[1]) {
				t.Errorf("%s: the function shown before the link to %s is not in that file as shown:\n%s", page, m[2], m[1])
			}
			quoted++
		}
	}
	if quoted == 0 {
		t.Fatal("no quoted function found: the pattern no longer matches the pages")
	}
}
