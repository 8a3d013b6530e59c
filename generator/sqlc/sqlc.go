// Package sqlc runs sqlc in a child process and collects what it writes.
//
// sqlc's cli.Run calls os.Exit on any SQL or config error, keeps its -f flag
// between calls and is not safe for concurrent use, so idemgen never calls it
// in-process: Runner re-executes a binary (our own, or a test binary) with
// ChildEnv set, and that process calls Main.
package sqlc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/sqlc-dev/sqlc/pkg/cli"
)

// ChildEnv is the environment variable that turns a binary into the sqlc child.
const ChildEnv = "IDEMGEN_SQLC_CHILD"

// ConfigName is the sqlc config file expected among the input files.
const ConfigName = "sqlc.yaml"

// IsChild reports whether this process was started as the sqlc child.
func IsChild() bool { return os.Getenv(ChildEnv) == "1" }

// Main is the child's entry point: it runs sqlc with args and returns its exit code.
func Main(args []string) int { return cli.Run(args) }

// Runner starts Exe as the sqlc child.
type Runner struct {
	Exe string
}

// Self returns a Runner that re-executes the running binary.
func Self() (Runner, error) {
	exe, err := os.Executable()
	if err != nil {
		return Runner{}, fmt.Errorf("find own executable for sqlc: %w", err)
	}
	return Runner{Exe: exe}, nil
}

// Run writes the input files (which must include sqlc.yaml) to a temporary
// directory, runs `sqlc generate` there, and returns every file sqlc wrote,
// keyed by slash path relative to that directory.
func (r Runner) Run(ctx context.Context, in map[string][]byte) (map[string][]byte, error) {
	if _, ok := in[ConfigName]; !ok {
		return nil, fmt.Errorf("sqlc: no %s among the input files", ConfigName)
	}
	dir, err := os.MkdirTemp("", "idemgen-sqlc-")
	if err != nil {
		return nil, fmt.Errorf("sqlc: %w", err)
	}
	defer os.RemoveAll(dir)
	for name, data := range in {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, fmt.Errorf("sqlc: %w", err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, fmt.Errorf("sqlc: %w", err)
		}
	}
	// Always an absolute -f: sqlc resolves everything relative to it.
	cmd := exec.CommandContext(ctx, r.Exe, "generate", "-f", filepath.Join(dir, ConfigName))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(strings.ReplaceAll(stderr.String(), dir+string(filepath.Separator), ""))
		return nil, fmt.Errorf("sqlc rejected the emitted SQL (an idemgen bug; please report it):\n%s\n(%v)", msg, err)
	}
	out := map[string][]byte{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if _, input := in[rel]; input {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = data
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlc: collect output: %w", err)
	}
	return out, nil
}
