package lint

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// EffectResult checks that an effect implementation returns only once the
// provider has acted, with the provider's error.
var EffectResult = &analysis.Analyzer{
	Name: "effectresult",
	Doc: `check that effect implementations report what the provider did

The generated job records an effect as done when its implementation returns
nil, and never performs it again. effectresult reports an implementation
that calls the provider (the call its key goes to) in a goroutine, so that
it returns before the provider has acted, and one that drops the error of
that call: either way a failed or interrupted effect is recorded as done and
lost, where idemgen promises it is performed at least once after recovery
(docs/guarantees.md#2-effects-once in github.com/idemgen/idemgen).`,
	URL:      "https://github.com/idemgen/idemgen#checking-the-code-around-it",
	Requires: []*analysis.Analyzer{API, inspect.Analyzer},
	Run:      runEffectResult,
}

// noErrors are the packages whose writes report an error that never
// happens or does not matter to the effect (formatting, hashing, buffers).
var noErrors = []string{"fmt", "strings", "bytes", "hash", "crypto", "log"}

func runEffectResult(pass *analysis.Pass) (any, error) {
	return eachImpl(pass, checkResult)
}

func checkResult(ck *keyCheck, im impl) {
	key := ck.keyVar(im)
	if key == nil {
		return // effectkey reports it
	}
	reads := ck.reads(im.fn, key)
	if len(reads) == 0 {
		return
	}
	if g, ok := onlyInGoroutines(reads, im.fn); ok {
		ck.pass.Report(analysis.Diagnostic{Pos: g.Pos(), End: g.End(), Category: "goroutine",
			Message: fmt.Sprintf("%s calls the provider in a goroutine and returns before it has acted: the job then records the effect as done, and a crash or a failed call loses it for good; call the provider synchronously and return its error", im.name)})
		return
	}
	droppedErrors(ck.pass, im, holders(ck.pass.TypesInfo, im.fn, key), ck.in)
}

// onlyInGoroutines reports whether every read is inside a go statement of
// fn, and returns the first such statement.
func onlyInGoroutines(reads []inspector.Cursor, fn ast.Node) (ast.Node, bool) {
	var first ast.Node
	for _, r := range reads {
		var g ast.Node
		for enc := range r.Enclosing((*ast.GoStmt)(nil)) {
			if enc.Node().Pos() >= fn.Pos() && enc.Node().End() <= fn.End() {
				g = enc.Node()
			}
		}
		if g == nil {
			return nil, false
		}
		if first == nil || g.Pos() < first.Pos() {
			first = g
		}
	}
	return first, first != nil
}

// droppedErrors reports calls that take the key and whose error im drops.
func droppedErrors(pass *analysis.Pass, im impl, held map[*types.Var]bool, in *inspector.Inspector) {
	info := pass.TypesInfo
	root, _ := in.Root().FindNode(im.body)
	for c := range root.Preorder((*ast.CallExpr)(nil)) {
		call := c.Node().(*ast.CallExpr)
		if innermostFunc(c) != im.fn || !takesKey(info, call, held) {
			continue
		}
		ft := info.TypeOf(call.Fun)
		if ft == nil {
			continue
		}
		sig, ok := ft.Underlying().(*types.Signature)
		if !ok || !lastIsError(sig.Results()) || ignorable(info, call) {
			continue
		}
		var fix []analysis.SuggestedFix
		switch p := c.Parent().Node().(type) {
		case *ast.ExprStmt:
			if sig.Results().Len() == 1 {
				fix = returnErrFix(pass, im, p, call)
			}
		case *ast.AssignStmt:
			if len(p.Rhs) != 1 || len(p.Lhs) != sig.Results().Len() {
				continue
			}
			if id, ok := p.Lhs[len(p.Lhs)-1].(*ast.Ident); !ok || id.Name != "_" {
				continue
			}
		default:
			continue
		}
		pass.Report(analysis.Diagnostic{Pos: call.Pos(), End: call.End(), Category: "droppederror",
			Message:        fmt.Sprintf("%s drops the error of %s, the call its key goes to: the job then records the effect as done although it failed, and never performs it; return the error", im.name, types.ExprString(call.Fun)),
			SuggestedFixes: fix})
	}
}

// innermostFunc returns the function literal or declaration c is in.
func innermostFunc(c inspector.Cursor) ast.Node {
	for enc := range c.Enclosing((*ast.FuncLit)(nil), (*ast.FuncDecl)(nil)) {
		return enc.Node()
	}
	return nil
}

// takesKey reports whether one of call's arguments is made from the key.
func takesKey(info *types.Info, call *ast.CallExpr, held map[*types.Var]bool) bool {
	for _, a := range call.Args {
		if mentionsAny(info, a, held) {
			return true
		}
	}
	return false
}

// ignorable reports whether call is to a package whose errors noErrors
// lets pass.
func ignorable(info *types.Info, call *ast.CallExpr) bool {
	fn, ok := typeutil.Callee(info, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return false
	}
	path := fn.Pkg().Path()
	for _, p := range noErrors {
		if path == p || strings.HasPrefix(path, p+"/") {
			return true
		}
	}
	return false
}

// returnErrFix turns `call(...)` into `if err := call(...); err != nil {
// return ..., err }`, when im's other results have a nil zero value.
func returnErrFix(pass *analysis.Pass, im impl, stmt *ast.ExprStmt, call *ast.CallExpr) []analysis.SuggestedFix {
	results := im.eff.sig.Results()
	var ret []string
	for i := range results.Len() - 1 {
		switch results.At(i).Type().Underlying().(type) {
		case *types.Slice, *types.Map, *types.Pointer, *types.Interface, *types.Chan, *types.Signature:
			ret = append(ret, "nil")
		default:
			return nil
		}
	}
	var b bytes.Buffer
	if err := format.Node(&b, pass.Fset, call); err != nil {
		return nil
	}
	text := fmt.Sprintf("if err := %s; err != nil {\n\treturn %s\n}", b.String(), strings.Join(append(ret, "err"), ", "))
	return []analysis.SuggestedFix{{
		Message:   "Return the provider's error",
		TextEdits: []analysis.TextEdit{{Pos: stmt.Pos(), End: stmt.End(), NewText: []byte(text)}},
	}}
}
