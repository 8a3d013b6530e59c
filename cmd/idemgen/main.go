// Command idemgen turns a YAML spec of idempotent jobs into a Go package.
//
// Usage:
//
//	idemgen generate [-f idemgen.yaml] [-v]
//	idemgen diff [-f idemgen.yaml]
//	idemgen vet [-f idemgen.yaml]
//	idemgen init [dir]
//	idemgen version
//
// Service repositories add it with `go get -tool github.com/idemgen/idemgen/cmd/idemgen`
// and run it from a `//go:generate go tool idemgen generate` line.
package main

import (
	"os"

	"github.com/idemgen/idemgen/cmd/idemgen/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
