// Package cli is idemgen's command line: flags, verbs and exit codes. Main
// returns the exit code instead of exiting, so every verb runs in-process
// in tests.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"

	"github.com/idemgen/idemgen/generator/sqlc"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // spec errors, differences, vet findings, failed generation
	exitUsage = 2
)

const usage = `usage: idemgen <command> [arguments]

commands:
  generate [-f idemgen.yaml] [-v]  write the generated package
  diff [-f idemgen.yaml]           print what generate would change; exit 1 if anything would
  vet [-f idemgen.yaml]            check the spec; exit 1 on any error or warning
  init [dir]                       write a starter idemgen.yaml and generate.go in dir (default .)
  version                          print idemgen's version

Exit status: 0 ok, 1 spec errors, differences or failure, 2 usage error.
Run 'idemgen help <command>' for a command's flags.
`

// env is what every verb gets: its streams and a context cancelled on interrupt.
type env struct {
	ctx            context.Context
	stdin          io.Reader
	stdout, stderr io.Writer
}

type command struct {
	name  string
	args  string // argument synopsis for usage
	about string
	run   func(e env, args []string) int
}

func commands() []command {
	return []command{
		{"generate", "[-f idemgen.yaml] [-v]", "writes the generated package described by the spec", runGenerate},
		{"diff", "[-f idemgen.yaml]", "writes nothing; prints a unified diff of what generate would change\n(changed, missing and stale files) and exits 1 if anything differs", runDiff},
		{"vet", "[-f idemgen.yaml]", "checks the spec and prints every error and warning; exits 1 on any", runVet},
		{"init", "[dir]", "writes a commented starter idemgen.yaml and a generate.go with its\n//go:generate line into dir (default .); never overwrites a file", runInit},
		{"version", "", "prints idemgen's version", runVersion},
	}
}

// Main runs idemgen with args (without the program name) and returns the
// exit code. When the process was started as the sqlc child it runs sqlc
// instead: sqlc exits the process on errors, so it only ever runs there.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if sqlc.IsChild() {
		return sqlc.Main(args)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	e := env{ctx: ctx, stdin: stdin, stdout: stdout, stderr: stderr}

	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch verb := args[0]; verb {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && verb == "help" {
			if c, ok := lookup(args[1]); ok {
				c.flags(stdout, new(string), new(bool)).Usage()
				return exitOK
			}
			fmt.Fprintf(stderr, "idemgen help: unknown command %q\n", args[1])
			return exitUsage
		}
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		c, ok := lookup(verb)
		if !ok {
			fmt.Fprintf(stderr, "idemgen: unknown command %q\n\n%s", verb, usage)
			return exitUsage
		}
		return c.run(e, args[1:])
	}
}

func lookup(name string) (command, bool) {
	for _, c := range commands() {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// flags returns the verb's flag set; -f and -v are bound only for the verbs
// that take them.
func (c command) flags(out io.Writer, file *string, verbose *bool) *flag.FlagSet {
	fs := flag.NewFlagSet("idemgen "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	switch c.name {
	case "generate", "diff", "vet":
		fs.StringVar(file, "f", "idemgen.yaml", "the spec `file`; out is resolved relative to it")
	}
	if c.name == "generate" {
		fs.BoolVar(verbose, "v", false, "list the files written and deleted")
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: idemgen %s %s\n\n%s\n", c.name, c.args, indent(c.about))
		fs.PrintDefaults()
	}
	return fs
}

func indent(s string) string {
	out := "  "
	for _, r := range s {
		out += string(r)
		if r == '\n' {
			out += "  "
		}
	}
	return out
}

// parseFlags parses a verb's arguments. It returns the positional
// arguments, or an exit code when the verb should stop: 0 after -h, 2 after
// a bad flag or too many arguments.
func parseFlags(e env, name string, args []string, maxArgs int, file *string, verbose *bool) ([]string, int, bool) {
	c, _ := lookup(name)
	fs := c.flags(e.stderr, file, verbose)
	// flag prints errors itself; usage is printed here, to stdout when asked for.
	printUsage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = printUsage
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.stdout)
		fs.Usage()
		return nil, exitOK, false
	}
	if err != nil {
		fs.Usage()
		return nil, exitUsage, false
	}
	if fs.NArg() > maxArgs {
		fmt.Fprintf(e.stderr, "idemgen %s: unexpected argument %q\n", name, fs.Arg(maxArgs))
		fs.Usage()
		return nil, exitUsage, false
	}
	return fs.Args(), 0, true
}

func runVersion(e env, args []string) int {
	if _, code, ok := parseFlags(e, "version", args, 0, nil, nil); !ok {
		return code
	}
	fmt.Fprintf(e.stdout, "idemgen %s\n", version())
	return exitOK
}

// version is the main module's version as the go tool recorded it: a
// release tag for `go install` and `go get -tool`, "(devel)" otherwise.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
