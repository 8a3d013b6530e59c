//go:build idemgen_ops

package main

// Built with -tags idemgen_ops, idemgen links status, ledger and ui (and
// with them the database drivers and the runtime) and runs them itself:
// it is the database child that go tool idemgen builds and runs for those
// verbs (internal/cli/ops_child.go). The verbs are compiled and vetted in every
// build; only this link is left out of the command's.

import (
	"github.com/idemgen/idemgen/cmd/idemgen/internal/cli"
	"github.com/idemgen/idemgen/cmd/idemgen/internal/ops"
)

func init() { cli.LinkOps(ops.Status, ops.Ledger, ops.UI) }
