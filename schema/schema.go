// Package schema provides the JSON Schema of the idemgen spec, for editors
// (yaml-language-server completes and checks a spec that names it) and for
// tools that validate specs without idemgen.
//
// The schema covers structure: keys, types, enums, name patterns. What it
// cannot express (key placeholders, references between fields, names unique
// across the spec) is checked by idemgen vet; see generator/internal/spec.
package schema

import (
	_ "embed"
)

// FileName is the schema's file name in this directory.
const FileName = "idemgen.schema.json"

// ID is the schema's $id.
const ID = "urn:idemgen:spec:v1"

//go:embed idemgen.schema.json
var schemaJSON string

// JSON returns the JSON Schema (draft 2020-12) of spec version 1.
func JSON() []byte { return []byte(schemaJSON) }
