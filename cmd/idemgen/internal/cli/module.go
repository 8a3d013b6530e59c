package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/modfile"
)

// goModule is a Go module on disk: where its go.mod is and what it is called.
type goModule struct {
	Root string // the directory holding go.mod
	Path string // the module path
}

// findModule returns the module holding dir: the nearest go.mod at or above
// it, read with golang.org/x/mod/modfile. ok is false when there is none.
func findModule(dir string) (m goModule, ok bool, err error) {
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			m, err := readModule(dir)
			return m, err == nil, err
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return goModule{}, false, nil
		}
		dir = parent
	}
}

// readModule reads the go.mod in root. ParseLax, as the go command does for
// modules other than the main one: directives a newer go added are skipped.
func readModule(root string) (goModule, error) {
	gomod := filepath.Join(root, "go.mod")
	data, err := os.ReadFile(gomod)
	if err != nil {
		return goModule{}, err
	}
	f, err := modfile.ParseLax(gomod, data, nil)
	if err != nil {
		return goModule{}, err
	}
	if f.Module == nil || f.Module.Mod.Path == "" {
		return goModule{}, fmt.Errorf("%s has no module directive", gomod)
	}
	return goModule{Root: root, Path: f.Module.Mod.Path}, nil
}

// workspace returns the modules of the go.work in effect in dir, as the go
// command picks it: $GOWORK when set ("off" for none), else the nearest
// go.work at or above dir. It returns nil when there is no workspace.
func workspace(dir string) ([]goModule, error) {
	gowork := os.Getenv("GOWORK")
	switch {
	case gowork == "off":
		return nil, nil
	case gowork == "":
		for d := dir; ; d = filepath.Dir(d) {
			if fileExists(filepath.Join(d, "go.work")) {
				gowork = filepath.Join(d, "go.work")
				break
			}
			if filepath.Dir(d) == d {
				return nil, nil
			}
		}
	}
	data, err := os.ReadFile(gowork)
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork(gowork, data, nil)
	if err != nil {
		return nil, err
	}
	var mods []goModule
	for _, u := range wf.Use {
		root := filepath.FromSlash(u.Path)
		if !filepath.IsAbs(root) {
			root = filepath.Join(filepath.Dir(gowork), root)
		}
		m, err := readModule(filepath.Clean(root))
		if errors.Is(err, fs.ErrNotExist) {
			continue // the go command reports it; it holds no specs either way
		}
		if err != nil {
			return nil, err
		}
		mods = append(mods, m)
	}
	return mods, nil
}

// moduleFor returns the module whose path is importPath or a prefix of it,
// among mods, the longest first, and the directory the import path names.
func moduleFor(mods []goModule, importPath string) (dir string, ok bool) {
	best := -1
	for i, m := range mods {
		if (importPath == m.Path || strings.HasPrefix(importPath, m.Path+"/")) && (best < 0 || len(m.Path) > len(mods[best].Path)) {
			best = i
		}
	}
	if best < 0 {
		return "", false
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(importPath, mods[best].Path), "/")
	return filepath.Join(mods[best].Root, filepath.FromSlash(rest)), true
}
