// Package templates holds the SQL idemgen renders: the queries and
// migrations of a generated package (sql/queries.sql.tmpl,
// sql/migration.sql.tmpl), and the ledger's queries, which the runtime owns
// and compiles once (sql/ledger.sql.tmpl, into idem/idempg and
// idem/idemsqlite). It is its own package because //go:embed cannot reach
// outside its directory.
package templates

import "embed"

// FS holds sql/*.tmpl.
//
//go:embed sql/*.tmpl
var FS embed.FS
