package generator

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
)

// Bump is a version that the spec raises over the generated code in the
// output directory: an effect's, or (Effect "") a job's. The next runs do
// work again because of it, on purpose; Note says what.
type Bump struct {
	Pos      spec.Pos // the version's position in the spec
	Job      string
	Effect   string
	From, To int
	Note     string
}

// Bumps compares the job and effect versions of a checked spec with those
// of the generated code in existing, the output directory (nil: none), and
// returns every version the spec raises, in spec order. A job or effect the
// generated code does not have yet is no bump, and neither is a version
// lowered.
//
// The old versions are read back from the generated Go itself, the
// idemrt.Job literal that every generated job file builds (Name and Version,
// and the same of each idemrt.Effect in it): it is what the deployed package
// runs with, and output written by any earlier idemgen has it.
func Bumps(existing fs.FS, f *Spec) []Bump {
	if existing == nil {
		return nil
	}
	old := generatedVersions(existing)
	if len(old) == 0 {
		return nil
	}
	p, err := model.Resolve(f)
	if err != nil {
		return nil
	}
	var bumps []Bump
	for i, j := range p.Jobs {
		was, ok := old[j.Name]
		if !ok {
			continue
		}
		sj := &f.Jobs[i]
		if was.version > 0 && j.Version > was.version {
			bumps = append(bumps, Bump{Pos: sj.Version.Pos, Job: j.Name, From: was.version, To: j.Version, Note: jobBumpNote(j, was.version)})
		}
		for k, e := range j.Effects {
			from, ok := was.effects[e.Name]
			if !ok || e.Version <= from {
				continue
			}
			bumps = append(bumps, Bump{Pos: sj.Effects[k].Version.Pos, Job: j.Name, Effect: e.Name, From: from, To: e.Version, Note: effectBumpNote(j, e, from)})
		}
	}
	return bumps
}

// effectBumpNote says what an effect's new version makes the next runs
// perform again: the runtime owes the new version once to every unit that
// an earlier one was owed for, when the unit is processed again.
func effectBumpNote(j *model.Job, e *model.Effect, from int) string {
	what := fmt.Sprintf("job %q: effect %q version %d to %d: ", j.Name, e.Name, from, e.Version)
	if !strings.Contains(e.Key.Text, "{version}") {
		return what + fmt.Sprintf("its key %q has no {version}, so the key stays the same and nothing is performed again (put {version} in the key to perform it again)", e.Key.Text)
	}
	key := fmt.Sprintf("under key version %d (%s)", e.Version, strings.ReplaceAll(e.Key.Text, "{version}", strconv.Itoa(e.Version)))
	history := fmt.Sprintf("; units done under v%d stay as history", from)
	switch j.Source {
	case model.SourceWatermark:
		return what + fmt.Sprintf("the next Run re-performs %s once for every unit it reads again in its overlap (the %s behind the mark) that was owed it before, and a Backfill for every such unit in the window it is given, %s", e.Name, shortDuration(j.Overlap), key) + history
	case model.SourceCursor:
		return what + fmt.Sprintf("Process re-performs %s once for every unit handed to it that was owed it before, %s (Run does not go back)", e.Name, key) + history
	}
	return what + fmt.Sprintf("units handed in from now on get %s %s; handed-in units have no Backfill", e.Name, key) + history
}

// jobBumpNote says what a job's new version makes the next runs do again:
// rewrite the rows an older version wrote, and perform again only the
// effects whose key holds {job_version}.
func jobBumpNote(j *model.Job, from int) string {
	what := fmt.Sprintf("job %q version %d to %d: ", j.Name, from, j.Version)
	switch {
	case j.Dest == nil:
		what += "the job writes no rows"
	case j.Dest.Write == model.InsertOnce:
		what += fmt.Sprintf("rows already in %s stay as they are (write: insert_once); %s.Stale lists those written under v%d", j.Dest.Table, j.GoName, from)
	case j.Source == model.SourceWatermark:
		what += fmt.Sprintf("the next Run rewrites the %s rows written under v%d that it reads again in its overlap (the %s behind the mark), and a Backfill those in the window it is given (%s.Stale lists them)", j.Dest.Table, from, shortDuration(j.Overlap), j.GoName)
	default:
		what += fmt.Sprintf("Process rewrites the %s rows of the units handed to it (%s.Stale lists those written under v%d)", j.Dest.Table, j.GoName, from)
	}
	var again []string
	for _, e := range j.Effects {
		if strings.Contains(e.Key.Text, "{job_version}") {
			again = append(again, fmt.Sprintf("%s (when: %s)", e.Name, e.When))
		}
	}
	if len(again) == 0 {
		return what + "; no effect is performed again"
	}
	return what + fmt.Sprintf("; %s, whose key holds {job_version}, is performed once more under the new key for every unit whose write decides it; units done under v%d stay as history",
		strings.Join(again, " and "), from)
}

// shortDuration writes d as a spec would: 10m, not 10m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// jobVersions are one generated job's version and its effects' versions.
type jobVersions struct {
	version int
	effects map[string]int
}

// generatedVersions reads the versions of every job that the generated,
// non-test Go files of dir build. A file that does not parse says nothing:
// generate replaces it anyway.
func generatedVersions(dir fs.FS) map[string]jobVersions {
	entries, err := fs.ReadDir(dir, ".")
	if err != nil {
		return nil
	}
	out := map[string]jobVersions{}
	for _, ent := range entries {
		name := ent.Name()
		if ent.IsDir() || path.Ext(name) != ".go" || strings.HasSuffix(name, "_test.go") {
			continue
		}
		data, err := fs.ReadFile(dir, name)
		if err != nil || !bytes.HasPrefix(data, []byte(Header+"\n")) {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), name, data, parser.SkipObjectResolution)
		if err != nil {
			continue
		}
		// idemrt.Job since the runtime's contract moved there; idem.Job in
		// files generated before.
		idem := importName(file, "github.com/idemgen/idemgen/idem/idemrt")
		if idem == "" {
			idem = importName(file, "github.com/idemgen/idemgen/idem")
		}
		if idem == "" {
			continue
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isIdemType(lit.Type, idem, "Job") {
				return true
			}
			job, v := literalVersion(lit)
			if job == "" {
				return true
			}
			jv := jobVersions{version: v, effects: map[string]int{}}
			if effects, ok := field(lit, "Effects").(*ast.CompositeLit); ok {
				for _, elt := range effects.Elts {
					if el, ok := elt.(*ast.CompositeLit); ok {
						if effect, v := literalVersion(el); effect != "" && v > 0 {
							jv.effects[effect] = v
						}
					}
				}
			}
			out[job] = jv
			return false
		})
	}
	return out
}

// importName is the name file refers to the package at importPath by, or "".
func importName(file *ast.File, importPath string) string {
	for _, imp := range file.Imports {
		if p, err := strconv.Unquote(imp.Path.Value); err != nil || p != importPath {
			continue
		}
		if imp.Name != nil {
			return imp.Name.Name
		}
		return path.Base(importPath)
	}
	return ""
}

// isIdemType reports whether t is pkg.name[...], the generic type name of
// the runtime's package instantiated with a unit type.
func isIdemType(t ast.Expr, pkg, name string) bool {
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	sel, ok := t.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != name {
		return false
	}
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == pkg
}

// literalVersion returns the Name and Version fields of a job or effect
// literal: "" when Name is no string literal, 0 when Version is no
// integer literal.
func literalVersion(lit *ast.CompositeLit) (string, int) {
	nameLit, ok := field(lit, "Name").(*ast.BasicLit)
	if !ok || nameLit.Kind != token.STRING {
		return "", 0
	}
	name, err := strconv.Unquote(nameLit.Value)
	if err != nil {
		return "", 0
	}
	v := 0
	if vLit, ok := field(lit, "Version").(*ast.BasicLit); ok && vLit.Kind == token.INT {
		v, _ = strconv.Atoi(vLit.Value)
	}
	return name, v
}

// field returns the value of the keyed element key of lit, or nil.
func field(lit *ast.CompositeLit, key string) ast.Expr {
	for _, elt := range lit.Elts {
		kv, ok := elt.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if id, ok := kv.Key.(*ast.Ident); ok && id.Name == key {
			return kv.Value
		}
	}
	return nil
}
