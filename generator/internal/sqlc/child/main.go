// Command child is idemgen's sqlc child: sqlc's command line, which
// generate runs in a process of its own (package generator/internal/sqlc). It is
// built on a user's machine the first time generate needs it, lean when it
// can be (generator/internal/sqlc/lean.go).
package main

import (
	"os"

	"github.com/sqlc-dev/sqlc/pkg/cli"
)

func main() { os.Exit(cli.Run(os.Args[1:])) }
