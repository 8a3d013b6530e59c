package golang

import (
	"fmt"
	"strings"
	"time"

	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// unitStruct emits the unit type:
//
//	// Invoice is one unit of work of the invoice_sync job.
//	type Invoice struct {
//		InvoiceID string `json:"invoice_id"`
//		...
//	}
func unitStruct(f *jen.File, j *model.Job) {
	f.Commentf("%s is one unit of work of the %s job.", j.Unit.GoName, j.Name)
	f.Type().Id(j.Unit.GoName).StructFunc(func(g *jen.Group) {
		for _, fld := range j.Unit.Fields {
			g.Id(fld.GoName).Add(goType(fld)).Tag(map[string]string{"json": fld.Name})
		}
	})
}

// unitKey emits the key method:
//
//	// Key returns the idempotency key "billing:invoice:{invoice_id}".
//	func (u Invoice) Key() string { return "billing:invoice:" + keyEscape(u.InvoiceID, ":") }
func unitKey(f *jen.File, j *model.Job) {
	f.Commentf("Key returns the unit's idempotency key, %q.", j.Key.Text)
	f.Func().Params(jen.Id("u").Id(j.Unit.GoName)).Id("Key").Params().String().Block(
		jen.Return(keyExpr(j.Key, jen.Id("u"))),
	)
}

// unitCheckKey emits the refusal of a unit whose key, or an effect's key,
// has a placeholder that renders empty (where two units could then share a
// key by accident):
//
//	// checkKey refuses u when a key placeholder renders empty.
//	func (u Invoice) checkKey() error {
//		if u.InvoiceID == "" {
//			return fmt.Errorf("%w: invoice_id (key \"billing:invoice:{invoice_id}\")", idem.ErrEmptyKey)
//		}
//		return nil
//	}
func unitCheckKey(f *jen.File, j *model.Job) {
	keys := []model.Key{j.Key}
	for _, e := range j.Effects {
		keys = append(keys, e.Key)
	}
	seen := map[*model.Field]bool{}
	f.Comment("checkKey refuses u when a key placeholder renders empty.")
	f.Func().Params(jen.Id("u").Id(j.Unit.GoName)).Id("checkKey").Params().Error().BlockFunc(func(g *jen.Group) {
		for _, k := range keys {
			for _, fld := range k.Fields() {
				empty := emptyCheck(fld, jen.Id("u").Dot(fld.GoName))
				if seen[fld] || empty == nil {
					continue
				}
				seen[fld] = true
				g.If(empty).Block(jen.Return(Errorf().Call(jen.Lit(fmt.Sprintf("%%w: %s (key %q)", fld.Name, k.Text)), rt("ErrEmptyKey"))))
			}
		}
		g.Return(jen.Nil())
	})
}

// emptyCheck is the condition under which a field renders empty in a key,
// or nil where it never does (numbers, times, booleans, UUIDs).
func emptyCheck(f *model.Field, v *jen.Statement) *jen.Statement {
	if f.Pointer() {
		return v.Op("==").Nil()
	}
	switch f.Type {
	case model.String:
		return v.Op("==").Lit("")
	case model.Bytes, model.JSON:
		return jen.Len(v).Op("==").Lit(0)
	}
	return nil
}

// effectKey emits an effect's key function:
//
//	// NotifyNewInvoiceKey returns the notify_new_invoice effect key, "notify:...".
//	func NotifyNewInvoiceKey(u Invoice) string { return ... }
func effectKey(f *jen.File, j *model.Job, e *model.Effect) {
	name := e.GoName + "Key"
	f.Commentf("%s returns the %s effect key for u, %q (version %d).", name, e.Name, e.Key.Text, e.Version)
	f.Func().Id(name).Params(jen.Id("u").Id(j.Unit.GoName)).String().Block(
		jen.Return(keyExpr(e.Key, jen.Id("u"))),
	)
}

// keyExpr concatenates a key's parts into one string expression.
func keyExpr(k model.Key, u *jen.Statement) *jen.Statement {
	var parts []jen.Code
	for _, p := range k.Parts {
		switch {
		case p.Field != nil:
			parts = append(parts, escaped(renderField(p.Field, u.Clone().Dot(p.Field.GoName)), k.Seps))
		case p.SHA256 != nil:
			var args []jen.Code
			for _, f := range p.SHA256 {
				args = append(args, renderField(f, u.Clone().Dot(f.GoName)))
			}
			parts = append(parts, rt("KeySHA256").Call(args...))
		default:
			parts = append(parts, jen.Lit(p.Literal))
		}
	}
	if len(parts) == 0 {
		return jen.Lit("")
	}
	return sumLines(parts)
}

func escaped(s *jen.Statement, seps string) *jen.Statement {
	if seps == "" {
		return s
	}
	return rt("KeyEscape").Call(s, jen.Lit(seps))
}

// renderField renders one field value as key text.
func renderField(f *model.Field, v *jen.Statement) *jen.Statement {
	base := func(v *jen.Statement) *jen.Statement {
		switch f.Type {
		case model.String:
			return v
		case model.Int32:
			return rt("KeyInt").Call(jen.Int64().Call(v))
		case model.Int64:
			return rt("KeyInt").Call(v)
		case model.Float64:
			return rt("KeyFloat").Call(v)
		case model.Bool:
			return rt("KeyBool").Call(v)
		case model.Time:
			return rt("KeyTime").Call(v)
		case model.Bytes:
			return rt("KeyBytes").Call(v)
		case model.JSON:
			return jen.String().Call(v)
		default: // uuid
			return v.Dot("String").Call()
		}
	}
	if !f.Pointer() {
		return base(v)
	}
	// A null renders as the empty string.
	return jen.Func().Params().String().Block(
		jen.If(v.Clone().Op("==").Nil()).Block(jen.Return(jen.Lit(""))),
		jen.Return(base(jen.Op("*").Add(v))),
	).Call()
}

// unitCanonical emits the payload normaliser:
//
//	func (u Invoice) canonical() Invoice { u.CreatedAt = u.CreatedAt.UTC(); ...; return u }
func unitCanonical(f *jen.File, j *model.Job) {
	f.Comment("canonical returns u with times in UTC, so equal instants encode equally.")
	f.Func().Params(jen.Id("u").Id(j.Unit.GoName)).Id("canonical").Params().Id(j.Unit.GoName).BlockFunc(func(g *jen.Group) {
		for _, fld := range j.Unit.Fields {
			if fld.Type != model.Time {
				continue
			}
			x := jen.Id("u").Dot(fld.GoName)
			if fld.Pointer() {
				g.If(x.Clone().Op("!=").Nil()).Block(
					jen.Id("t").Op(":=").Add(x.Clone()).Dot("UTC").Call(),
					x.Clone().Op("=").Op("&").Id("t"),
				)
				continue
			}
			g.Add(x.Clone()).Op("=").Add(x.Clone()).Dot("UTC").Call()
		}
		g.Return(jen.Id("u"))
	})
}

func docLines(f *jen.File, doc string) {
	for _, line := range strings.Split(strings.TrimSpace(doc), "\n") {
		if len(line) <= maxLine {
			f.Comment(line)
			continue
		}
		for _, l := range wrapText(line, maxLine) {
			f.Comment(l)
		}
	}
}

// durationLit writes a duration the way a person would: 10 * time.Minute.
func durationLit(d time.Duration) *jen.Statement {
	for _, u := range []struct {
		name string
		d    time.Duration
	}{{"Hour", time.Hour}, {"Minute", time.Minute}, {"Second", time.Second}, {"Millisecond", time.Millisecond}, {"Microsecond", time.Microsecond}} {
		if d%u.d == 0 {
			return jen.Lit(int(d/u.d)).Op("*").Qual("time", u.name)
		}
	}
	return Duration().Call(jen.Lit(int64(d)))
}
