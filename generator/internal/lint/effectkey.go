package lint

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// EffectKey checks that each effect implementation hands its idempotency
// key on to the provider unchanged.
var EffectKey = &analysis.Analyzer{
	Name: "effectkey",
	Doc: `check that effect implementations pass their idempotency key on unchanged

An effect implementation (a method implementing a generated effect
interface, or a function given to its …Func adapter) receives the effect's
idempotency key so that it can pass it to the provider (Stripe's
Idempotency-Key, say): a retry after a crash then carries the same key and
the provider performs the effect once. effectkey reports an implementation
that never uses its key (writing it only into a log line or an error, or
handing it to a function of the package that drops it, is not using it),
that passes the unit's key (unit.Key()) in its place, or that rewrites it
with, or joins it to, a value of the attempt: the time, a random number or
UUID, a counter, the process.`,
	URL:      "https://github.com/idemgen/idemgen#checking-the-code-around-it",
	Requires: []*analysis.Analyzer{API, inspect.Analyzer},
	Run:      runEffectKey,
}

func runEffectKey(pass *analysis.Pass) (any, error) {
	return eachImpl(pass, (*keyCheck).check)
}

// eachImpl runs check on every effect implementation of the package, when
// a generated package is in sight.
func eachImpl(pass *analysis.Pass, check func(*keyCheck, impl)) (any, error) {
	api := pass.ResultOf[API].(*APIResult)
	if api.Empty() {
		return nil, nil
	}
	in := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	ck := newKeyCheck(pass, api, in)
	for _, im := range implementations(pass, api, in) {
		check(ck, im)
	}
	return nil, nil
}

func newKeyCheck(pass *analysis.Pass, api *APIResult, in *inspector.Inspector) *keyCheck {
	return &keyCheck{pass: pass, api: api, in: in, counters: counters(pass), decls: funcDecls(pass), using: map[paramRef]bool{}}
}

type keyCheck struct {
	pass     *analysis.Pass
	api      *APIResult
	in       *inspector.Inspector
	counters map[*types.Var]bool
	decls    map[*types.Func]*ast.FuncDecl
	using    map[paramRef]bool // memo of paramUsed; true while in progress
}

type paramRef struct {
	fn *ast.FuncDecl
	i  int
}

func (ck *keyCheck) check(im impl) {
	info := ck.pass.TypesInfo
	key := ck.keyVar(im)
	if key == nil || !ck.used(im.fn, key) {
		if !ck.rendersOwnKey(im) {
			ck.unused(im)
		}
		return
	}
	f := newFlow(info, im.fn, ck.counters, nil)
	held := holders(info, im.fn, key)
	mentions := func(e ast.Expr) bool { return mentionsAny(info, e, held) }

	// Rewrites of the key itself: key = ..., key += ...
	reported := map[ast.Node]bool{}
	ast.Inspect(im.body, func(n ast.Node) bool {
		as, ok := n.(*ast.AssignStmt)
		if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
			return true
		}
		if id, ok := as.Lhs[0].(*ast.Ident); !ok || info.ObjectOf(id) != key {
			return true
		}
		src := f.source(as.Rhs[0])
		fix := []analysis.SuggestedFix{{
			Message:   "Remove the assignment and pass key unchanged",
			TextEdits: []analysis.TextEdit{{Pos: as.Pos(), End: as.End()}},
		}}
		switch {
		case src != "" && (as.Tok != token.ASSIGN || mentions(as.Rhs[0])):
			reported[as] = true
			ck.pass.Report(analysis.Diagnostic{Pos: as.Pos(), End: as.End(), Category: "rewritten",
				Message:        fmt.Sprintf("%s joins %s to its idempotency key; %s", im.name, src, attemptHarm(src)),
				SuggestedFixes: fix})
		case as.Tok == token.ASSIGN && !mentions(as.Rhs[0]):
			reported[as] = true
			why := "the provider no longer sees the effect's key, the one a retry repeats; pass key unchanged"
			if src != "" {
				why = attemptHarm(src)
			}
			ck.pass.Report(analysis.Diagnostic{Pos: as.Pos(), End: as.End(), Category: "rewritten",
				Message:        fmt.Sprintf("%s replaces its idempotency key with %s; %s", im.name, types.ExprString(as.Rhs[0]), why),
				SuggestedFixes: fix})
		}
		return true
	})

	// The key (or a copy) joined with a value of the attempt: by +, by
	// fmt.Sprint*, path.Join and the like, or in a []string literal. The
	// outermost such expression is reported, once, so that the fix
	// replaces all of it.
	root, _ := ck.in.Root().FindNode(im.body)
	for c := range root.Preorder((*ast.BinaryExpr)(nil), (*ast.CallExpr)(nil), (*ast.CompositeLit)(nil)) {
		e := c.Node().(ast.Expr)
		parts := joinedParts(info, e)
		if len(parts) < 2 {
			continue
		}
		src, withKey := "", false
		for _, p := range parts {
			if mentions(p) {
				withKey = true
			} else if s := f.source(p); s != "" && src == "" {
				src = s
			}
		}
		if !withKey || src == "" || enclosedBy(c, reported) || messageOnly(info, c) {
			continue
		}
		reported[e] = true
		d := analysis.Diagnostic{Pos: e.Pos(), End: e.End(), Category: "rewritten",
			Message: fmt.Sprintf("%s joins %s to its idempotency key; %s", im.name, src, attemptHarm(src))}
		if isBasicString(info.TypeOf(e)) {
			edits := []analysis.TextEdit{{Pos: e.Pos(), End: e.End(), NewText: []byte(im.key.Name)}}
			d.SuggestedFixes = []analysis.SuggestedFix{{
				Message:   "Pass key unchanged",
				TextEdits: append(edits, ck.orphans(im, e)...),
			}}
		}
		ck.pass.Report(d)
	}
}

// orphans returns the edits that remove the declarations of the locals
// only gone expression e used (nonce := rand.Int63()), so that the fixed
// code still compiles.
func (ck *keyCheck) orphans(im impl, gone ast.Expr) []analysis.TextEdit {
	info := ck.pass.TypesInfo
	var edits []analysis.TextEdit
	ast.Inspect(gone, func(n ast.Node) bool {
		id, ok := n.(*ast.Ident)
		if !ok {
			return true
		}
		v, ok := info.Uses[id].(*types.Var)
		if !ok || v.Pos() < im.body.Pos() || v.Pos() >= im.body.End() {
			return true
		}
		var decl *ast.AssignStmt
		uses := 0
		ast.Inspect(im.body, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				if len(n.Lhs) == 1 && len(n.Rhs) == 1 && n.Tok == token.DEFINE {
					if l, ok := n.Lhs[0].(*ast.Ident); ok && info.Defs[l] == v {
						decl = n
					}
				}
			case *ast.Ident:
				if info.Uses[n] == v && (n.Pos() < gone.Pos() || n.End() > gone.End()) {
					uses++
				}
			}
			return true
		})
		if decl != nil && uses == 0 {
			edits = append(edits, analysis.TextEdit{Pos: decl.Pos(), End: decl.End()})
		}
		return true
	})
	return edits
}

// rendersOwnKey reports whether im renders its key itself with the
// effect's generated key function (billing.NotifyNewInvoiceKey(unit)):
// the same key it was given.
func (ck *keyCheck) rendersOwnKey(im impl) bool {
	keyFunc := im.eff.keyFunc()
	if keyFunc == nil {
		return false
	}
	found := false
	ast.Inspect(im.body, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok && typeutil.StaticCallee(ck.pass.TypesInfo, call) == keyFunc {
			found = true
		}
		return !found
	})
	return found
}

// unused reports an implementation that never uses its key, pointing at
// unit.Key() when that is what it passes instead.
func (ck *keyCheck) unused(im impl) {
	info := ck.pass.TypesInfo
	var unit types.Object
	if im.unit != nil {
		unit = info.Defs[im.unit]
	}
	var unitKeys []*ast.CallExpr // unit.Key()
	if unit != nil {
		ast.Inspect(im.body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) != 0 {
				return true
			}
			if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Key" {
				if x, ok := sel.X.(*ast.Ident); ok && info.Uses[x] == unit {
					unitKeys = append(unitKeys, call)
				}
			}
			return true
		})
	}
	if len(unitKeys) == 0 {
		pos := im.typ.Pos()
		if im.key != nil {
			pos = im.key.Pos()
		}
		ck.pass.Report(analysis.Diagnostic{Pos: pos, Category: "unused",
			Message: fmt.Sprintf("%s never uses its idempotency key: pass key to the provider (as Stripe's Idempotency-Key, say), or a retry after a crash performs the effect a second time", im.name)})
		return
	}
	_, u := ck.api.Unit(unit.Type())
	unitKey := "the unit's key"
	if u != nil && u.Key != "" {
		unitKey = fmt.Sprintf("the unit's key %q", u.Key)
	}
	effKey := "this effect's key"
	if im.eff.fact.Key != "" {
		effKey = fmt.Sprintf("this effect's key %q", im.eff.fact.Key)
	}
	for _, call := range unitKeys {
		d := analysis.Diagnostic{Pos: call.Pos(), End: call.End(), Category: "unitkey",
			Message: fmt.Sprintf("%s passes %s where %s belongs: the unit's other effects would share it at the provider, and a version bump would not perform the effect again; pass key", im.name, unitKey, effKey)}
		// Only when key has a name to use, or its blank name can be
		// replaced: a signature without parameter names has none.
		if im.key != nil {
			edits := []analysis.TextEdit{{Pos: call.Pos(), End: call.End(), NewText: []byte("key")}}
			if im.key.Name == "_" {
				edits = append(edits, analysis.TextEdit{Pos: im.key.Pos(), End: im.key.End(), NewText: []byte("key")})
			} else {
				edits[0].NewText = []byte(im.key.Name)
			}
			d.SuggestedFixes = []analysis.SuggestedFix{{Message: "Pass the effect's key", TextEdits: edits}}
		}
		ck.pass.Report(d)
	}
}

// reads returns where fn reads v, the key. Passing it to a function of
// this package that does not use it in turn does not count, nor does
// assigning it to _ or writing it into a log line or an error message.
func (ck *keyCheck) reads(fn ast.Node, v *types.Var) []inspector.Cursor {
	info := ck.pass.TypesInfo
	root, ok := ck.in.Root().FindNode(fn)
	if !ok {
		return nil
	}
	var out []inspector.Cursor
	for c := range root.Preorder((*ast.Ident)(nil)) {
		if info.Uses[c.Node().(*ast.Ident)] != v {
			continue
		}
		switch p := c.Parent().Node().(type) {
		case *ast.AssignStmt:
			if c.ParentEdgeKind().FieldName() == "Lhs" {
				continue // written, not read
			}
			if len(p.Lhs) == len(p.Rhs) {
				if l, ok := p.Lhs[c.ParentEdgeIndex()].(*ast.Ident); ok && l.Name == "_" {
					continue // _ = key
				}
			}
		case *ast.CallExpr:
			if c.ParentEdgeKind().FieldName() == "Args" {
				if callee := typeutil.StaticCallee(info, p); callee != nil {
					if fd := ck.decls[callee]; fd != nil && !callee.Signature().Variadic() {
						if !ck.paramUsed(fd, c.ParentEdgeIndex()) {
							continue // handed to a function that drops it
						}
					}
				}
			}
		}
		if messageOnly(info, c) {
			continue
		}
		out = append(out, c)
	}
	return out
}

func (ck *keyCheck) used(fn ast.Node, v *types.Var) bool { return len(ck.reads(fn, v)) > 0 }

// keyVar returns the implementation's key parameter, nil when it has no
// usable name.
func (ck *keyCheck) keyVar(im impl) *types.Var {
	if im.key == nil || im.key.Name == "_" {
		return nil
	}
	v, _ := ck.pass.TypesInfo.Defs[im.key].(*types.Var)
	return v
}

// paramUsed reports whether the i-th parameter of fd is used, in the sense
// of used. Recursion assumes use, so that a cycle is never a finding.
func (ck *keyCheck) paramUsed(fd *ast.FuncDecl, i int) bool {
	ref := paramRef{fd, i}
	if u, ok := ck.using[ref]; ok {
		return u
	}
	ck.using[ref] = true
	id := param(fd.Type, i)
	u := false
	if id != nil && id.Name != "_" {
		if v, ok := ck.pass.TypesInfo.Defs[id].(*types.Var); ok && fd.Body != nil {
			u = ck.used(fd.Body, v)
		}
	}
	ck.using[ref] = u
	return u
}

// holders returns key and the locals of fn that hold a value made from it
// (k := key, k := "stripe:" + key), to a fixed point.
func holders(info *types.Info, fn ast.Node, key *types.Var) map[*types.Var]bool {
	held := map[*types.Var]bool{key: true}
	for changed := true; changed; {
		changed = false
		ast.Inspect(fn, func(n ast.Node) bool {
			var lhs, rhs []ast.Expr
			switch n := n.(type) {
			case *ast.AssignStmt:
				lhs, rhs = n.Lhs, n.Rhs
			case *ast.ValueSpec:
				for _, name := range n.Names {
					lhs = append(lhs, name)
				}
				rhs = n.Values
			default:
				return true
			}
			if len(lhs) != len(rhs) {
				return true
			}
			for i := range lhs {
				id, ok := lhs[i].(*ast.Ident)
				if !ok {
					continue
				}
				if v, ok := info.ObjectOf(id).(*types.Var); ok && !held[v] && mentionsAny(info, rhs[i], held) {
					held[v] = true
					changed = true
				}
			}
			return true
		})
	}
	return held
}

func mentionsAny(info *types.Info, e ast.Expr, vars map[*types.Var]bool) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			if v, ok := info.Uses[id].(*types.Var); ok && vars[v] {
				found = true
			}
		}
		return !found
	})
	return found
}

// joiners are the functions whose result joins their arguments into one
// string, by package path and name.
var joiners = map[string][]string{
	"fmt":           {"Sprintf", "Sprint", "Sprintln", "Appendf", "Append", "Appendln"},
	"path":          {"Join"},
	"path/filepath": {"Join"},
	"strings":       {"Join"},
	"bytes":         {"Join"},
}

// joinedParts returns the operands e joins into one value, nil when e is
// not such a join: string concatenation, a joining call, or a []string
// literal.
func joinedParts(info *types.Info, e ast.Expr) []ast.Expr {
	switch e := e.(type) {
	case *ast.BinaryExpr:
		if t := info.TypeOf(e); t != nil && e.Op == token.ADD && isBasicString(t.Underlying()) {
			return []ast.Expr{e.X, e.Y}
		}
	case *ast.CallExpr:
		fn, ok := typeutil.Callee(info, e).(*types.Func)
		if ok && fn.Pkg() != nil && fn.Signature().Recv() == nil {
			for _, name := range joiners[fn.Pkg().Path()] {
				if fn.Name() == name {
					return e.Args
				}
			}
		}
	case *ast.CompositeLit:
		if t := info.TypeOf(e); t != nil {
			if s, ok := t.Underlying().(*types.Slice); ok && isBasicString(s.Elem().Underlying()) {
				return e.Elts
			}
		}
	}
	return nil
}

// messages are the functions whose string arguments are messages for
// people (logs, errors), not keys, by package path; nil means all.
var messages = map[string][]string{
	"log":      nil,
	"log/slog": nil,
	"errors":   {"New"},
	"fmt":      {"Print", "Printf", "Println", "Fprint", "Fprintf", "Fprintln", "Errorf"},
}

// messageOnly reports whether the expression at c goes, alone or joined
// into a string, to a logging or error-making call: the key in a log line
// is not passed on, and the time next to it there is no key.
func messageOnly(info *types.Info, c inspector.Cursor) bool {
	for {
		parent := c.Parent()
		switch p := parent.Node().(type) {
		case *ast.BinaryExpr, *ast.ParenExpr:
		case *ast.CallExpr:
			if c.ParentEdgeKind().FieldName() != "Args" {
				return false
			}
			fn, ok := typeutil.Callee(info, p).(*types.Func)
			if !ok || fn.Pkg() == nil {
				return false
			}
			if names, ok := messages[fn.Pkg().Path()]; ok && (names == nil || slices.Contains(names, fn.Name())) {
				return true
			}
			if joinedParts(info, p) == nil {
				return false
			}
		default:
			return false
		}
		c = parent
	}
}

// attemptHarm says what a key made with src does, and what to do.
func attemptHarm(src string) string {
	return src + " differs on every attempt, so a retry after a crash sends the provider a new key and the effect is performed again: pass key unchanged"
}

// enclosedBy reports whether c is, or is inside, one of the nodes.
func enclosedBy(c inspector.Cursor, nodes map[ast.Node]bool) bool {
	for p := range c.Enclosing() {
		if nodes[p.Node()] {
			return true
		}
	}
	return false
}

// funcDecls maps the package's functions and methods to their declarations.
func funcDecls(pass *analysis.Pass) map[*types.Func]*ast.FuncDecl {
	out := map[*types.Func]*ast.FuncDecl{}
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok {
				if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					out[fn] = fd
				}
			}
		}
	}
	return out
}
