package lint

import (
	"fmt"
	"go/ast"
	"go/types"
	"slices"

	"golang.org/x/tools/go/analysis"
)

// UnitKey checks that the key fields of units are not made up per attempt.
var UnitKey = &analysis.Analyzer{
	Name: "unitkey",
	Doc: `check that unit key fields come from the source, not from the attempt

A unit's idempotency key is rendered from some of its fields (the spec's
unit key, e.g. "payments:event:{event_id}"). A unit built with such a field
set from the time, a random number or UUID, a counter or the process gets a
new key every time it is handed in or fetched again: a redelivered webhook
or a retried request is then written, and its effects performed, twice.
unitkey reports such fields, in composite literals and assignments. The time
cut down to a period (t.Truncate, t.Format("2006-01-02"), a function of
yours that takes a time.Time) is fine: a job keyed by its day or week.`,
	URL:      "https://github.com/idemgen/idemgen#checking-the-code-around-it",
	Requires: []*analysis.Analyzer{API},
	Run:      runUnitKey,
}

func runUnitKey(pass *analysis.Pass) (any, error) {
	api := pass.ResultOf[API].(*APIResult)
	if api.Empty() {
		return nil, nil
	}
	info := pass.TypesInfo
	ctrs := counters(pass)
	report := func(f *flow, at ast.Expr, unit *types.TypeName, fact *unitFact, field string) {
		src := f.source(at)
		if src == "" {
			return
		}
		key := "key"
		if fact.Key != "" {
			key = fmt.Sprintf("key %q", fact.Key)
		}
		pass.Report(analysis.Diagnostic{Pos: at.Pos(), End: at.End(), Category: "unitkey",
			Message: fmt.Sprintf("%s.%s is part of the unit's idempotency %s but is set from %s, which differs on every attempt: a unit handed in or fetched again gets a new key and is written, and its effects performed, a second time; set it from the source's own identifier (the id the provider sent, say)", qualified(pass, unit), field, key, src)})
	}
	for _, file := range pass.Files {
		if !checked(pass, api, file) {
			continue
		}
		for _, decl := range file.Decls {
			f := newFlow(info, decl, ctrs, pass.Pkg)
			ast.Inspect(decl, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CompositeLit:
					unit, fact := api.Unit(info.TypeOf(n))
					if unit == nil || types.Unalias(info.TypeOf(n)) != unit.Type() {
						return true
					}
					st := unit.Type().Underlying().(*types.Struct)
					for i, elt := range n.Elts {
						name, value := "", elt
						if kv, ok := elt.(*ast.KeyValueExpr); ok {
							if id, ok := kv.Key.(*ast.Ident); ok {
								name, value = id.Name, kv.Value
							}
						} else if i < st.NumFields() {
							name = st.Field(i).Name()
						}
						if slices.Contains(fact.KeyFields, name) {
							report(f, value, unit, fact, name)
						}
					}
				case *ast.AssignStmt:
					if len(n.Lhs) != len(n.Rhs) {
						return true
					}
					for i, l := range n.Lhs {
						sel, ok := l.(*ast.SelectorExpr)
						if !ok {
							continue
						}
						unit, fact := api.Unit(info.TypeOf(sel.X))
						if unit != nil && slices.Contains(fact.KeyFields, sel.Sel.Name) {
							report(f, n.Rhs[i], unit, fact, sel.Sel.Name)
						}
					}
				}
				return true
			})
		}
	}
	return nil, nil
}
