// Package linked links sqlc into the binary that imports it, so that the
// binary can serve as its own sqlc child (package generator/internal/sqlc).
// Test binaries that generate import it; the idemgen command never does.
package linked

import (
	"github.com/sqlc-dev/sqlc/pkg/cli"

	"github.com/idemgen/idemgen/generator/internal/sqlc"
)

func init() { sqlc.Link(cli.Run) }
