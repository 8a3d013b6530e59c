package docs

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"golang.org/x/tools/go/packages"
)

// TestDocCommentsNameWhatExists: a doc comment in the runtime (idem/...)
// or the generator (generator/...) that names a Go identifier names one
// that exists, and a comment that cites a file cites one that exists.
// Go's doc comments carry no checked links, so a rename leaves "see
// ReserveMany" behind and a reader looks for it in vain.
//
// The rule, precise so that it reports no English word. Files that are
// generated are skipped. Of the others, doc comments are read (those go
// doc shows: a package's, a declaration's, a spec's, a field's), and only
// their prose: an indented line is a code block, which shows code of
// another package or code the generator emits, and text in backquotes is
// a quotation (SQL, YAML, a user's code), not a reference. A word of that
// prose is checked when it has a shape no English word has:
//
//   - qualified, X.Y or X.Y.Z, where X names a package (imported by the
//     file, the package itself, or the one module package of that name)
//     or a type of the package: then Y must be a member of that package,
//     or a field or method of that type (and Z a field or method of Y).
//     An X that is a variable, a parameter or nothing known (r.Header) is
//     not read, nor a word that ends as a file, host or module version
//     does (group.go, golang.org, yaml.v3) or that a slash touches.
//   - bare, with a lower-case letter before an upper-case one
//     (ReserveLeased, ErrBusy, awaitInFlight; not Report, Fetch, JSON, a
//     capitalized word at a sentence's start, or /vN in a path): it must
//     be declared somewhere in the package (at package level, as a field
//     or method of one of its types, or in a function: a parameter, a
//     local), at package level or as a field or method in a package the
//     file imports, or in the universe; in the generator, also in the
//     example's generated package billing, whose names the generator's
//     comments use for what it emits. Product names of that shape
//     (PostgreSQL, OpenTelemetry) are listed in properNouns.
//
// Every comment, not only doc comments, is read for file names ending in
// .go, .sql or .tmpl: a name with a directory must exist from the
// repository's root (when that directory is one of the repository's:
// river/client.go is River's), a bare name in the package's directory or
// in that of a module package the file imports.
func TestDocCommentsNameWhatExists(t *testing.T) {
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes |
			packages.NeedTypesInfo | packages.NeedImports,
		Dir: root,
	}
	pkgs, err := packages.Load(cfg, modulePath+"idem/...", modulePath+"generator/...", modulePath+"example/billing")
	if err != nil {
		t.Fatal(err)
	}
	// The generator's comments show what it emits, in the example's
	// names: what package billing declares counts as declared there.
	var emitted map[string]bool
	pkgs = slices.DeleteFunc(pkgs, func(p *packages.Package) bool {
		if p.PkgPath == modulePath+"example/billing" {
			emitted = packageMembers(p.Types)
			return true
		}
		return false
	})
	if len(emitted) == 0 {
		t.Fatal("package billing declares nothing; the example is not loaded")
	}
	byName := map[string][]*types.Package{} // module packages by name
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Fatalf("%s: %v", p.PkgPath, e)
		}
		byName[p.Name] = append(byName[p.Name], p.Types)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		t.Fatal(err)
	}
	var checked int
	for _, p := range pkgs {
		members := packageMembers(p.Types)
		for id := range p.TypesInfo.Defs {
			members[id.Name] = true // a parameter, a local, a label: in some scope of the package
		}
		if strings.HasPrefix(p.PkgPath, modulePath+"generator") {
			maps.Copy(members, emitted)
		}
		for _, f := range p.Syntax {
			if ast.IsGenerated(f) {
				continue
			}
			file := p.Fset.Position(f.Package).Filename
			imports := fileImports(p, f)
			known := maps.Clone(members)
			for _, imp := range imports {
				maps.Copy(known, packageMembers(imp))
			}
			dirs := []string{filepath.Dir(file)}
			for _, imp := range f.Imports {
				if rel, ok := strings.CutPrefix(strings.Trim(imp.Path.Value, `"`), modulePath); ok {
					dirs = append(dirs, filepath.Join(abs, filepath.FromSlash(rel)))
				}
			}
			for _, c := range f.Comments {
				for _, line := range c.List {
					for _, m := range goFile.FindAllStringIndex(line.Text, -1) {
						checked++
						if msg := fileExists(line.Text[m[0]:m[1]], dirs, abs); msg != "" {
							rel := strings.TrimPrefix(file, abs+"/")
							t.Errorf("%s:%d: comment cites %s, %s", rel, p.Fset.Position(line.Slash).Line, line.Text[m[0]:m[1]], msg)
						}
					}
				}
			}
			for _, doc := range docComments(f) {
				for _, ref := range references(p.Fset, doc) {
					checked++
					if msg := resolve(ref.text, p.Types, known, imports, byName); msg != "" {
						rel := strings.TrimPrefix(file, abs+"/")
						t.Errorf("%s:%d: doc comment names %s, %s", rel, p.Fset.Position(ref.pos).Line, ref.text, msg)
					}
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked %d names in doc comments; the walk is broken", checked)
	}
	t.Logf("checked %d names in the doc comments of %d packages", checked, len(pkgs))
}

// properNouns are words of the CamelCase shape that name products, not
// Go identifiers.
var properNouns = []string{"PostgreSQL", "OpenTelemetry", "GitHub", "JavaScript", "WebAssembly", "TiDB", "MySQL", "PgBouncer", "JetStream", "RabbitMQ"}

type ref struct {
	text string
	pos  token.Pos
}

// docComments returns the doc comments go doc shows: the package's, each
// declaration's, each spec's and each field's.
func docComments(f *ast.File) []*ast.CommentGroup {
	var out []*ast.CommentGroup
	add := func(g *ast.CommentGroup) {
		if g != nil {
			out = append(out, g)
		}
	}
	add(f.Doc)
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			add(n.Doc)
			return false // comments inside a body are no doc
		case *ast.GenDecl:
			add(n.Doc)
		case *ast.TypeSpec:
			add(n.Doc)
		case *ast.ValueSpec:
			add(n.Doc)
		case *ast.Field:
			add(n.Doc)
		}
		return true
	})
	return out
}

var (
	quoted    = regexp.MustCompile("`[^`]*`")
	qualified = regexp.MustCompile(`\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+`)
	bareWord  = regexp.MustCompile(`\b[A-Za-z]\w*`)
)

// references returns the identifier-shaped words of a doc comment's prose
// (see TestDocCommentsNameWhatExists for which).
func references(fset *token.FileSet, g *ast.CommentGroup) []ref {
	var out []ref
	for _, c := range g.List {
		text := c.Text
		switch {
		case strings.HasPrefix(text, "//"):
			text = text[2:]
		case strings.HasPrefix(text, "/*"):
			continue // block comments here are build notes, not docs
		}
		if strings.HasPrefix(text, "go:") || strings.HasPrefix(text, "\t") || strings.HasPrefix(text, "  ") {
			continue // a directive, or a code block
		}
		text = quoted.ReplaceAllStringFunc(text, func(q string) string { return strings.Repeat(" ", len(q)) })
		taken := make([]bool, len(text))
		for _, m := range qualified.FindAllStringIndex(text, -1) {
			word := text[m[0]:m[1]]
			for i := m[0]; i < m[1]; i++ {
				taken[i] = true
			}
			if m[0] > 0 && text[m[0]-1] == '/' || m[1] < len(text) && text[m[1]] == '/' || fileName(word) {
				continue // a path or a file name
			}
			out = append(out, ref{word, c.Slash + token.Pos(2+m[0])})
		}
		for _, m := range bareWord.FindAllStringIndex(text, -1) {
			if taken[m[0]] {
				continue
			}
			word := text[m[0]:m[1]]
			if m[0] > 0 && text[m[0]-1] == '/' {
				continue // part of a path: /vN
			}
			if !camel(word) || slices.Contains(properNouns, word) {
				continue
			}
			out = append(out, ref{word, c.Slash + token.Pos(2+m[0])})
		}
	}
	return out
}

// camel: a lower-case letter comes before an upper-case one.
func camel(word string) bool {
	lower := false
	for _, r := range word {
		switch {
		case unicode.IsLower(r):
			lower = true
		case unicode.IsUpper(r) && lower:
			return true
		}
	}
	return false
}

func fileImports(p *packages.Package, f *ast.File) map[string]*types.Package {
	out := map[string]*types.Package{}
	for _, spec := range f.Imports {
		path := strings.Trim(spec.Path.Value, `"`)
		imp := p.Imports[path]
		if imp == nil || imp.Types == nil {
			continue
		}
		name := imp.Types.Name()
		if spec.Name != nil {
			name = spec.Name.Name
		}
		out[name] = imp.Types
	}
	return out
}

// packageMembers returns every name declared in pkg: package-level
// objects and the fields and methods of its named types.
func packageMembers(pkg *types.Package) map[string]bool {
	out := map[string]bool{}
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		out[name] = true
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok {
			continue
		}
		for _, m := range fieldsAndMethods(tn.Type()) {
			out[m] = true
		}
	}
	return out
}

func fieldsAndMethods(t types.Type) []string {
	var out []string
	ms := types.NewMethodSet(types.NewPointer(t))
	for i := range ms.Len() {
		out = append(out, ms.At(i).Obj().Name())
	}
	if it, ok := t.Underlying().(*types.Interface); ok {
		for i := range it.NumMethods() {
			out = append(out, it.Method(i).Name())
		}
	}
	if st, ok := t.Underlying().(*types.Struct); ok {
		for i := range st.NumFields() {
			out = append(out, st.Field(i).Name())
		}
	}
	return out
}

// resolve says why text names nothing, or "" when it names something
// (or is not read).
func resolve(text string, pkg *types.Package, known map[string]bool, imports map[string]*types.Package, byName map[string][]*types.Package) string {
	parts := strings.Split(text, ".")
	if len(parts) == 1 {
		if known[text] || types.Universe.Lookup(text) != nil {
			return ""
		}
		return fmt.Sprintf("which neither package %s nor a package it imports declares", pkg.Name())
	}
	first, rest := parts[0], parts[1:]
	var target *types.Package
	switch {
	case imports[first] != nil:
		target = imports[first]
	case first == pkg.Name():
		target = pkg
	case len(byName[first]) == 1:
		target = byName[first][0]
	}
	if target != nil {
		obj := target.Scope().Lookup(rest[0])
		if obj == nil {
			return fmt.Sprintf("which package %s does not declare", target.Path())
		}
		return member(obj, rest[1:], text)
	}
	if obj, ok := pkg.Scope().Lookup(first).(*types.TypeName); ok {
		return member(obj, rest, text)
	}
	return "" // a variable, a parameter, a file name: not read
}

// member checks that names are fields or methods, each of the one before.
func member(obj types.Object, names []string, text string) string {
	for _, name := range names {
		tn, ok := obj.(*types.TypeName)
		if !ok {
			return "" // a field of a value: its type is not followed
		}
		next, _, _ := types.LookupFieldOrMethod(tn.Type(), true, obj.Pkg(), name)
		if next == nil {
			return fmt.Sprintf("but %s has no field or method %s", tn.Name(), name)
		}
		obj = next
	}
	return ""
}

// fileExtensions end the dotted words that name files, hosts and module
// versions (group.go, sqlc.yaml, golang.org, yaml.v3), not Go names.
var fileExtensions = regexp.MustCompile(`\.(go|mod|sum|yaml|yml|json|sql|tmpl|md|txt|txtar|patch|sh|org|com|io|dev|v[0-9]+)$`)

func fileName(word string) bool { return fileExtensions.MatchString(word) }

// goFile matches a file name a comment cites: a Go, SQL or template file,
// with or without its directories.
var goFile = regexp.MustCompile(`[\w./-]*[A-Za-z0-9]\.(?:go|sql|tmpl)\b`)

// fileExists says why a cited file is not there, or "". A name with a
// directory is read from the repository's root when its first directory
// is one of the repository's (another project's path, river/client.go,
// is not read); a bare name must be in the citing package's directory or
// in that of a package of this module the file imports.
func fileExists(name string, dirs []string, abs string) string {
	name = strings.TrimPrefix(name, modulePath)
	if strings.HasPrefix(name, "_") || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "/") {
		return "" // a suffix (_test.go) or part of a longer path
	}
	if dir, _, ok := strings.Cut(name, "/"); ok {
		if _, err := os.Stat(filepath.Join(abs, dir)); err != nil || dir == "" {
			return ""
		}
		if _, err := os.Stat(filepath.Join(abs, filepath.FromSlash(name))); err != nil {
			return "which is not in the repository"
		}
		return ""
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, name)); err == nil {
			return ""
		}
	}
	return "which is neither in this package's directory nor in an imported package's"
}
