//go:build idemgen_sqlc

package main

// Built with -tags idemgen_sqlc, idemgen links all of sqlc and is its own
// sqlc child. go tool idemgen builds it without: generate builds its own
// lean sqlc child once instead (generator.SQLCChild); this variant is for
// IDEMGEN_SQLC_EXE, when a machine should keep one binary for both.

import (
	sqlccli "github.com/sqlc-dev/sqlc/pkg/cli"

	"github.com/idemgen/idemgen/generator"
)

func init() { generator.LinkSQLC(sqlccli.Run) }
