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
	"strings"
	"time"

	"github.com/idemgen/idemgen/generator"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitFail  = 1 // spec errors, differences, vet and lint findings, failed generation
	ExitUsage = 2 // usage errors, a spec that cannot be found or read, packages that do not load
)

const usage = `usage: idemgen <command> [arguments]

commands:
  generate [-f idemgen.yaml] [-v] [-strict]    write the generated package
  diff [-f idemgen.yaml | packages] [-strict]  print what generate would change; exit 1 if anything would
  vet [-f idemgen.yaml | packages] [-strict]   check the spec; exit 1 on errors (and warnings with -strict)
  lint [-fix] [packages]                       check the Go code that uses generated packages; exit 1 on findings
  init [dir]                                   write a starter idemgen.yaml and generate.go in dir (default .)
  status -db URL [-f idemgen.yaml] [-json]     print each job's progress, owed and parked work; exit 1 if unhealthy
  ledger -db URL [-f idemgen.yaml] list|show|retry|reset|lift ...
                                               inspect ledger rows and parked units, put parked ones back, forget a key
  ui -db URL [-f idemgen.yaml] [-addr 127.0.0.1:8080] [-allow-actions]
                                               serve the operations page on this machine (read-only by default)
  version                                      print idemgen's version

Packages are patterns as for the go command (./..., ./jobs, example.com/svc/...);
diff and vet work on every idemgen.yaml they find there.
Exit status: 0 ok, 1 spec errors, differences, findings or failure,
2 usage error, a spec that cannot be found or read, or packages that do not load.
Run 'idemgen help <command>' for a command's flags.
`

// Env is what every verb gets: its streams and a context cancelled on interrupt.
type Env struct {
	Ctx            context.Context
	Stdin          io.Reader
	Stdout, Stderr io.Writer
}

type command struct {
	name  string
	args  string // argument synopsis for usage
	about string
	run   func(e Env, args []string) int
	// interleaved lets flags follow positional arguments (ledger reset KEY -force).
	interleaved bool
}

func commands() []command {
	return []command{
		{"generate", "[-f idemgen.yaml] [-v] [-strict]", "writes the generated package described by the spec; warnings are printed\nand stop nothing unless -strict", runGenerate, false},
		{"diff", "[-f idemgen.yaml | packages] [-strict]", "writes nothing; prints a unified diff of what generate would change\n(changed, missing and stale files) and exits 1 if anything differs.\nWith package patterns (./...), it does so for every idemgen.yaml there", runDiff, false},
		{"vet", "[-f idemgen.yaml | packages] [-strict]", "checks the spec and prints every error and warning; exits 1 on errors,\nand on warnings too with -strict. With package patterns (./...), it checks\nevery idemgen.yaml there", runVet, false},
		{"lint", "[-fix] [packages]", "checks the Go code around generated packages (default: the package in .):\neffect implementations that drop or rewrite their idempotency key or drop\nthe provider's error, unit keys made from the clock or randomness, and\ndropped Process results. Exits 1 on findings, 2 when packages do not load.\nThe same checks run under go vet -vettool=$(which idemgen)", runLint, false},
		{"init", "[dir]", "writes a commented starter idemgen.yaml and a generate.go with its\n//go:generate line into dir (default .); never overwrites a file", runInit, false},
		{"version", "", "prints idemgen's version", runVersion, false},
		{"status", "-db URL [-f idemgen.yaml] [-json]", statusAbout, runStatus, false},
		{"ledger", "-db URL [-f idemgen.yaml] list|show|retry|reset|lift|limit|pause [flags] [KEY | JOB EFFECT]", ledgerAbout, runLedger, true},
		{"ui", "-db URL [-f idemgen.yaml] [-addr 127.0.0.1:8080] [-allow-actions] [-allow-remote] [-redact]", uiAbout, runUI, false},
	}
}

// Main runs idemgen with args (without the program name) and returns the
// exit code. When the process was started as the sqlc child it runs sqlc
// instead: sqlc exits the process on errors, so it only ever runs there.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if generator.IsSQLCChild() {
		return generator.SQLCMain(args)
	}
	// SIGTERM (a supervisor's stop) ends a verb as an interrupt does, and
	// with it the children it started (the database child, sqlc, go), which
	// are passed the signal (generator.StopCause).
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, stopSignals...)
	defer signal.Stop(sigs)
	go func() {
		select {
		case sig := <-sigs:
			cancel(generator.StopCause(sig))
		case <-ctx.Done():
		}
	}()
	e := Env{Ctx: ctx, Stdin: stdin, Stdout: stdout, Stderr: stderr}

	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitUsage
	}
	switch verb := args[0]; verb {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 && verb == "help" {
			if c, ok := lookup(args[1]); ok {
				c.flags(stdout, new(Options)).Usage()
				return ExitOK
			}
			fmt.Fprintf(stderr, "idemgen help: unknown command %q\n", args[1])
			return ExitUsage
		}
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		c, ok := lookup(verb)
		if !ok {
			fmt.Fprintf(stderr, "idemgen: unknown command %q\n\n%s", verb, usage)
			return ExitUsage
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

// Options are the flags of all verbs; each verb binds those it takes.
type Options struct {
	File    string // -f
	FileSet bool   // whether -f was given
	Verbose bool   // -v
	Strict  bool   // -strict
	Fix     bool   // -fix
	// status and ledger
	DB        string // -db
	JSON      bool   // -json
	Job       string // -job
	Effect    string // -effect
	State     string // -state
	Prefix    string // -prefix
	Limit     int    // -limit
	After     string // -after
	Force     bool   // -force
	AllParked bool   // -all-parked
	Errors    bool   // -errors
	// ledger limit and pause
	Rate        string        // -rate
	Concurrency int           // -concurrency
	Reset       bool          // -reset
	For         time.Duration // -for
	By          string        // -by
	// ui
	Addr         string          // -addr
	AllowActions bool            // -allow-actions
	AllowRemote  bool            // -allow-remote
	Redact       bool            // -redact
	Set          map[string]bool // the flags given
}

// flags returns the verb's flag set.
func (c command) flags(out io.Writer, o *Options) *flag.FlagSet {
	fs := flag.NewFlagSet("idemgen "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	switch c.name {
	case "generate", "diff", "vet":
		fs.StringVar(&o.File, "f", specName, "the spec `file`; out is resolved relative to it")
		fs.BoolVar(&o.Strict, "strict", false, "treat warnings as errors")
	case "status", "ledger", "ui":
		fs.StringVar(&o.File, "f", specName, "the spec `file` of the package whose tables to read")
		fs.StringVar(&o.DB, "db", "", "the database: a PostgreSQL `URL` (postgres://..., search_path=... for a schema) or a SQLite file")
		if c.name != "ui" {
			fs.BoolVar(&o.JSON, "json", false, "print JSON, for scripts")
		}
	}
	switch c.name {
	case "generate":
		fs.BoolVar(&o.Verbose, "v", false, "list the files written and deleted")
	case "lint":
		fs.BoolVar(&o.Fix, "fix", false, "apply the suggested fixes to the files instead of failing on them")
	case "ui":
		fs.StringVar(&o.Addr, "addr", "127.0.0.1:8080", "the `address` to serve on; a non-loopback one needs -allow-remote")
		fs.BoolVar(&o.AllowActions, "allow-actions", false, "serve the retry and forget actions (loopback only); without it the page is read-only")
		fs.BoolVar(&o.AllowRemote, "allow-remote", false, "serve on a non-loopback -addr (read-only: idemgen ui has no authentication)")
		fs.BoolVar(&o.Redact, "redact", false, "hide every stored payload and result")
	case "ledger":
		fs.StringVar(&o.Job, "job", "", "only rows of this `job`")
		fs.StringVar(&o.Effect, "effect", "", "list: only ledger rows of this `effect`")
		fs.StringVar(&o.State, "state", "", "list: only rows in this `state`: "+strings.Join(ledgerStates, ", ")+" (parked: effects and units)")
		fs.StringVar(&o.Prefix, "prefix", "", "list: only rows whose key starts with `text`")
		fs.IntVar(&o.Limit, "limit", 100, "list: at most `n` rows in a page; 0 for all")
		fs.StringVar(&o.After, "after", "", "list: the page after `cursor`, as the previous page printed it")
		fs.BoolVar(&o.Errors, "errors", false, "list: also show a done row's last error, from an attempt before it was done, marked history")
		fs.BoolVar(&o.Force, "force", false, "reset: remove the rows; without it reset prints what it would remove and exits 1")
		fs.BoolVar(&o.AllParked, "all-parked", false, "retry: every parked effect and unit (of -job, or of every job of the spec)")
		fs.StringVar(&o.Rate, "rate", "", "limit: at most `N/period` provider calls across the fleet (20/s, 600/m, 1000/h)")
		fs.IntVar(&o.Concurrency, "concurrency", 0, "limit: at most `n` provider calls at once across the fleet")
		fs.BoolVar(&o.Reset, "reset", false, "limit: go back to the spec's rate and concurrency")
		fs.DurationVar(&o.For, "for", 0, "pause: how long the effect stays paused (`duration`: 30m, 2h)")
		fs.StringVar(&o.By, "by", "", "limit, pause: who does it, logged and shown by status (default: $USER)")
	}
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: idemgen %s %s\n\n%s\n", c.name, c.args, indent(c.about))
		fs.PrintDefaults()
		if c.name == "lint" {
			fmt.Fprintf(fs.Output(), "\nchecks:\n%s", lintHelp())
		}
	}
	return fs
}

func indent(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = "  " + l
		}
	}
	return strings.Join(lines, "\n")
}

// ParseFlags parses a verb's arguments into o. It returns the positional
// arguments, or an exit code when the verb should stop: 0 after -h, 2
// after a bad flag or more than maxArgs arguments (maxArgs < 0: any number).
// An interleaved verb's flags may also follow its positional arguments.
func ParseFlags(e Env, name string, args []string, maxArgs int, o *Options) ([]string, int, bool) {
	c, _ := lookup(name)
	if o == nil {
		o = new(Options)
	}
	fs := c.flags(e.Stderr, o)
	// flag prints errors itself; usage is printed here, to stdout when asked for.
	printUsage := fs.Usage
	fs.Usage = func() {}
	var positional []string
	err := fs.Parse(args)
	for c.interleaved && err == nil && fs.NArg() > 0 {
		positional = append(positional, fs.Arg(0))
		err = fs.Parse(fs.Args()[1:])
	}
	positional = append(positional, fs.Args()...)
	fs.Usage = printUsage
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(e.Stdout)
		fs.Usage()
		return nil, ExitOK, false
	}
	if err != nil {
		fs.Usage()
		return nil, ExitUsage, false
	}
	if maxArgs >= 0 && len(positional) > maxArgs {
		fmt.Fprintf(e.Stderr, "idemgen %s: unexpected argument %q\n", name, positional[maxArgs])
		fs.Usage()
		return nil, ExitUsage, false
	}
	o.Set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.Set[f.Name] = true })
	o.FileSet = o.Set["f"]
	return positional, 0, true
}

func runVersion(e Env, args []string) int {
	if _, code, ok := ParseFlags(e, "version", args, 0, nil); !ok {
		return code
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintf(e.Stdout, "idemgen %s\n", version(bi))
	return ExitOK
}

// modulePath is idemgen's own module.
const modulePath = "github.com/idemgen/idemgen"

// version is the version of idemgen's module as the go tool recorded it.
// idemgen is the main module when installed (go install ...@v1.2.3), and a
// dependency of the service's module when run as a tool (go get -tool,
// go tool idemgen): then its version is the one the service requires. A
// checkout or a replacement by a directory has none: "(devel)".
func version(bi *debug.BuildInfo) string {
	if bi == nil {
		return "(devel)"
	}
	mod := &bi.Main
	if mod.Path != modulePath {
		mod = nil
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				mod = d
			}
		}
	}
	if mod != nil && mod.Replace != nil {
		mod = mod.Replace
	}
	if mod != nil && mod.Version != "" {
		return mod.Version
	}
	return "(devel)"
}
