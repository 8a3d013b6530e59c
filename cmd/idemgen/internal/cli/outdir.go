package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/idemgen/idemgen/generator"
)

// outDir resolves the spec's out against the spec file's directory and
// checks that it stays inside the Go module holding the spec, symlinks
// resolved. The returned path is the lexical one (what the user wrote);
// writes through it land in the checked real directory. importPath is the
// Go import path of that directory, modRoot the module's root. Refusals are diagnostics at out's
// position.
func outDir(specPath string, f *generator.Spec) (dir, importPath, modRoot string, err error) {
	diag := func(format string, args ...any) error {
		return generator.Diagnostics{{File: f.Name, Pos: f.Out.Pos, Msg: fmt.Sprintf(format, args...)}} // an error
	}
	specAbs, err := filepath.Abs(specPath)
	if err != nil {
		return "", "", "", err
	}
	specDir := filepath.Dir(specAbs)
	realSpecDir, err := filepath.EvalSymlinks(specDir)
	if err != nil {
		return "", "", "", err
	}
	mod, ok, err := findModule(realSpecDir)
	if err != nil {
		return "", "", "", diag("%v", err)
	}
	if !ok {
		return "", "", "", diag("no go.mod in %s or any parent; idemgen generates into a Go module", specDir)
	}
	modRoot = mod.Root

	out := "."
	if f.Out.Set {
		out = f.Out.Value
	}
	if out == "" || filepath.IsAbs(out) || strings.HasPrefix(out, "/") || filepath.VolumeName(out) != "" {
		return "", "", "", diag("out %q must be a relative path (relative to the spec file)", out)
	}
	dir = filepath.Join(specDir, filepath.FromSlash(out))
	real, err := realPath(dir)
	if err != nil {
		return "", "", "", diag("out %q: %v", out, err)
	}
	if !within(modRoot, real) {
		return "", "", "", diag("out %q resolves to %s, outside the Go module at %s; generated code must stay inside the module", out, real, modRoot)
	}
	// A go.mod between the module root and out starts another module.
	for d := real; d != modRoot; d = filepath.Dir(d) {
		if fileExists(filepath.Join(d, "go.mod")) {
			return "", "", "", diag("out %q is inside another Go module (%s) than the spec's (%s)", out, filepath.Join(d, "go.mod"), filepath.Join(modRoot, "go.mod"))
		}
	}
	if fi, err := os.Stat(real); err == nil && !fi.IsDir() {
		return "", "", "", diag("out %q is a file, not a directory", out)
	}
	rel, err := filepath.Rel(modRoot, real)
	if err != nil {
		return "", "", "", err
	}
	return dir, path.Join(mod.Path, filepath.ToSlash(rel)), modRoot, nil
}

// realPath resolves symlinks in p, which need not exist yet: the deepest
// existing ancestor is resolved and the missing rest appended.
func realPath(p string) (string, error) {
	var missing []string
	for {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			for i := len(missing) - 1; i >= 0; i-- {
				real = filepath.Join(real, missing[i])
			}
			return real, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		if _, lerr := os.Lstat(p); lerr == nil {
			// p exists but does not resolve: a dangling symlink, which
			// could point anywhere once its target appears.
			return "", fmt.Errorf("%s is a symlink to a missing target", p)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "", err
		}
		missing = append(missing, filepath.Base(p))
		p = parent
	}
}

func within(root, p string) bool {
	rel, err := filepath.Rel(root, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) && !filepath.IsAbs(rel)
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
