package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	sqlccli "github.com/sqlc-dev/sqlc/pkg/cli"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/schema"
)

// TestMain lets this test binary serve as the sqlc child that generation
// starts.
func TestMain(m *testing.M) {
	generator.LinkSQLC(sqlccli.Run)
	if generator.IsSQLCChild() {
		os.Exit(generator.SQLCMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// root is the repository, seen from this package's directory.
const root = ".."

// modulePath is idemgen's module; a path named under it is a repository path.
const modulePath = "github.com/idemgen/idemgen/"

// fragmentMark, on the line before a ```yaml block, says the block is part
// of a spec and is not checked as a whole one.
const fragmentMark = "<!-- fragment -->"

// page is one Markdown file, split into the text outside fenced code
// blocks (code lines blanked, so line numbers hold) and its blocks.
type page struct {
	path   string // relative to root, slash-separated
	prose  []string
	blocks []block
}

type block struct {
	lang     string
	line     int // line of the opening fence, 1-based
	text     string
	fragment bool
}

func readPage(t *testing.T, rel string) page {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	p := page{path: rel}
	var cur *block
	var body strings.Builder
	prev := "" // the last non-blank prose line
	for i, line := range strings.Split(string(data), "\n") {
		fence := strings.HasPrefix(strings.TrimSpace(line), "```")
		switch {
		case cur == nil && fence:
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "```")), line: i + 1,
				fragment: strings.TrimSpace(prev) == fragmentMark}
			body.Reset()
			p.prose = append(p.prose, "")
		case cur != nil && fence:
			cur.text = body.String()
			p.blocks = append(p.blocks, *cur)
			cur = nil
			p.prose = append(p.prose, "")
		case cur != nil:
			body.WriteString(line + "\n")
			p.prose = append(p.prose, "")
		default:
			p.prose = append(p.prose, line)
			if strings.TrimSpace(line) != "" {
				prev = line
			}
		}
	}
	if cur != nil {
		t.Errorf("%s:%d: code block never closed", rel, cur.line)
	}
	return p
}

// pages returns docs/*.md and, with readme, the project's README.md.
func pages(t *testing.T, readme bool) []page {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no Markdown pages in docs/")
	}
	var out []page
	for _, n := range names {
		out = append(out, readPage(t, "docs/"+n))
	}
	if readme {
		out = append(out, readPage(t, "README.md"))
	}
	return out
}

// schemaKeys returns every property key declared anywhere in the JSON Schema.
func schemaKeys(t *testing.T) []string {
	t.Helper()
	var doc any
	if err := json.Unmarshal(schema.JSON(), &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				for k := range props {
					keys[k] = true
				}
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(doc)
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestSchemaKeysAreDocumented: every key the schema knows is named, as
// `key`, in docs/spec.md.
func TestSchemaKeysAreDocumented(t *testing.T) {
	keys := schemaKeys(t)
	if len(keys) < 30 {
		t.Fatalf("found %d keys in the schema; the walk is broken", len(keys))
	}
	p := readPage(t, "docs/spec.md")
	prose := strings.Join(p.prose, "\n")
	for _, k := range keys {
		if !strings.Contains(prose, "`"+k+"`") {
			t.Errorf("docs/spec.md does not document the spec key `%s` (schema/idemgen.schema.json has it)", k)
		}
	}
}

var topLevelVersion = regexp.MustCompile(`(?m)^version:`)

// TestSpecExamples: every ```yaml block in docs/ is a full spec (it has a
// top-level version key) that passes vet without a finding and generates,
// or is marked as a fragment.
func TestSpecExamples(t *testing.T) {
	type example struct {
		name string // FILE:LINE of the block
		line int
		text string
	}
	var full []example
	for _, p := range pages(t, false) {
		for _, b := range p.blocks {
			if b.lang != "yaml" || b.fragment {
				continue
			}
			name := fmt.Sprintf("%s:%d", p.path, b.line)
			if !topLevelVersion.MatchString(b.text) {
				t.Errorf("%s: a yaml block that is not a full spec (no top-level version:); put %s on the line before it, or complete it", name, fragmentMark)
				continue
			}
			full = append(full, example{name, b.line, b.text})
		}
	}
	if len(full) == 0 {
		t.Fatal("no full spec in docs/; the examples are not checked")
	}
	for _, ex := range full {
		t.Run(strings.ReplaceAll(ex.name, "/", "_"), func(t *testing.T) {
			t.Parallel()
			f, ds := generator.ParseSpec(ex.name, []byte(ex.text))
			for _, d := range ds.Sorted() {
				// A position in the block is a line of the page.
				file, _, _ := strings.Cut(ex.name, ":")
				t.Errorf("%s:%d:%d: %s", file, ex.line+d.Pos.Line, d.Pos.Col, d.Msg)
			}
			if len(ds) > 0 {
				return
			}
			files, err := generator.Generate(context.Background(), f, generator.Options{
				SQLC:       generator.SQLCExe(os.Args[0]),
				ImportPath: "example.com/docs/" + f.Package.Value,
			})
			if err != nil {
				t.Fatalf("%s: generate: %v", ex.name, err)
			}
			for _, j := range f.Jobs {
				name := "idemgen_" + j.Name.Value + ".go"
				if !bytes.HasPrefix(files[name], []byte(generator.Header)) {
					t.Errorf("%s: generate wrote no %s", ex.name, name)
				}
			}
		})
	}
}

// TestLinksAndPaths: every relative link in docs/*.md and README.md leads
// to a file (and a heading, for #anchors), and every repository path they
// name in backticks exists.
func TestLinksAndPaths(t *testing.T) {
	tops := topLevel(t)
	for _, p := range pages(t, true) {
		dir := path.Dir(p.path)
		for i, line := range p.prose {
			at := fmt.Sprintf("%s:%d", p.path, i+1)
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				rel := p.path
				if file != "" {
					rel = path.Clean(path.Join(dir, file))
				}
				checkTarget(t, at, target, rel, anchor)
			}
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				rel, ok := repoPath(m[1], tops)
				if ok && !exists(rel) {
					t.Errorf("%s: `%s` names %s, which is not in the repository", at, m[1], rel)
				}
			}
		}
	}
}

// TestGoCommentsCiteDocsThatExist: a docs/ path named in the Go code of
// the generator, the runtime, the templates or the command (a comment, or
// a comment the generator emits) exists, and so does its #anchor.
func TestGoCommentsCiteDocsThatExist(t *testing.T) {
	var cited int
	for _, dir := range []string{"generator", "idem", "templates", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") {
				return err
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(data), "\n") {
				for _, m := range docsCitation.FindAllStringSubmatch(line, -1) {
					cited++
					rel, _ := filepath.Rel(root, p)
					checkTarget(t, fmt.Sprintf("%s:%d", filepath.ToSlash(rel), i+1), m[1]+m[2], m[1], strings.TrimPrefix(m[2], "#"))
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if cited == 0 {
		t.Error("no Go file cites docs/; the generated crash-simulation tests should cite docs/guarantees.md")
	}
}

// unshipped are files that live outside the repository; nothing the
// project ships may send a reader to them.
var unshipped = regexp.MustCompile(`\b(SPEC|CRASHSIM|STYLE)\.md\b|templates/idemrt/crashsim\.go|\.\./shared\b`)

// TestNothingCitesUnshippedFiles: the reference ships in docs/; no file
// of the repository points at a document users never get.
func TestNothingCitesUnshippedFiles(t *testing.T) {
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		switch path.Ext(rel) {
		case ".go", ".md", ".yaml", ".txtar", ".sql", ".json", ".tmpl":
		default:
			return nil
		}
		if rel == "docs/docs_test.go" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if m := unshipped.FindString(line); m != "" {
				t.Errorf("%s:%d: cites %s, which users never get; point at docs/ instead", rel, i+1, m)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

var (
	mdLink       = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	inlineCode   = regexp.MustCompile("`([^`\\s]+)`")
	docsCitation = regexp.MustCompile(`(?:^|[^\w./-]|github\.com/idemgen/idemgen/)(docs/[\w./-]*\w)(#[\w-]+)?`)
)

// checkTarget reports a link target (rel, relative to root) that does not
// exist, or whose anchor is no heading of it.
func checkTarget(t *testing.T, at, target, rel, anchor string) {
	t.Helper()
	if !exists(rel) {
		t.Errorf("%s: link %s: %s does not exist", at, target, rel)
		return
	}
	if anchor == "" {
		return
	}
	if !strings.HasSuffix(rel, ".md") {
		t.Errorf("%s: link %s: an anchor into %s, which is not Markdown", at, target, rel)
		return
	}
	if !slices.Contains(anchors(t, rel), anchor) {
		t.Errorf("%s: link %s: %s has no heading #%s", at, target, rel, anchor)
	}
}

// anchors returns the heading anchors GitHub gives a Markdown file.
func anchors(t *testing.T, rel string) []string {
	t.Helper()
	p := readPage(t, rel)
	seen := map[string]int{}
	var out []string
	for _, line := range p.prose {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := strings.Map(func(r rune) rune {
			switch {
			case r == ' ':
				return '-'
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				return unicode.ToLower(r)
			}
			return -1
		}, text)
		if n := seen[slug]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", slug, n))
		} else {
			out = append(out, slug)
		}
		seen[slug]++
	}
	return out
}

// topLevel returns the names of the repository's top-level directories.
func topLevel(t *testing.T) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	tops := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() && e.Name() != ".git" {
			tops[e.Name()] = true
		}
	}
	return tops
}

// repoPath reads the text of a code span as a path in the repository:
// one under a top-level directory (example/idemgen.yaml, ./example,
// github.com/idemgen/idemgen/idem/crashsim). Patterns and placeholders
// (./..., <dialect>, {a,b}, *) name no single path.
func repoPath(s string, tops map[string]bool) (string, bool) {
	s = strings.TrimPrefix(s, modulePath)
	s = strings.TrimPrefix(s, "./")
	if strings.ContainsAny(s, "<>{}*$?=,:()[]\"'") || strings.Contains(s, "...") {
		return "", false
	}
	first, _, ok := strings.Cut(s, "/")
	if !ok || !tops[first] {
		return "", false
	}
	return strings.TrimSuffix(s, "/"), true
}

func exists(rel string) bool {
	_, err := os.Stat(filepath.Join(root, filepath.FromSlash(rel)))
	return err == nil
}

// TestREADMECommandsAreCIs: the README's two commands (the example, then
// the tests) are run by .ci/run exactly as the README writes them, so a
// newcomer's command and CI's never drift apart.
func TestREADMECommandsAreCIs(t *testing.T) {
	readme := readPage(t, "README.md")
	var commands []string
	for _, b := range readme.blocks {
		if b.lang != "sh" || !strings.Contains(strings.Join(readme.prose[:b.line], "\n"), "## Two commands") {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(b.text), "\n") {
			cmd, _, _ := strings.Cut(line, "#")
			commands = append(commands, strings.TrimSpace(cmd))
		}
		break
	}
	if len(commands) != 2 || commands[0] != "go run ./example" || !strings.HasPrefix(commands[1], "go test ") {
		t.Fatalf("README.md's \"Two commands\" block reads %q; want the example's go run, then a go test", commands)
	}
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(ci), "\n")
	for _, cmd := range commands {
		if !slices.Contains(lines, cmd) {
			t.Errorf(".ci/run has no line %q, the README's command", cmd)
		}
	}
}
