//go:build !idemgen_ops

package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/idemgen/idemgen/generator"
)

func runStatus(e env, args []string) int { return runOpsChild(e, "status", args, 0) }
func runLedger(e env, args []string) int { return runOpsChild(e, "ledger", args, -1) }
func runUI(e env, args []string) int     { return runOpsChild(e, "ui", args, 0) }

// runOpsChild runs the verb in the database child: idemgen built with
// -tags idemgen_ops, with the go command in the current directory's module
// (which requires idemgen, as go get -tool does), the first time it is
// needed, into the user cache directory. Usage errors and -h are answered
// here, without it, and so are a missing -db and spec errors; the rest
// (stdin, stdout, stderr, the exit code) is the child's.
func runOpsChild(e env, verb string, args []string, maxArgs int) int {
	var o options
	if _, code, ok := parseFlags(e, verb, args, maxArgs, &o); !ok {
		return code
	}
	// What needs no database is answered here, as in the child, without
	// building it: a missing -db, a spec that cannot be read or has errors.
	if _, code := opsPackage(e, verb, &o); code != exitOK {
		return code
	}
	if verb == "ui" {
		if code := checkUIAddr(e, &o); code != exitOK {
			return code
		}
	}
	exe := os.Getenv(OpsExeEnv)
	if exe == "" {
		wd, err := os.Getwd()
		if err != nil {
			fmt.Fprintf(e.stderr, "idemgen %s: %v\n", verb, err)
			return exitUsage
		}
		mod, ok, err := findModule(wd)
		if err != nil {
			fmt.Fprintf(e.stderr, "idemgen %s: %v\n", verb, err)
			return exitUsage
		}
		if !ok {
			fmt.Fprintf(e.stderr, "idemgen %s: no go.mod at or above %s: run it inside the module that requires idemgen "+
				"(as go tool idemgen does), where it builds its database child, or set %s to an idemgen built with -tags %s\n",
				verb, wd, OpsExeEnv, opsTag)
			return exitUsage
		}
		exe, err = generator.Child(e.ctx, e.stderr, mod.Root, "ops", "cmd/idemgen", "database child", "the database drivers", "-tags", opsTag)
		if err != nil {
			fmt.Fprintf(e.stderr, "idemgen %s: building idemgen with -tags %s failed: %v\n"+
				"(%s builds it in the module it runs in, which must require idemgen, as go get -tool does; "+
				"or set %s to an idemgen built with -tags %s)\n", verb, opsTag, err, verb, OpsExeEnv, opsTag)
			return exitUsage
		}
	}
	cmd := exec.Command(exe, append([]string{verb}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.stderr, "idemgen %s: %v\n", verb, err)
		return exitUsage
	}
	// An interrupt of this process reaches the child as one: it rolls
	// back and ends, as status and ledger do in process. If it has not
	// ended 10 s later, it is killed.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-e.ctx.Done():
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case err = <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			err = <-done
		}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode()
	default:
		fmt.Fprintf(e.stderr, "idemgen %s: the database child %s: %v\n", verb, strings.TrimSpace(exe), err)
		return exitFail
	}
}
