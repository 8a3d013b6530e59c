// Package templates holds the text idemgen renders: SQL templates, and the
// ledger adapters (idemrt/) copied into every generated package over its sqlc code.
// It is its own package because //go:embed cannot reach outside its directory.
package templates

import "embed"

// FS holds sql/*.tmpl and the ledger adapters idemrt/*.go.
//
//go:embed sql/*.tmpl idemrt/*.go
var FS embed.FS
