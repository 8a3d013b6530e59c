package golang

import (
	"strings"

	"github.com/dave/jennifer/jen"
)

// maxLine is the width generated lines are kept under where the emitter
// decides the layout (the generated code is read by people, and reviewed).
const maxLine = 100

// multiValues is a composite literal's values, one a line:
//
//	{
//		idemtest.PointRunStart,
//		idemtest.PointBatchBegin,
//	}
func multiValues(items ...jen.Code) *jen.Statement {
	return jen.Custom(jen.Options{Open: "{", Close: "}", Separator: ",", Multi: true}, items...)
}

// wrapText splits text at spaces into lines of at most width bytes (a
// longer word keeps a line of its own).
func wrapText(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		if line != "" && len(line)+1+len(word) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += word
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// textLit is a string literal of text, a sum of pieces a line each when it
// is long: "Take receipts ... " +\n"and ...". The pieces keep every byte.
func textLit(text string) *jen.Statement {
	if len(text) <= maxLine {
		return jen.Lit(text)
	}
	var pieces []string
	for rest := text; rest != ""; {
		cut := len(rest)
		if cut > maxLine {
			// Cut after the last space within the width, or at the width.
			cut = strings.LastIndexByte(rest[:maxLine], ' ') + 1
			if cut <= 0 {
				cut = maxLine
			}
		}
		pieces = append(pieces, rest[:cut])
		rest = rest[cut:]
	}
	s := jen.Lit(pieces[0])
	for _, p := range pieces[1:] {
		s = s.Op("+").Line().Lit(p)
	}
	return s
}

// rawLit is text as a raw string literal, its lines the text's, when it
// has no backquote; a quoted literal otherwise.
func rawLit(text string) jen.Code {
	if strings.Contains(text, "`") || strings.Contains(text, "\r") {
		return jen.Lit(text)
	}
	return jen.Op("`" + text + "`")
}

// sumLines is parts joined by +, breaking the line after a + where the
// next part would take it past maxLine.
func sumLines(parts []jen.Code) *jen.Statement {
	s := jen.Add(parts[0])
	width := codeWidth(parts[0])
	for _, p := range parts[1:] {
		w := codeWidth(p)
		if width+len(" + ")+w > maxLine {
			s = s.Op("+").Line().Add(p)
			width = w
			continue
		}
		s = s.Op("+").Add(p)
		width += len(" + ") + w
	}
	return s
}

// codeWidth is about how wide c renders (package names as their paths'
// last elements).
func codeWidth(c jen.Code) int {
	return len(jen.Add(c).GoString())
}
