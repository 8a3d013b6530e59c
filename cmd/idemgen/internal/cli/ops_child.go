package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/mod/modfile"

	"github.com/idemgen/idemgen/generator"
)

func runStatus(e Env, args []string) int { return runOps(e, "status", args, 0) }
func runLedger(e Env, args []string) int { return runOps(e, "ledger", args, -1) }
func runUI(e Env, args []string) int     { return runOps(e, "ui", args, 0) }

// linkedOps are status, ledger and ui as the database child runs them,
// keyed by verb; nil in the idemgen command, which runs them in that child.
var linkedOps map[string]func(e Env, args []string) int

// LinkOps links status, ledger and ui into this binary, which then runs
// them itself: the database child, idemgen built with -tags idemgen_ops,
// whose main calls it with the verbs of package cmd/idemgen/internal/ops.
// That package links the database drivers and the runtime.
func LinkOps(status, ledger, ui func(e Env, args []string) int) {
	linkedOps = map[string]func(Env, []string) int{"status": status, "ledger": ledger, "ui": ui}
}

// runOps runs the verb in this process when it is linked, else in the
// database child.
func runOps(e Env, verb string, args []string, maxArgs int) int {
	if run := linkedOps[verb]; run != nil {
		return run(e, args)
	}
	return runOpsChild(e, verb, args, maxArgs)
}

// runOpsChild runs the verb in the database child: idemgen built with
// -tags idemgen_ops, with the go command in the current directory's module
// (which requires idemgen, as go get -tool does), the first time it is
// needed, into the user cache directory. Usage errors and -h are answered
// here, without it, and so are a missing -db and spec errors; the rest
// (stdin, stdout, stderr, the exit code) is the child's.
func runOpsChild(e Env, verb string, args []string, maxArgs int) int {
	var o Options
	if _, code, ok := ParseFlags(e, verb, args, maxArgs, &o); !ok {
		return code
	}
	// What needs no database is answered here, as in the child, without
	// building it: a missing -db, a spec that cannot be read or has errors.
	if _, code := OpsPackage(e, verb, &o); code != ExitOK {
		return code
	}
	if verb == "ui" {
		if code := CheckUIAddr(e, &o); code != ExitOK {
			return code
		}
	}
	exe := os.Getenv(OpsExeEnv)
	if exe == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen %s: %v\n", verb, err)
			return ExitUsage
		}
		mod, ok, err := findModule(wd)
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen %s: %v\n", verb, err)
			return ExitUsage
		}
		if !ok {
			fmt.Fprintf(e.Stderr, "idemgen %s: no go.mod at or above %s: run it inside the module that requires idemgen "+
				"(as go tool idemgen does), where it builds its database child, or set %s to an idemgen built with -tags %s\n",
				verb, wd, OpsExeEnv, opsTag)
			return ExitUsage
		}
		exe, err = buildOpsChild(e, mod.Root)
		if err != nil {
			fmt.Fprintf(e.Stderr, "idemgen %s: building idemgen with -tags %s failed: %v\n"+
				"(%s builds it in the module it runs in, which must require idemgen, as go get -tool does; "+
				"or set %s to an idemgen built with -tags %s)\n", verb, opsTag, err, verb, OpsExeEnv, opsTag)
			return ExitUsage
		}
	}
	// The signals that stop this process stop the child too: an
	// interrupt or a SIGTERM (a supervisor's stop) is passed on as it
	// came, and the child rolls back and ends, as status and ledger do in
	// process; if it has not ended 10 s later, it is killed. A parent
	// killed outright takes the child with it where the system can
	// (diesWithParent: Linux's parent-death signal).
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, stopSignals...)
	defer signal.Stop(stop)
	cmd := exec.Command(exe, append([]string{verb}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	diesWithParent(cmd)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.Stderr, "idemgen %s: %v\n", verb, err)
		return ExitUsage
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case sig := <-stop:
		err = stopChild(cmd, sig, done)
	case <-e.Ctx.Done():
		sig := generator.StopSignal(e.Ctx)
		if sig == nil {
			sig = os.Interrupt
		}
		err = stopChild(cmd, sig, done)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(e.Stderr, "idemgen %s: the database child %s: %v\n", verb, strings.TrimSpace(exe), err)
		return ExitFail
	}
}

// buildOpsChild returns the database child of the module at root, built
// the first time (generator.Child).
func buildOpsChild(e Env, root string) (string, error) {
	return generator.Child(e.Ctx, e.Stderr, root, "ops", "cmd/idemgen", "database child", "the database drivers", "-tags", opsTag)
}

// prebuildOpsChild builds the database child at generate, in a module that
// takes idemgen as its tool (a tool line in its go.mod), when it is not
// built yet: so the first status, ledger or ui answers at once instead of
// building it then. generate is the first verb a service runs, and where
// a build is expected. Nothing is built when this binary links the verbs
// or IDEMGEN_OPS_EXE names the child. A failure is said and is not
// generate's: status builds the child then, and says why it cannot.
func prebuildOpsChild(e Env, modRoot string) {
	if linkedOps != nil || os.Getenv(OpsExeEnv) != "" || modRoot == "" || !takesIdemgenTool(modRoot) {
		return
	}
	if _, err := buildOpsChild(e, modRoot); err != nil {
		fmt.Fprintf(e.Stderr, "idemgen: the database child for status, ledger and ui was not built (they will build it): %v\n", err)
	}
}

// takesIdemgenTool reports whether the go.mod at modRoot has idemgen's
// command as a tool (go get -tool).
func takesIdemgenTool(modRoot string) bool {
	data, err := os.ReadFile(filepath.Join(modRoot, "go.mod"))
	if err != nil {
		return false
	}
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return false
	}
	for _, t := range f.Tool {
		if t.Path == "github.com/idemgen/idemgen/cmd/idemgen" {
			return true
		}
	}
	return false
}

// stopSignals are the signals that stop idemgen, and its children with it.
var stopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// stopChild passes sig on to the child and waits for it to end, killing it
// if it has not after 10 s; it returns what Wait did.
func stopChild(cmd *exec.Cmd, sig os.Signal, done <-chan error) error {
	_ = cmd.Process.Signal(sig)
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		return <-done
	}
}
