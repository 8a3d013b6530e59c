package spec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Pos is a 1-based line and column in a spec file.
type Pos struct {
	Line, Col int
}

// Severity orders diagnostics: errors stop generation, warnings do not.
type Severity int

const (
	Error Severity = iota
	Warning
)

// Diagnostic is one finding about a spec, printed in go-build form.
type Diagnostic struct {
	File     string
	Pos      Pos
	Severity Severity
	Msg      string
}

func (d Diagnostic) String() string {
	prefix := ""
	if d.Severity == Warning {
		prefix = "warning: "
	}
	if d.Pos.Line == 0 {
		return fmt.Sprintf("%s: %s%s", d.File, prefix, d.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s%s", d.File, d.Pos.Line, d.Pos.Col, prefix, d.Msg)
}

// Diagnostics is a list of findings; Sort puts them in file order.
type Diagnostics []Diagnostic

// HasErrors reports whether any diagnostic is an error.
func (ds Diagnostics) HasErrors() bool {
	return slices.ContainsFunc(ds, func(d Diagnostic) bool { return d.Severity == Error })
}

// Sorted returns the diagnostics in file, line, column, message order, without repeats.
func (ds Diagnostics) Sorted() Diagnostics {
	out := slices.Clone(ds)
	slices.SortStableFunc(out, func(a, b Diagnostic) int {
		return cmp.Or(
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Pos.Line, b.Pos.Line),
			cmp.Compare(a.Pos.Col, b.Pos.Col),
			cmp.Compare(a.Msg, b.Msg),
		)
	})
	return slices.CompactFunc(out, func(a, b Diagnostic) bool { return a == b })
}

// Error joins the diagnostics, one per line, for callers that want an error value.
func (ds Diagnostics) Error() string {
	var b strings.Builder
	for i, d := range ds.Sorted() {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(d.String())
	}
	return b.String()
}

// Errors keeps only the errors.
func (ds Diagnostics) Errors() Diagnostics {
	var out Diagnostics
	for _, d := range ds {
		if d.Severity == Error {
			out = append(out, d)
		}
	}
	return out
}

type reporter struct {
	file  string
	diags Diagnostics
}

func (r *reporter) errorf(p Pos, format string, args ...any) {
	r.diags = append(r.diags, Diagnostic{File: r.file, Pos: p, Severity: Error, Msg: fmt.Sprintf(format, args...)})
}

func (r *reporter) warnf(p Pos, format string, args ...any) {
	r.diags = append(r.diags, Diagnostic{File: r.file, Pos: p, Severity: Warning, Msg: fmt.Sprintf(format, args...)})
}

// Suggest returns the candidate nearest to s by edit distance, or "" when none is close.
func Suggest(s string, candidates []string) string {
	best, bestDist := "", len(s)/2+2
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// didYouMean formats a suggestion suffix, or "" when there is none.
func didYouMean(s string, candidates []string) string {
	if m := Suggest(s, candidates); m != "" {
		return fmt.Sprintf(" (did you mean %s?)", m)
	}
	return ""
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
