//go:build idemgen_sqlc

package main

// Built with -tags idemgen_sqlc, idemgen links sqlc and is its own sqlc
// child. go tool idemgen builds it without: generate then builds this
// variant once (generator/sqlc.Child).
import _ "github.com/idemgen/idemgen/generator/sqlc/linked"
