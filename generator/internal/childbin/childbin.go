// Package childbin builds the programs the idemgen command runs as
// children, from idemgen's module with the go command in the service's
// module (which requires idemgen, as go get -tool does), once each, into
// the user cache directory: the sqlc child (generator/internal/sqlc) and the
// database child of status and ledger (cmd/idemgen/internal/cli). The idemgen
// command links neither sqlc nor the database drivers, which are most of
// what a service compiles before its first generate.
package childbin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// Path returns where the child named name is kept and the import path of
// package pkg of idemgen's module (pkg relative to the module, like
// "cmd/idemgen"). The file name changes with recipe (how the child is
// built), idemgen's module version, what of moduleDir's go.mod decides
// every other version (buildLines: not its layout, so go mod tidy moving a
// requirement between the direct and the indirect block after generate
// leaves the children generate built current), Go's version and the
// platform: what the child is made of. (Not with the executable's path:
// go tool runs a fresh build from one place and a cached one from another.)
func Path(moduleDir, name, recipe, pkg string) (exe, importPath string, err error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", "", fmt.Errorf("this binary has no build information to build its %s child from", name)
	}
	h := sha256.New()
	fmt.Fprintln(h, recipe, info.Main.Path, info.Main.Version, info.Main.Sum, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if data, err := os.ReadFile(filepath.Join(moduleDir, "go.mod")); err == nil {
		h.Write(buildLines(data))
	}
	file := "idemgen-" + name + "-" + hex.EncodeToString(h.Sum(nil)[:8])
	if runtime.GOOS == "windows" {
		file += ".exe"
	}
	return filepath.Join(Dir(), file), info.Main.Path + "/" + pkg, nil
}

// Dir is where idemgen keeps what it builds once: idemgen/ in the user
// cache directory, else the temporary directory.
func Dir() string {
	dir, err := os.UserCacheDir()
	if err == nil {
		dir = filepath.Join(dir, "idemgen")
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		return os.TempDir()
	}
	return dir
}

// Get returns the child named name (Path), which build makes the first
// time, after saying on stderr that it builds what (the sqlc child, the
// database child) and what that compiles, once.
func Get(stderr io.Writer, moduleDir, name, recipe, pkg, what, compiles string, build func(exe, importPath string) error) (string, error) {
	exe, importPath, err := Path(moduleDir, name, recipe, pkg)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(exe); err == nil {
		return exe, nil
	}
	fmt.Fprintf(stderr, "idemgen: building its %s into %s (once: it compiles %s)\n", what, exe, compiles)
	if err := build(exe, importPath); err != nil {
		return "", err
	}
	return exe, nil
}

// Build runs `go build flags -o exe pkg` in moduleDir ("": the current
// directory) with env added to the environment, so that exe appears whole
// or not at all. On failure it returns the go command's output with the
// error.
func Build(ctx context.Context, moduleDir, exe, pkg string, env []string, flags ...string) error {
	tmp, err := os.CreateTemp(filepath.Dir(exe), filepath.Base(exe)+".tmp-*")
	if err != nil {
		return err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	args := append(append([]string{"build"}, flags...), "-o", tmp.Name(), pkg)
	cmd := Command(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return os.Rename(tmp.Name(), exe)
}

// buildLines is what of a go.mod decides a build: its go and toolchain
// lines, requirements, replacements and exclusions, one a line, sorted; the
// go.mod as it is when it does not parse.
func buildLines(data []byte) []byte {
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return data
	}
	var lines []string
	if f.Go != nil {
		lines = append(lines, "go "+f.Go.Version)
	}
	if f.Toolchain != nil {
		lines = append(lines, "toolchain "+f.Toolchain.Name)
	}
	for _, r := range f.Require {
		lines = append(lines, "require "+r.Mod.String())
	}
	for _, r := range f.Replace {
		lines = append(lines, "replace "+r.Old.String()+" => "+r.New.String())
	}
	for _, x := range f.Exclude {
		lines = append(lines, "exclude "+x.Mod.String())
	}
	slices.Sort(lines)
	return []byte(strings.Join(lines, "\n"))
}
