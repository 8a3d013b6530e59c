package lint

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/types/typeutil"
)

// ProcessResult checks that callers of a generated job's Process look at
// what it returns.
var ProcessResult = &analysis.Analyzer{
	Name: "processresult",
	Doc: `check that the result of a generated job's Process is not dropped

Process applies handed-in units (a queue message, a webhook). idemgen
promises that a caller who only checks its error never mistakes a payload
mismatch, an effect still in progress elsewhere or a failed write for
success (docs/runtime.md#errors in github.com/idemgen/idemgen); a caller
who checks neither the error nor the report acknowledges the message and
loses the unit. processresult reports calls of Process whose
results are all dropped: a bare call statement, go or defer, or _, _ =.`,
	URL:      "https://github.com/idemgen/idemgen#checking-the-code-around-it",
	Requires: []*analysis.Analyzer{API, inspect.Analyzer},
	Run:      runProcessResult,
}

func runProcessResult(pass *analysis.Pass) (any, error) {
	api := pass.ResultOf[API].(*APIResult)
	if api.Empty() {
		return nil, nil
	}
	in := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	info := pass.TypesInfo
	for _, file := range pass.Files {
		if !checked(pass, api, file) {
			continue
		}
		fc, _ := in.Root().FindNode(file)
		for c := range fc.Preorder((*ast.CallExpr)(nil)) {
			call := c.Node().(*ast.CallExpr)
			fn := typeutil.StaticCallee(info, call)
			if fn == nil || fn.Name() != "Process" || fn.Signature().Recv() == nil || !api.IsJob(fn.Signature().Recv().Type()) {
				continue
			}
			switch p := c.Parent().Node().(type) {
			case *ast.ExprStmt, *ast.GoStmt, *ast.DeferStmt:
			case *ast.AssignStmt:
				if !allBlank(p.Lhs) {
					continue
				}
			default:
				continue
			}
			job := types.TypeString(fn.Signature().Recv().Type(), func(p *types.Package) string {
				if p == pass.Pkg {
					return ""
				}
				return p.Name()
			})
			pass.Report(analysis.Diagnostic{Pos: call.Pos(), End: call.End(), Category: "processresult",
				Message: fmt.Sprintf("the result of (%s).Process is dropped: a payload mismatch, an effect in progress elsewhere or a failed write shows only in its error and report; check the error, and do not acknowledge the message while it is not nil", job)})
		}
	}
	return nil, nil
}

func allBlank(exprs []ast.Expr) bool {
	for _, e := range exprs {
		if id, ok := e.(*ast.Ident); !ok || id.Name != "_" {
			return false
		}
	}
	return true
}
