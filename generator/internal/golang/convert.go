package golang

import (
	"github.com/dave/jennifer/jen"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// nonNullValue wraps a NOT NULL bytes or json field so that its Go zero
// value (a nil slice) is stored as a value, not as NULL: drivers send a nil
// slice as NULL, which the NOT NULL column refuses. Nil bytes store as empty
// bytes, nil json as JSON null, which is what json.Marshal makes of it in the
// unit's payload too.
func nonNullValue(f *model.Field, v *jen.Statement) *jen.Statement {
	if f.Nullable {
		return v
	}
	switch f.Type {
	case model.Bytes:
		return jen.Id("bytesValue").Call(v)
	case model.JSON:
		return jen.Id("jsonValue").Call(v)
	}
	return v
}

// nonNullHelpers emits the helpers nonNullValue calls, when a destination
// has such a field:
//
//	func bytesValue(b []byte) []byte { if b == nil { return []byte{} }; return b }
//	func jsonValue(b json.RawMessage) json.RawMessage { if b == nil { return json.RawMessage("null") }; return b }
func nonNullHelpers(f *jen.File, p *model.Package) {
	var bytes, json bool
	for _, j := range p.Jobs {
		if j.Dest == nil {
			continue
		}
		for _, fld := range j.Unit.Fields {
			bytes = bytes || !fld.Nullable && fld.Type == model.Bytes
			json = json || !fld.Nullable && fld.Type == model.JSON
		}
	}
	if bytes {
		f.Comment("bytesValue stores a nil slice of a NOT NULL bytes field as empty bytes, not NULL.")
		f.Func().Id("bytesValue").Params(jen.Id("b").Index().Byte()).Index().Byte().Block(
			jen.If(jen.Id("b").Op("==").Nil()).Block(jen.Return(jen.Index().Byte().Values())),
			jen.Return(jen.Id("b")),
		)
	}
	if json {
		f.Comment("jsonValue stores a nil NOT NULL json field as JSON null, as json.Marshal encodes it.")
		f.Func().Id("jsonValue").Params(jen.Id("b").Qual(jsonPkg, "RawMessage")).Qual(jsonPkg, "RawMessage").Block(
			jen.If(jen.Id("b").Op("==").Nil()).Block(jen.Return(jen.Qual(jsonPkg, "RawMessage").Call(jen.Lit("null")))),
			jen.Return(jen.Id("b")),
		)
	}
}
