package generator

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/childbin"
)

// Child returns a program of idemgen's module that the idemgen command
// runs as a child (as it runs the sqlc child): package pkg (a path in the
// module, like "cmd/idemgen"), built with the go command and flags in
// moduleDir's module (which requires idemgen, as go get -tool does) the
// first time it is needed and kept in the user cache directory, so that
// the command itself need not link what the child does. Building it is
// said on stderr: "building its <what> ... (once: it compiles <compiles>)".
func Child(ctx context.Context, stderr io.Writer, moduleDir, name, pkg, what, compiles string, flags ...string) (string, error) {
	recipe := strings.Join(append([]string{pkg}, flags...), " ")
	return childbin.Get(stderr, moduleDir, name, recipe, pkg, what, compiles,
		func(exe, importPath string) error {
			return childbin.Build(ctx, moduleDir, exe, importPath, nil, flags...)
		})
}

// StopCause is the cause with which the idemgen command cancels the
// context it gives Generate and SQLCChild when sig stops it: every child
// they start (the sqlc child, the go command) is then passed sig, and
// killed if it has not ended 10 s later. Any other cancellation passes
// SIGTERM. On Linux a child also ends when idemgen is killed outright.
func StopCause(sig os.Signal) error { return childbin.Signaled{Signal: sig} }

// StopSignal is the signal that cancelled ctx (StopCause), or nil.
func StopSignal(ctx context.Context) os.Signal {
	var s childbin.Signaled
	if errors.As(context.Cause(ctx), &s) {
		return s.Signal
	}
	return nil
}
