package spec

// The checks of a key template: its placeholders, and the examples the
// findings show.

import (
	"slices"
	"strings"
)

// identityExample renders the unit key's placeholders for an example key.
func (jc *jobCtx) identityExample() string {
	if len(jc.keyUse) == 0 {
		return "{id}"
	}
	return "{" + strings.Join(jc.keyUse, "}:{") + "}"
}

func cmpOr(names []string, fallback string) string {
	if len(names) > 0 {
		return names[0]
	}
	return fallback
}

func (jc *jobCtx) effectExample(e *Effect) string {
	if e.Name.Value != "" && snakeRe.MatchString(e.Name.Value) {
		return e.Name.Value
	}
	return "effect"
}

// placeholder is one {...} of a key template that resolved.
type placeholder struct {
	fields  []string // unit fields it renders
	offs    []int    // byte offset in the template of each field name
	version bool     // {version}
}

func fieldsOf(phs []placeholder) []string {
	var out []string
	for _, p := range phs {
		for _, f := range p.fields {
			if !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	return out
}

// template reads a key template. ok is false when the template is broken,
// so checks that depend on what it uses are skipped rather than piled on.
func (jc *jobCtx) template(k String, effect bool) (phs []placeholder, ok bool) {
	s := k.Value
	ok = true
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '}':
			jc.errorf(k.PosAt(i), "%skey has a } without a matching {", jc.prefix)
			return phs, false
		case '{':
			j := strings.IndexAny(s[i+1:], "{}")
			if j < 0 {
				jc.errorf(k.PosAt(i), "%skey has a { that is never closed", jc.prefix)
				return phs, false
			}
			end := i + 1 + j
			if s[end] == '{' {
				jc.errorf(k.PosAt(end), "%skey has a { inside a placeholder", jc.prefix)
				return phs, false
			}
			ph, good := jc.placeholder(k, i, s[i+1:end], effect)
			if good {
				phs = append(phs, ph)
			} else {
				ok = false
			}
			i = end
		}
	}
	return phs, ok
}

func (jc *jobCtx) placeholder(k String, at int, inner string, effect bool) (placeholder, bool) {
	where := k.PosAt(at)
	if strings.TrimSpace(inner) == "" {
		jc.errorf(where, "%skey has an empty placeholder {%s}", jc.prefix, inner)
		return placeholder{}, false
	}
	// Spaces around a name are tolerated, as the model's key parser does.
	lead := len(inner) - len(strings.TrimLeft(inner, " "))
	inner = strings.Trim(inner, " ")
	if identRe.MatchString(inner) {
		switch {
		case effect && (inner == "version" || inner == "job_version"):
			return placeholder{version: inner == "version"}, true
		case jc.fields[inner] != nil:
			return placeholder{fields: []string{inner}, offs: []int{at}}, true
		case jc.broken[inner]:
		case inner == "version" || inner == "job_version":
			jc.errorf(where, "%skey placeholder {%s} is only available in effect keys", jc.prefix, inner)
		case runTied[strings.ToLower(inner)]:
			jc.errorf(where, "%skey placeholder {%s} is tied to the run; keys must be deterministic", jc.prefix, inner)
		case !jc.unknownField(inner):
		default:
			jc.errorf(where, "%skey placeholder {%s} is not a unit field%s", jc.prefix, inner, didYouMean(inner, jc.candidates(effect)))
		}
		return placeholder{}, false
	}
	m := callRe.FindStringSubmatch(inner)
	if m == nil {
		jc.errorf(where, "%skey placeholder {%s} is not a field name or sha256(field, ...)", jc.prefix, inner)
		return placeholder{}, false
	}
	fn, args := m[1], m[2]
	switch {
	case runTied[strings.ToLower(fn)]:
		jc.errorf(where, "%skey placeholder {%s} is tied to the run; keys must be deterministic", jc.prefix, inner)
		return placeholder{}, false
	case fn != "sha256":
		jc.errorf(where, "%skey placeholder {%s}: unknown function %s (only sha256 is supported)", jc.prefix, inner, fn)
		return placeholder{}, false
	case strings.TrimSpace(args) == "":
		jc.errorf(where, "%skey placeholder {%s}: sha256 needs at least one unit field", jc.prefix, inner)
		return placeholder{}, false
	}
	var ph placeholder
	ok := true
	off := at + 1 + lead + len(fn) + 1
	for arg := range strings.SplitSeq(args, ",") {
		name := strings.TrimSpace(arg)
		argAt := off + strings.Index(arg, name)
		off += len(arg) + 1
		switch {
		case jc.fields[name] != nil:
			ph.fields = append(ph.fields, name)
			ph.offs = append(ph.offs, argAt)
		case name == "":
			jc.errorf(where, "%skey placeholder {%s}: sha256 has an empty argument", jc.prefix, inner)
			ok = false
		case !jc.unknownField(name):
			ok = false
		case runTied[strings.ToLower(strings.TrimSuffix(name, "()"))]:
			jc.errorf(k.PosAt(argAt), "%skey placeholder {%s}: %s is tied to the run; keys must be deterministic", jc.prefix, inner, name)
			ok = false
		default:
			jc.errorf(k.PosAt(argAt), "%skey placeholder {%s}: %s is not a unit field%s", jc.prefix, inner, name, didYouMean(name, jc.names))
			ok = false
		}
	}
	return ph, ok
}

// unknownField reports whether a reference to name should be reported as
// not a unit field: not when the unit's fields were already reported broken.
func (jc *jobCtx) unknownField(name string) bool {
	return len(jc.names) > 0 && !jc.broken[name]
}

func (jc *jobCtx) candidates(effect bool) []string {
	if !effect {
		return jc.names
	}
	return append(slices.Clone(jc.names), "version", "job_version")
}
