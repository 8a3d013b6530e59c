// Package templates holds the text idemgen renders: SQL templates, and the
// runtime Go source (idemrt/) that is copied into every generated package.
// It is its own package because //go:embed cannot reach outside its directory.
package templates

import "embed"

// FS holds sql/*.tmpl and the runtime sources idemrt/*.go (tests excluded by the emitter).
//
//go:embed sql/*.tmpl idemrt/*.go
var FS embed.FS
