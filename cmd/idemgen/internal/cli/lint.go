package cli

import (
	"bytes"
	"cmp"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/ast/astutil"
	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/generator"
)

// runLint loads the packages with go/packages, runs idemgen's analyzers
// over them with the checker (which returns findings rather than exiting,
// unlike multichecker), and prints each finding, or with -fix applies the
// mechanical ones. Test files are not loaded: the analyzers leave them
// alone (lint's package doc says why).
func runLint(e Env, args []string) int {
	var o Options
	patterns, code, ok := ParseFlags(e, "lint", args, -1, &o)
	if !ok {
		return code
	}
	if len(patterns) == 0 {
		patterns = []string{"."}
	}
	cfg := &packages.Config{Mode: packages.LoadAllSyntax, Context: e.Ctx}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen lint: %v\n", err)
		return ExitUsage
	}
	failed := false
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, err := range p.Errors {
			fmt.Fprintln(e.Stderr, err)
			failed = true
		}
	})
	if failed {
		fmt.Fprintf(e.Stderr, "idemgen lint: packages do not load; nothing was checked\n")
		return ExitUsage
	}
	if len(pkgs) == 0 {
		fmt.Fprintf(e.Stderr, "idemgen lint: %s matched no packages\n", strings.Join(patterns, " "))
		return ExitUsage
	}
	graph, err := checker.Analyze(generator.Analyzers(), pkgs, nil)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen lint: %v\n", err)
		return ExitUsage
	}
	var findings []finding
	seen := map[string]bool{}
	for act := range graph.All() {
		if act.Err != nil {
			fmt.Fprintf(e.Stderr, "idemgen lint: %s: %v\n", act, act.Err)
			return ExitUsage
		}
		if !act.IsRoot {
			continue
		}
		for _, d := range act.Diagnostics {
			f := finding{pkg: act.Package, pos: act.Package.Fset.Position(d.Pos), d: d}
			if k := f.pos.String() + d.Message; !seen[k] {
				seen[k] = true
				findings = append(findings, f)
			}
		}
	}
	slices.SortFunc(findings, func(a, b finding) int {
		return cmp.Or(cmp.Compare(a.pos.Filename, b.pos.Filename), cmp.Compare(a.pos.Offset, b.pos.Offset), cmp.Compare(a.d.Message, b.d.Message))
	})
	if o.Fix {
		findings = applyFixes(e, findings)
	}
	wd, _ := os.Getwd()
	for _, f := range findings {
		fmt.Fprintf(e.Stderr, "%s:%d:%d: %s\n", relToWD(wd, f.pos.Filename), f.pos.Line, f.pos.Column, f.d.Message)
	}
	if len(findings) > 0 {
		return ExitFail
	}
	return ExitOK
}

// finding is one diagnostic with the package it was found in.
type finding struct {
	pkg *packages.Package
	pos token.Position
	d   analysis.Diagnostic
}

// lintHelp lists the checks for 'idemgen help lint'.
func lintHelp() string {
	var b strings.Builder
	for _, a := range generator.Analyzers() {
		title, rest, _ := strings.Cut(a.Doc, "\n\n")
		fmt.Fprintf(&b, "  %s: %s\n\n%s\n\n", a.Name, title, indent(indent(rest)))
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// applyFixes applies the first suggested fix of each finding that has one,
// file by file, skipping a fix whose edits overlap one already taken, and
// removes the imports the fixes left unused. It returns the findings it
// did not fix.
func applyFixes(e Env, findings []finding) []finding {
	type edit struct {
		start, end int
		text       []byte
	}
	edits := map[string][]edit{}
	pkgOf := map[string]*packages.Package{}
	var left []finding
	for _, f := range findings {
		if len(f.d.SuggestedFixes) == 0 {
			left = append(left, f)
			continue
		}
		var fix []edit
		var file string
		for _, te := range f.d.SuggestedFixes[0].TextEdits {
			tf := f.pkg.Fset.File(te.Pos)
			end := te.End
			if !end.IsValid() {
				end = te.Pos
			}
			file = tf.Name()
			fix = append(fix, edit{tf.Offset(te.Pos), tf.Offset(end), te.NewText})
		}
		overlaps := slices.ContainsFunc(fix, func(a edit) bool {
			return slices.ContainsFunc(edits[file], func(b edit) bool { return a.start < b.end && b.start < a.end })
		})
		if overlaps {
			left = append(left, f)
			continue
		}
		edits[file] = append(edits[file], fix...)
		pkgOf[file] = f.pkg
	}
	for file, es := range edits {
		src, err := os.ReadFile(file)
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen lint: %v\n", err)
			continue
		}
		slices.SortFunc(es, func(a, b edit) int { return cmp.Compare(b.start, a.start) })
		out := bytes.Clone(src)
		for _, ed := range es {
			out = slices.Concat(out[:ed.start], ed.text, out[ed.end:])
		}
		out, err = dropUnusedImports(file, out, importNames(pkgOf[file], file))
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen lint: %s: fixed code does not format: %v\n", file, err)
			continue
		}
		if err := os.WriteFile(file, out, 0o644); err != nil {
			fmt.Fprintf(e.Stderr, "idemgen lint: %v\n", err)
		}
	}
	return left
}

// importNames maps the import paths of file to the package names they
// bind, from the type checker: the last path element is no safe guess
// (math/rand/v2 is rand).
func importNames(pkg *packages.Package, file string) map[string]string {
	names := map[string]string{}
	for _, f := range pkg.Syntax {
		if pkg.Fset.File(f.Pos()).Name() != file {
			continue
		}
		for _, spec := range f.Imports {
			var obj types.Object
			if spec.Name != nil {
				obj = pkg.TypesInfo.Defs[spec.Name]
			} else {
				obj = pkg.TypesInfo.Implicits[spec]
			}
			path, _ := strconv.Unquote(spec.Path.Value)
			if pn, ok := obj.(*types.PkgName); ok {
				names[path] = pn.Name()
			}
		}
	}
	return names
}

// dropUnusedImports removes the imports whose package name no longer
// appears in src, and formats it.
func dropUnusedImports(file string, src []byte, names map[string]string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if sel, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := sel.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	for _, spec := range slices.Clone(f.Imports) {
		path, _ := strconv.Unquote(spec.Path.Value)
		name, explicit := names[path], ""
		if spec.Name != nil {
			explicit = spec.Name.Name
		}
		if name == "" || explicit == "_" || explicit == "." || used[name] {
			continue
		}
		astutil.DeleteNamedImport(fset, f, explicit, path)
	}
	var b bytes.Buffer
	if err := format.Node(&b, fset, f); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// IsVetTool reports whether args are go vet's, calling idemgen as a
// -vettool: the unitchecker protocol's -V=full and -flags queries, or
// analyzer flags and a .cfg file describing one package.
func IsVetTool(args []string) bool {
	if len(args) == 0 || generator.IsSQLCChild() {
		return false
	}
	if _, verb := lookup(args[0]); verb {
		return false
	}
	return args[0] == "-V=full" || args[0] == "-flags" || filepath.Ext(args[len(args)-1]) == ".cfg"
}
