package lint

import (
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

// Attempt-tied values: what differs every time the same unit or effect is
// tried again, so that a key built from it is a new key on every retry.

// attemptFuncs lists, by package path (without a /vN suffix), the functions
// and methods whose result is new on every call. An empty list means all
// of the package's functions and methods except its constructors.
var attemptFuncs = map[string][]string{
	"time":        {"Now", "Since", "Until"},
	"math/rand":   nil,
	"crypto/rand": {"Read", "Int", "Prime", "Text"},
	"os":          {"Getpid", "Getppid", "Hostname"}, // another worker, another key
	"sync/atomic": {"AddInt32", "AddInt64", "AddUint32", "AddUint64", "AddUintptr", "Add"},

	"github.com/google/uuid":         {"New", "NewString", "NewRandom", "NewRandomFromReader", "NewUUID", "NewV6", "NewV7", "NewV7FromReader"},
	"github.com/gofrs/uuid":          {"NewV1", "NewV4", "NewV6", "NewV7"},
	"github.com/satori/go.uuid":      {"NewV1", "NewV2", "NewV4"},
	"github.com/oklog/ulid":          {"Make", "Now", "MustNewDefault"},
	"github.com/rs/xid":              {"New"},
	"github.com/segmentio/ksuid":     {"New", "NewRandom", "NewRandomWithTime"},
	"github.com/lithammer/shortuuid": {"New", "NewWithAlphabet"},
	"github.com/matoous/go-nanoid":   {"New", "Generate", "Must", "MustGenerate"},
	"github.com/teris-io/shortid":    {"Generate", "MustGenerate"},
	"github.com/bwmarrin/snowflake":  {"Generate"},
	"github.com/sony/sonyflake":      {"NextID"},
}

// randConstructors are the functions of math/rand that make a generator
// rather than a random value.
var randConstructors = []string{"New", "NewSource", "NewPCG", "NewChaCha8", "NewZipf", "Seed"}

var majorVersion = regexp.MustCompile(`/v[0-9]+$`)

// attemptCall reports whether call returns a value new on every attempt,
// and names it as the message shows it ("time.Now()").
func attemptCall(info *types.Info, call *ast.CallExpr) (string, bool) {
	fn, ok := typeutil.Callee(info, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return "", false
	}
	path := majorVersion.ReplaceAllString(fn.Pkg().Path(), "")
	names, ok := attemptFuncs[path]
	switch {
	case !ok:
		return "", false
	case names == nil && slices.Contains(randConstructors, fn.Name()):
		return "", false
	case names != nil && !slices.Contains(names, fn.Name()):
		return "", false
	}
	return types.ExprString(call.Fun) + "()", true
}

// counters are the variables the package counts with: incremented,
// added to, or atomically added to anywhere in it. Read from outside the
// function at hand, a counter is a value of the attempt.
func counters(pass *analysis.Pass) map[*types.Var]bool {
	out := map[*types.Var]bool{}
	mark := func(e ast.Expr) {
		if v := rootVar(pass.TypesInfo, e); v != nil {
			out[v] = true
		}
	}
	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.IncDecStmt:
				mark(n.X)
			case *ast.AssignStmt:
				if n.Tok == token.ADD_ASSIGN || n.Tok == token.SUB_ASSIGN {
					for _, l := range n.Lhs {
						mark(l)
					}
				}
			case *ast.CallExpr:
				fn, ok := typeutil.Callee(pass.TypesInfo, n).(*types.Func)
				if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "sync/atomic" || !strings.HasPrefix(fn.Name(), "Add") {
					break
				}
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && fn.Signature().Recv() != nil {
					mark(sel.X) // n.calls.Add(1)
				} else if len(n.Args) > 0 {
					if u, ok := n.Args[0].(*ast.UnaryExpr); ok && u.Op == token.AND {
						mark(u.X) // atomic.AddInt64(&n.calls, 1)
					}
				}
			}
			return true
		})
	}
	return out
}

// rootVar returns the variable or field an lvalue names: n, n.calls,
// calls[key] (the map), *p.
func rootVar(info *types.Info, e ast.Expr) *types.Var {
	for {
		switch x := e.(type) {
		case *ast.Ident:
			v, _ := info.ObjectOf(x).(*types.Var)
			return v
		case *ast.SelectorExpr:
			v, _ := info.ObjectOf(x.Sel).(*types.Var)
			return v
		case *ast.IndexExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return nil
		}
	}
}

// flow follows attempt-tied values through one function: which of its
// local variables hold one, and so which expressions do.
type flow struct {
	info     *types.Info
	fn       ast.Node // *ast.FuncDecl or *ast.FuncLit
	counters map[*types.Var]bool
	tied     map[*types.Var]string // local variable → where its value comes from
	// periods, when not nil, is the package under analysis, and the time
	// cut down to a period (the day, the week) is no value of the attempt.
	// So for unit keys, where a job keyed by its period (weekly_summary) is
	// a design; not for effect keys, which must not change when a retry
	// falls on the next day.
	periods *types.Package
}

func newFlow(info *types.Info, fn ast.Node, counters map[*types.Var]bool, periods *types.Package) *flow {
	f := &flow{info: info, fn: fn, counters: counters, tied: map[*types.Var]string{}, periods: periods}
	// Flow-insensitive, to a fixed point: a local assigned a tied value
	// anywhere holds one.
	for changed := true; changed; {
		changed = false
		assign := func(lhs ast.Expr, rhs ast.Expr) {
			id, ok := lhs.(*ast.Ident)
			if !ok {
				return
			}
			v, ok := info.ObjectOf(id).(*types.Var)
			if !ok || !f.local(v) || f.tied[v] != "" {
				return
			}
			if src := f.source(rhs); src != "" {
				f.tied[v] = src
				changed = true
			}
		}
		ast.Inspect(fn, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.AssignStmt:
				for i, l := range n.Lhs {
					if len(n.Rhs) == len(n.Lhs) {
						assign(l, n.Rhs[i])
					} else if len(n.Rhs) == 1 {
						assign(l, n.Rhs[0])
					}
				}
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if len(n.Values) == len(n.Names) {
						assign(name, n.Values[i])
					} else if len(n.Values) == 1 {
						assign(name, n.Values[0])
					}
				}
			}
			return true
		})
	}
	return f
}

// local reports whether v is declared inside the function (its
// parameters included).
func (f *flow) local(v *types.Var) bool {
	return v.Pos() >= f.fn.Pos() && v.Pos() < f.fn.End()
}

// source returns what makes e differ on every attempt, "" when nothing
// does: a call such as time.Now(), a counter kept outside the function, or
// a local holding either.
func (f *flow) source(e ast.Expr) string {
	src := ""
	ast.Inspect(e, func(n ast.Node) bool {
		if src != "" {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false // a function value is not its result
		case *ast.CallExpr:
			if s, ok := attemptCall(f.info, n); ok {
				src = s
				return false
			}
			if f.periods != nil && period(f.info, f.periods, n) {
				return false
			}
		case *ast.SelectorExpr:
			if v, ok := f.info.ObjectOf(n.Sel).(*types.Var); ok && f.counters[v] && !f.local(v) {
				src = "the counter " + types.ExprString(n)
				return false
			}
		case *ast.Ident:
			v, ok := f.info.ObjectOf(n).(*types.Var)
			if !ok {
				break
			}
			if s := f.tied[v]; s != "" {
				src = s
			} else if f.counters[v] && !f.local(v) {
				src = "the counter " + n.Name
			}
		}
		return src == ""
	})
	return src
}

// periodMethods are the methods of time.Time that cut an instant down to a
// period or a calendar field.
var periodMethods = []string{"Truncate", "Round", "Date", "ISOWeek", "Year", "Month", "Day", "YearDay", "Weekday"}

// period reports whether call cuts the time it is given down to a period:
// t.Truncate(24*time.Hour), t.Format("2006-01-02") (a layout without the
// time of day), or a function of the user's that takes a time.Time
// (`startOfWeek(now)`), which is taken to do so.
func period(info *types.Info, pkg *types.Package, call *ast.CallExpr) bool {
	fn, ok := typeutil.Callee(info, call).(*types.Func)
	if !ok || fn.Pkg() == nil {
		return false
	}
	sig := fn.Signature()
	if recv := sig.Recv(); recv != nil && isTime(recv.Type()) {
		switch name := fn.Name(); {
		case slices.Contains(periodMethods, name):
			return true
		case name == "Format" && len(call.Args) == 1:
			layout := info.Types[call.Args[0]].Value
			if layout == nil || layout.Kind() != constant.String {
				return false
			}
			l := constant.StringVal(layout)
			day := time.Date(2001, 2, 3, 0, 0, 0, 0, time.UTC)
			return day.Format(l) == day.Add(13*time.Hour+14*time.Minute+15*time.Second+123456789).Format(l)
		}
		return false
	}
	if fn.Pkg() != pkg && isStd(fn.Pkg().Path()) {
		return false
	}
	for p := range sig.Params().Variables() {
		if isTime(p.Type()) {
			return true
		}
	}
	return false
}

// isStd reports whether path is a standard library package: no dot in
// its first element, as the go command decides.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

func isTime(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "time" && n.Obj().Name() == "Time"
}
