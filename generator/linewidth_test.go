package generator_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemgen/idemgen/generator"
)

// maxGeneratedLine is the widest line idemgen may write into Go code a
// person reads (sqlc's files are sqlc's).
const maxGeneratedLine = 150

// TestGeneratedLinesAreReadable holds every Go line idemgen generated into
// the goldens and the example to maxGeneratedLine characters.
func TestGeneratedLinesAreReadable(t *testing.T) {
	var files int
	for _, root := range []string{filepath.Join("..", "testdata", "golden"), filepath.Join("..", "example")} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !bytes.HasPrefix(data, []byte(generator.Header+"\n")) {
				return nil
			}
			files++
			for i, line := range strings.Split(string(data), "\n") {
				if n := utf8.RuneCountInString(line); n > maxGeneratedLine {
					t.Errorf("%s:%d: %d characters, over %d: %.80s...", path, i+1, n, maxGeneratedLine, strings.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 20 {
		t.Fatalf("checked %d generated Go files; the goldens and the example hold more", files)
	}
}
