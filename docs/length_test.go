package docs

import (
	"os"
	"strings"
	"testing"
)

// The inner loop and the changelog are read in a minute or not at all:
// docs/development.md stays within 150 lines and the CHANGELOG's
// [Unreleased] within 80 (history goes to docs/benchmarks.md and the
// commits).
func TestShortPagesStayShort(t *testing.T) {
	dev, err := os.ReadFile("development.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(dev), "\n"); n > 150 {
		t.Errorf("docs/development.md is %d lines, more than 150: move the detail to the page it belongs to", n)
	}
	log, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	_, unreleased, _ := strings.Cut(string(log), "## [Unreleased]\n")
	unreleased, _, _ = strings.Cut(unreleased, "\n## [")
	if n := strings.Count(unreleased, "\n"); n > 80 {
		t.Errorf("CHANGELOG.md's [Unreleased] is %d lines, more than 80: one sentence per change", n)
	}
}
