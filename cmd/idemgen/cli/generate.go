package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/rogpeppe/go-internal/diff"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/writeout"
	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/generator/spec"
	"github.com/idemgen/idemgen/generator/sqlc"
)

// loadSpec reads, parses and checks the spec named file, printing every
// diagnostic, errors and warnings, sorted. Check runs only on a spec that
// parsed cleanly: checking a half-read spec would report its gaps again as
// missing values. ok is false when the file could not be read.
func loadSpec(e env, file string) (f *spec.File, ds spec.Diagnostics, ok bool) {
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(e.stderr, "idemgen: %v\n", err)
		if errors.Is(err, fs.ErrNotExist) {
			fmt.Fprintf(e.stderr, "idemgen: run 'idemgen init' to write a starter spec, or name one with -f\n")
		}
		return nil, nil, false
	}
	f, ds = spec.Parse(file, data)
	if !ds.HasErrors() {
		ds = append(ds, spec.Check(f)...)
	}
	ds = ds.Sorted()
	for _, d := range ds {
		fmt.Fprintln(e.stderr, d)
	}
	return f, ds, true
}

func runVet(e env, args []string) int {
	var file string
	if _, code, ok := parseFlags(e, "vet", args, 0, &file, nil); !ok {
		return code
	}
	_, ds, ok := loadSpec(e, file)
	if !ok || len(ds) > 0 {
		return exitFail
	}
	return exitOK
}

// target is a planned generation: what would change in which directory.
type target struct {
	plan *writeout.Plan
	// shown turns a path relative to the output directory into one
	// relative to the spec's directory, as diff prints it.
	shown func(string) string
	// named turns it into a path relative to where the user named the spec,
	// as errors print it.
	named func(string) string
}

// plan runs the generator over the spec and compares its files with the
// output directory. It writes nothing. Spec diagnostics, refusals and
// failures are printed; ok is false when generation must stop.
func plan(e env, file string) (target, bool) {
	f, ds, ok := loadSpec(e, file)
	if !ok || ds.HasErrors() {
		return target{}, false
	}
	dir, importPath, err := outDir(file, f)
	if err != nil {
		printErr(e, err)
		return target{}, false
	}
	rel, err := filepath.Rel(filepath.Dir(mustAbs(file)), mustAbs(dir))
	if err != nil {
		printErr(e, err)
		return target{}, false
	}
	t := target{
		shown: func(p string) string { return path.Join(filepath.ToSlash(rel), p) },
		named: func(p string) string {
			return filepath.Join(filepath.Dir(file), rel, filepath.FromSlash(p))
		},
	}

	runner, err := sqlc.Self()
	if err != nil {
		printErr(e, err)
		return target{}, false
	}
	opts := generator.Options{SQLC: runner, ImportPath: importPath}
	root, err := os.OpenRoot(dir)
	switch {
	case err == nil:
		defer root.Close()
		// Read through the root, like the writes: no symlink leads out.
		opts.Existing = root.FS()
	case !errors.Is(err, fs.ErrNotExist):
		printErr(e, fmt.Errorf("open output directory: %w", err))
		return target{}, false
	}
	files, err := generator.Generate(e.ctx, f, opts)
	if err != nil {
		printErr(e, err)
		return target{}, false
	}
	t.plan, err = writeout.NewPlan(dir, files)
	if conflicts, ok := errors.AsType[writeout.ConflictError](err); ok {
		for _, c := range conflicts {
			fmt.Fprintf(e.stderr, "idemgen: %s %s\n", t.named(c.Path), c.Reason)
		}
		fmt.Fprintf(e.stderr, "idemgen: nothing was written\n")
		return target{}, false
	}
	if err != nil {
		printErr(e, err)
		return target{}, false
	}
	for _, n := range t.plan.Notes {
		fmt.Fprintf(e.stderr, "idemgen: %s: %s\n", t.named(n.Path), n.Reason)
	}
	return t, true
}

func runGenerate(e env, args []string) int {
	var file string
	var verbose bool
	if _, code, ok := parseFlags(e, "generate", args, 0, &file, &verbose); !ok {
		return code
	}
	t, ok := plan(e, file)
	if !ok {
		return exitFail
	}
	if err := t.plan.Apply(); err != nil {
		printErr(e, err)
		return exitFail
	}
	if verbose {
		for _, c := range t.plan.Changes {
			fmt.Fprintf(e.stdout, "%s %s\n", c.Op, t.named(c.Path))
		}
	}
	return exitOK
}

func runDiff(e env, args []string) int {
	var file string
	if _, code, ok := parseFlags(e, "diff", args, 0, &file, nil); !ok {
		return code
	}
	t, ok := plan(e, file)
	if !ok {
		return exitFail
	}
	for _, c := range t.plan.Changes {
		name := t.shown(c.Path)
		e.stdout.Write(diff.Diff("a/"+name, c.Old, "b/"+name, c.New))
	}
	if !t.plan.Empty() {
		return exitFail
	}
	return exitOK
}

// printErr prints spec diagnostics one per line in go-build form and any
// other error prefixed with the program name.
func printErr(e env, err error) {
	if ds, ok := errors.AsType[spec.Diagnostics](err); ok {
		for _, d := range ds.Sorted() {
			fmt.Fprintln(e.stderr, d)
		}
		return
	}
	fmt.Fprintf(e.stderr, "idemgen: %v\n", err)
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}
