// Package childbin builds the programs the idemgen command runs as
// children, from idemgen's module with the go command in the service's
// module (which requires idemgen, as go get -tool does), once each, into
// the user cache directory: the sqlc child (generator/sqlc) and the
// database child of status and ledger (cmd/idemgen/cli). The idemgen
// command links neither sqlc nor the database drivers, which are most of
// what a service compiles before its first generate.
package childbin

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
)

// Path returns where the child named name is kept and the import path of
// package pkg of idemgen's module (pkg relative to the module, like
// "cmd/idemgen"). The file name changes with recipe (how the child is
// built), idemgen's module version, moduleDir's go.mod (where every other
// version is decided), Go's version and the platform: what the child is
// made of. (Not with the executable's path: go tool runs a fresh build
// from one place and a cached one from another.)
func Path(moduleDir, name, recipe, pkg string) (exe, importPath string, err error) {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "", "", fmt.Errorf("this binary has no build information to build its %s child from", name)
	}
	h := sha256.New()
	fmt.Fprintln(h, recipe, info.Main.Path, info.Main.Version, info.Main.Sum, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if data, err := os.ReadFile(filepath.Join(moduleDir, "go.mod")); err == nil {
		h.Write(data)
	}
	file := "idemgen-" + name + "-" + hex.EncodeToString(h.Sum(nil)[:8])
	if runtime.GOOS == "windows" {
		file += ".exe"
	}
	dir, err := os.UserCacheDir()
	if err == nil {
		dir = filepath.Join(dir, "idemgen")
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, file), info.Main.Path + "/" + pkg, nil
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
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return os.Rename(tmp.Name(), exe)
}
