// Package sqlc runs sqlc in a child process and collects what it writes.
//
// sqlc's cli.Run calls os.Exit on any SQL or config error, keeps its -f flag
// between calls and is not safe for concurrent use, so idemgen never calls it
// in-process: Runner executes a binary that links sqlc with ChildEnv set:
// the sqlc child (package generator/internal/sqlc/child, sqlc's command line alone),
// or a binary that links package generator/internal/sqlc/linked and calls Main when
// it finds ChildEnv (test binaries).
//
// The idemgen command itself does not link sqlc: sqlc is most of what a
// service compiles before its first generate. Child returns the running
// binary when it links sqlc, and otherwise builds the sqlc child into the
// user's cache directory the first time it is needed (BuildChild), lean
// (lean.go) and with its C code compiled without optimization.
package sqlc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/childbin"
)

// ChildEnv is the environment variable that turns a binary into the sqlc child.
const ChildEnv = "IDEMGEN_SQLC_CHILD"

// ConfigName is the sqlc config file expected among the input files.
const ConfigName = "sqlc.yaml"

// IsChild reports whether this process was started as the sqlc child.
func IsChild() bool { return os.Getenv(ChildEnv) == "1" }

// linkedMain is sqlc's cli.Run when this binary links sqlc (Link).
var linkedMain func(args []string) int

// Link is called by package generator/internal/sqlc/linked, in a binary that links sqlc.
func Link(main func(args []string) int) { linkedMain = main }

// Main is the child's entry point: it runs sqlc with args and returns its exit code.
func Main(args []string) int {
	if linkedMain == nil {
		fmt.Fprintf(os.Stderr, "idemgen: this binary does not link sqlc (the sqlc child is %s)\n", ChildPackage)
		return 2
	}
	return linkedMain(args)
}

// Runner starts Exe as the sqlc child.
type Runner struct {
	Exe string
}

// Self returns a Runner that re-executes the running binary, which must
// link sqlc.
func Self() (Runner, error) {
	if linkedMain == nil {
		return Runner{}, fmt.Errorf("sqlc: this binary does not link sqlc (the sqlc child is %s)", ChildPackage)
	}
	exe, err := os.Executable()
	if err != nil {
		return Runner{}, fmt.Errorf("find own executable for sqlc: %w", err)
	}
	return Runner{Exe: exe}, nil
}

// Child returns a Runner for a binary that links sqlc: the running one if
// it does; else the sqlc child (package generator/internal/sqlc/child), built by
// the go command in moduleDir (the spec's module, which requires idemgen)
// the first time it is needed and kept in the user's cache directory
// (package childbin). Building it is said on stderr.
func Child(ctx context.Context, stderr io.Writer, moduleDir string) (Runner, error) {
	if exe := os.Getenv(ExeEnv); exe != "" {
		return Runner{Exe: exe}, nil
	}
	if linkedMain != nil {
		return Self()
	}
	exe, err := childbin.Get(stderr, moduleDir, "sqlc", childRecipe, "generator/internal/sqlc/child", "sqlc child", "sqlc",
		func(exe, pkg string) error { return BuildChild(ctx, stderr, moduleDir, pkg, exe) })
	if err != nil {
		return Runner{}, fmt.Errorf("sqlc: %w", err)
	}
	return Runner{Exe: exe}, nil
}

// ChildPackage is the import path of the sqlc child's main package.
const ChildPackage = "github.com/idemgen/idemgen/generator/internal/sqlc/child"

// ExeEnv names a binary that links sqlc (the package generator/internal/sqlc/child)
// for Child to use as it is.
const ExeEnv = "IDEMGEN_SQLC_EXE"

// childRecipe names how BuildChild builds the child; a cached child built
// another way is not reused.
const childRecipe = "generator/internal/sqlc/child, lean " + LeanVersion + ", C without optimization"

// BuildChild builds the sqlc child (package pkg, generator/internal/sqlc/child)
// into exe with the go command in moduleDir's module ("": the current
// directory's): lean (lean.go) when sqlc is the version the lean files
// know, else all of sqlc, saying why on stderr. C code (sqlc's PostgreSQL
// parser) is compiled without optimization unless CGO_CFLAGS says
// otherwise: it parses a few statements, and -O2 tripled its build. The
// file appears whole or not at all.
func BuildChild(ctx context.Context, stderr io.Writer, moduleDir, pkg, exe string) error {
	work, err := os.MkdirTemp("", "idemgen-sqlc-build-")
	if err != nil {
		return fmt.Errorf("sqlc: %w", err)
	}
	defer os.RemoveAll(work)
	var env []string
	if _, set := os.LookupEnv("CGO_CFLAGS"); !set {
		env = append(env, "CGO_CFLAGS=-O0")
	}

	childMod, err := childModFile(ctx, moduleDir, work)
	if err != nil {
		return err
	}
	modFile, why, err := leanModFile(ctx, moduleDir, work, childMod)
	if err != nil {
		return err
	}
	if modFile != "" {
		err := childbin.Build(ctx, moduleDir, exe, pkg, env, "-modfile="+modFile, "-ldflags=-s -w")
		if err == nil {
			return nil
		}
		why = fmt.Sprintf("the lean build failed: %v", err)
	}
	fmt.Fprintf(stderr, "idemgen: building all of sqlc (%s)\n", why)
	if err := childbin.Build(ctx, moduleDir, exe, pkg, env, "-modfile="+childMod, "-ldflags=-s -w"); err != nil {
		return fmt.Errorf("sqlc: building idemgen's sqlc child failed: %v\n"+
			"(generate builds it in the module it runs in, which must require idemgen, as go get -tool does; "+
			"or set %s to a sqlc child built elsewhere)", err, ExeEnv)
	}
	return nil
}

// childModFile writes, under work, the go.mod and go.sum the sqlc child is
// built with (go build -modfile) and returns the go.mod's path: a copy of
// moduleDir's go.mod, and its go.sum followed by idemgen's own go.sum. The
// service's go.mod does not require sqlc, nor the modules only sqlc needs
// (the tool's package does not import sqlc, so go mod tidy leaves them
// out); idemgen's go.mod requires them, so they are in the build list,
// and idemgen's go.sum holds their checksums. The service's go.mod and
// go.sum are never written.
func childModFile(ctx context.Context, moduleDir, work string) (string, error) {
	cmd := childbin.Command(ctx, "go", "env", "GOMOD")
	cmd.Dir = moduleDir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("sqlc: go env GOMOD: %v%s", err, exitStderr(err))
	}
	modPath := strings.TrimSpace(string(out))
	if modPath == "" || modPath == os.DevNull {
		return "", fmt.Errorf("sqlc: generate builds its sqlc child in the module it runs in, and %s is in none "+
			"(or set %s to a sqlc child built elsewhere)", moduleDir, ExeEnv)
	}
	goMod, err := os.ReadFile(modPath)
	if err != nil {
		return "", fmt.Errorf("sqlc: %w", err)
	}
	goSum, err := os.ReadFile(sumFile(modPath))
	if err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("sqlc: %w", err)
	}
	// idemgen's module as this module's go command finds it: the module
	// cache's copy of the version required, or the directory of a replace
	// (this module itself, in idemgen's own checkout).
	cmd = childbin.Command(ctx, "go", "list", "-m", "-json", idemgenModule)
	cmd.Dir = moduleDir
	if out, err := cmd.Output(); err == nil {
		var m struct{ Dir string }
		if json.Unmarshal(out, &m) == nil && m.Dir != "" {
			own, err := os.ReadFile(filepath.Join(m.Dir, "go.sum"))
			if err != nil && !os.IsNotExist(err) {
				return "", fmt.Errorf("sqlc: idemgen's go.sum: %w", err)
			}
			if len(goSum) > 0 && !bytes.HasSuffix(goSum, []byte("\n")) {
				goSum = append(goSum, '\n')
			}
			goSum = append(goSum, own...)
		}
	}
	childMod := filepath.Join(work, "child.mod")
	if err := os.WriteFile(childMod, goMod, 0o644); err != nil {
		return "", fmt.Errorf("sqlc: %w", err)
	}
	if err := os.WriteFile(sumFile(childMod), goSum, 0o644); err != nil {
		return "", fmt.Errorf("sqlc: %w", err)
	}
	return childMod, nil
}

// idemgenModule is idemgen's module path.
const idemgenModule = "github.com/idemgen/idemgen"

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
	cmd := childbin.Command(ctx, r.Exe, "generate", "-f", filepath.Join(dir, ConfigName))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), ChildEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stdout = io.Discard
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sqlc: stopped: %w", context.Cause(ctx))
		}
		msg := strings.TrimSpace(strings.ReplaceAll(withoutNotice(stderr.String()), dir+string(filepath.Separator), ""))
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

// withoutNotice drops the line that the SQLite driver's deprecated embed
// package, which sqlc imports, prints in every process: it says nothing
// about the SQL.
func withoutNotice(s string) string {
	var keep []string
	for _, line := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(line, "If you're reading this, you're unnecessarily importing github.com/ncruces/go-sqlite3/embed") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "")
}
