// Command idemgen turns a YAML spec of idempotent jobs into a Go package.
//
// Usage:
//
//	idemgen generate [-f idemgen.yaml] [-v] [-strict]
//	idemgen diff [-f idemgen.yaml | packages] [-strict]
//	idemgen vet [-f idemgen.yaml | packages] [-strict]
//	idemgen lint [-fix] [packages]
//	idemgen init [dir]
//	idemgen status -db URL [-f idemgen.yaml] [-json]
//	idemgen ledger -db URL [-f idemgen.yaml] list|show|retry|reset ...
//	idemgen ui -db URL [-f idemgen.yaml] [-addr 127.0.0.1:8080] [-allow-actions]
//	idemgen version
//
// Service repositories add it with `go get -tool github.com/idemgen/idemgen/cmd/idemgen`
// and run it from a `//go:generate go tool idemgen generate` line. The
// checks of lint also run under `go vet -vettool=$(which idemgen)`.
package main

import (
	"os"

	"golang.org/x/tools/go/analysis/unitchecker"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/cli"
	"github.com/idemgen/idemgen/generator"
)

func main() {
	// go vet -vettool runs idemgen once per package with the unitchecker
	// protocol (-V=full, -flags, a .cfg file). unitchecker.Main parses the
	// process's flags and exits the process itself, and x/tools has no
	// entry point for it that returns, so it gets the process before
	// cli.Main, and only then.
	if cli.IsVetTool(os.Args[1:]) {
		unitchecker.Main(generator.Analyzers()...)
	}
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
