package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// specName is the file a package pattern looks for in each directory.
const specName = "idemgen.yaml"

// matchSpecs returns the spec files the package patterns name, sorted and
// without repeats, as paths relative to the working directory. A pattern
// is a directory (./jobs, .), a tree (./..., ./jobs/...) or an import path
// in the main module or a go.work module (example.com/svc/jobs/...).
//
// A tree is walked the way the go command walks one: directories named
// testdata or vendor or starting with . or _ are skipped, and so is a
// directory with its own go.mod (another module) unless go.work uses it.
// The pattern's own directory is always searched, so ./testdata/golden/...
// finds the specs there that ./... leaves out.
//
// Every pattern must match at least one spec: a CI line that checks
// nothing is a mistake worth exit code 2.
func matchSpecs(patterns []string) ([]string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	// The go.work in effect (as for the go command, the working
	// directory's) says which nested modules a tree includes, and with
	// the main module, where import paths lead.
	ws, err := workspace(wd)
	if err != nil {
		return nil, err
	}
	mods := ws
	if mods == nil {
		if m, ok, err := findModule(wd); err != nil {
			return nil, err
		} else if ok {
			mods = []goModule{m}
		}
	}
	var found []string
	var errs []error
	for _, pat := range patterns {
		dir, tree := strings.CutSuffix(pat, "...")
		if tree && dir != "" && !strings.HasSuffix(dir, "/") {
			errs = append(errs, fmt.Errorf("pattern %q: only a trailing /... is supported", pat))
			continue
		}
		dir = strings.TrimSuffix(dir, "/")
		if dir == "" {
			dir = "."
		}
		if strings.Contains(dir, "...") {
			errs = append(errs, fmt.Errorf("pattern %q: only a trailing /... is supported", pat))
			continue
		}
		if !tree && fileExists(pat) {
			errs = append(errs, fmt.Errorf("%s is a file, not a package pattern; name a spec file with -f %s", pat, pat))
			continue
		}
		if !isLocalPattern(dir) {
			d, ok := moduleFor(mods, dir)
			if !ok {
				errs = append(errs, fmt.Errorf("pattern %q: not a directory (./%s) and not in the main module or a go.work module", pat, dir))
				continue
			}
			dir = d
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			switch {
			case err == nil:
				err = fmt.Errorf("%s is not a directory", dir)
			case errors.Is(err, fs.ErrNotExist):
				err = fmt.Errorf("no directory %s", dir)
			}
			errs = append(errs, fmt.Errorf("pattern %q: %w", pat, err))
			continue
		}
		var specs []string
		if tree {
			specs, err = walkSpecs(dir, ws)
			if err != nil {
				errs = append(errs, fmt.Errorf("pattern %q: %w", pat, err))
				continue
			}
		} else if fileExists(filepath.Join(dir, specName)) {
			specs = []string{filepath.Join(dir, specName)}
		}
		if len(specs) == 0 {
			errs = append(errs, fmt.Errorf("pattern %q matched no %s", pat, specName))
			continue
		}
		for _, s := range specs {
			found = append(found, relToWD(wd, s))
		}
	}
	slices.Sort(found)
	return slices.Compact(found), errors.Join(errs...)
}

// walkSpecs finds every spec at or below root. It walks into the modules
// the workspace ws uses, and into no other module.
func walkSpecs(root string, ws []goModule) ([]string, error) {
	used := map[string]bool{}
	for _, m := range ws {
		used[mustAbs(m.Root)] = true
	}
	var specs []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			if d.Name() == specName && d.Type().IsRegular() {
				specs = append(specs, p)
			}
			return nil
		}
		if p == root {
			return nil
		}
		name := d.Name()
		if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return filepath.SkipDir
		}
		if fileExists(filepath.Join(p, "go.mod")) && !used[mustAbs(p)] {
			return filepath.SkipDir
		}
		return nil
	})
	return specs, err
}

// isLocalPattern reports whether a pattern is a file system path rather
// than an import path, by the go command's rule: ".", "..", or starting
// with ./, ../ or a root.
func isLocalPattern(p string) bool {
	return p == "." || p == ".." || strings.HasPrefix(p, "./") || strings.HasPrefix(p, "../") || filepath.IsAbs(p)
}

// specPath is how every verb names a spec file in what it prints, the
// positions of spec errors first of all: the way go vet names Go files
// (cmd/go/internal/base.ShortPath), relative to the working directory with
// no ./ in front, or absolute when that is shorter. (The compiler, run by
// go build in a package's own directory, writes ./x.go there; go vet
// writes x.go, and so does this.)
// So `vet ./...` and `vet -f ./jobs/idemgen.yaml` at the module root both
// print jobs/idemgen.yaml:L:C, where go vet prints jobs/x.go:L:C, and
// generate run by go generate in the spec's directory prints
// idemgen.yaml:L:C, as go vet run there prints x.go:L:C.
func specPath(file string) string {
	wd, err := os.Getwd()
	if err != nil {
		return filepath.Clean(file)
	}
	abs := file
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(wd, abs)
	}
	abs = filepath.Clean(abs)
	if rel, err := filepath.Rel(wd, abs); err == nil && len(rel) < len(abs) && sameFile(rel, abs) {
		return rel
	}
	return abs
}

// sameFile reports whether two names lead to one file, or to none: a
// relative name climbing out of a symlinked working directory may not.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		return errors.Is(errA, fs.ErrNotExist) && errors.Is(errB, fs.ErrNotExist)
	}
	return os.SameFile(fa, fb)
}

// relToWD shows p relative to the working directory wd.
func relToWD(wd, p string) string {
	abs := p
	if !filepath.IsAbs(abs) {
		abs = filepath.Join(wd, abs)
	}
	if rel, err := filepath.Rel(wd, abs); err == nil {
		return rel
	}
	return abs
}
