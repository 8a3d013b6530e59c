package lint

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/ast/inspector"
)

// impl is a function that performs an effect: a method implementing a
// generated effect interface, or a function handed to its …Func adapter.
type impl struct {
	fn   ast.Node // *ast.FuncDecl or *ast.FuncLit
	typ  *ast.FuncType
	body *ast.BlockStmt
	eff  effect
	name string // as messages name it
	key  *ast.Ident
	unit *ast.Ident // nil when unnamed
}

// checked reports whether the analyzers look at file f: hand-written
// code, not tests (see the package doc) and not generated files.
func checked(pass *analysis.Pass, api *APIResult, f *ast.File) bool {
	return !api.Generated(f) && !strings.HasSuffix(pass.Fset.File(f.Pos()).Name(), "_test.go")
}

// implementations finds the effect implementations in the package's
// checked files.
func implementations(pass *analysis.Pass, api *APIResult, in *inspector.Inspector) []impl {
	decls := map[*types.Func]*ast.FuncDecl{}
	var out []impl
	seen := map[ast.Node]bool{}
	add := func(fn ast.Node, typ *ast.FuncType, body *ast.BlockStmt, e effect, name string) {
		if body == nil || seen[fn] {
			return
		}
		seen[fn] = true
		i := impl{fn: fn, typ: typ, body: body, eff: e, name: name}
		i.key, i.unit = param(typ, 1), param(typ, 2)
		out = append(out, i)
	}
	for _, f := range pass.Files {
		if !checked(pass, api, f) {
			continue
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func)
			if !ok {
				continue
			}
			decls[fn] = fd
			if fd.Recv == nil {
				continue
			}
			for _, e := range api.effectsNamed(fd.Name.Name) {
				if types.Identical(fn.Signature(), e.sig) {
					recv := types.TypeString(fn.Signature().Recv().Type(), types.RelativeTo(pass.Pkg))
					add(fd, fd.Type, fd.Body, e, fmt.Sprintf("(%s).%s, which implements %s,", recv, fd.Name.Name, qualified(pass, e.iface)))
				}
			}
		}
	}
	// Functions handed to an adapter, by conversion or by assignment.
	for e, target := range assignments(pass, in) {
		iface := api.Adapter(target)
		if iface == nil {
			continue
		}
		eff, ok := api.effect(iface)
		if !ok {
			continue
		}
		adapter := qualified(pass, target.(*types.Named).Obj())
		switch x := ast.Unparen(e).(type) {
		case *ast.FuncLit:
			add(x, x.Type, x.Body, eff, "the function given to "+adapter)
		case *ast.Ident, *ast.SelectorExpr:
			var id *ast.Ident
			if sel, ok := x.(*ast.SelectorExpr); ok {
				id = sel.Sel
			} else {
				id = x.(*ast.Ident)
			}
			if fn, ok := pass.TypesInfo.Uses[id].(*types.Func); ok && decls[fn] != nil {
				fd := decls[fn]
				add(fd, fd.Type, fd.Body, eff, fmt.Sprintf("%s, given to %s,", fd.Name.Name, adapter))
			}
		}
	}
	return out
}

// param returns the name of the i-th parameter, nil when it has none.
func param(typ *ast.FuncType, i int) *ast.Ident {
	for _, field := range typ.Params.List {
		if len(field.Names) == 0 {
			if i == 0 {
				return nil
			}
			i--
			continue
		}
		if i < len(field.Names) {
			return field.Names[i]
		}
		i -= len(field.Names)
	}
	return nil
}

// qualified names a type as the user's code does: billing.NotifyNewInvoice.
func qualified(pass *analysis.Pass, tn *types.TypeName) string {
	if tn.Pkg() == nil || tn.Pkg() == pass.Pkg {
		return tn.Name()
	}
	return tn.Pkg().Name() + "." + tn.Name()
}

// assignments yields the expressions of the package's checked files that
// are converted or assigned to a named type, with that type: conversion
// arguments, call arguments, composite literal elements, assignments,
// typed variable declarations and returns.
func assignments(pass *analysis.Pass, in *inspector.Inspector) func(yield func(ast.Expr, types.Type) bool) {
	info := pass.TypesInfo
	return func(yield func(ast.Expr, types.Type) bool) {
		named := func(e ast.Expr, t types.Type) bool {
			if t == nil {
				return true
			}
			if _, ok := types.Unalias(t).(*types.Named); !ok {
				return true
			}
			return yield(e, types.Unalias(t))
		}
		api := pass.ResultOf[API].(*APIResult)
		for _, f := range pass.Files {
			if !checked(pass, api, f) {
				continue
			}
			fc, ok := in.Root().FindNode(f)
			if !ok {
				continue
			}
			types_ := []ast.Node{(*ast.CallExpr)(nil), (*ast.CompositeLit)(nil), (*ast.AssignStmt)(nil), (*ast.ValueSpec)(nil), (*ast.ReturnStmt)(nil)}
			for c := range fc.Preorder(types_...) {
				switch n := c.Node().(type) {
				case *ast.CallExpr:
					if tv, ok := info.Types[n.Fun]; ok && tv.IsType() {
						if len(n.Args) == 1 && !named(n.Args[0], tv.Type) {
							return
						}
						continue
					}
					ft := info.TypeOf(n.Fun)
					if ft == nil {
						continue
					}
					sig, ok := ft.Underlying().(*types.Signature)
					if !ok {
						continue
					}
					for i, arg := range n.Args {
						if !named(arg, paramType(sig, i, n.Ellipsis.IsValid())) {
							return
						}
					}
				case *ast.CompositeLit:
					t := info.TypeOf(n)
					if t == nil {
						continue
					}
					switch u := t.Underlying().(type) {
					case *types.Struct:
						for i, elt := range n.Elts {
							if kv, ok := elt.(*ast.KeyValueExpr); ok {
								if id, ok := kv.Key.(*ast.Ident); ok {
									if v, ok := info.ObjectOf(id).(*types.Var); ok && !named(kv.Value, v.Type()) {
										return
									}
								}
							} else if i < u.NumFields() && !named(elt, u.Field(i).Type()) {
								return
							}
						}
					case interface{ Elem() types.Type }: // slice, array, map
						for _, elt := range n.Elts {
							if kv, ok := elt.(*ast.KeyValueExpr); ok {
								elt = kv.Value
							}
							if !named(elt, u.Elem()) {
								return
							}
						}
					}
				case *ast.AssignStmt:
					if len(n.Lhs) == len(n.Rhs) {
						for i := range n.Lhs {
							if !named(n.Rhs[i], info.TypeOf(n.Lhs[i])) {
								return
							}
						}
					}
				case *ast.ValueSpec:
					if n.Type != nil {
						for _, v := range n.Values {
							if !named(v, info.TypeOf(n.Type)) {
								return
							}
						}
					}
				case *ast.ReturnStmt:
					for enc := range c.Enclosing((*ast.FuncDecl)(nil), (*ast.FuncLit)(nil)) {
						var sig *types.Signature
						switch fn := enc.Node().(type) {
						case *ast.FuncDecl:
							if obj, ok := info.Defs[fn.Name].(*types.Func); ok {
								sig = obj.Signature()
							}
						case *ast.FuncLit:
							sig, _ = info.TypeOf(fn).(*types.Signature)
						}
						if sig != nil && sig.Results().Len() == len(n.Results) {
							for i, r := range n.Results {
								if !named(r, sig.Results().At(i).Type()) {
									return
								}
							}
						}
						break
					}
				}
			}
		}
	}
}

// paramType is the type the i-th argument of a call to sig is assigned to.
func paramType(sig *types.Signature, i int, spread bool) types.Type {
	n := sig.Params().Len()
	switch {
	case n == 0:
		return nil
	case sig.Variadic() && i >= n-1:
		// (append's signature for append([]byte, string...) ends in a
		// string, not a slice.)
		if s, ok := sig.Params().At(n - 1).Type().(*types.Slice); ok && !spread {
			return s.Elem()
		}
		return nil
	case i < n:
		return sig.Params().At(i).Type()
	}
	return nil
}
