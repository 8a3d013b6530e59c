package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/rogpeppe/go-internal/diff"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/writeout"
	"github.com/idemgen/idemgen/generator"
)

// loadSpec reads, parses and checks the spec named file, printing every
// diagnostic, errors and warnings, sorted, with the file named by specPath
// whichever verb and working directory. Check runs on whatever Parse read,
// so one run reports every finding (Check says nothing about what Parse
// refused); a spec without errors is also held against what the last
// generate left in its output directory (generatedWarnings). The code is ExitUsage when the file cannot be read,
// ExitFail on errors (and, with -strict, on warnings), ExitOK otherwise:
// generate, diff and vet all decide by it, so they agree on what stops.
func loadSpec(e Env, file string, o *Options) (*generator.Spec, int) {
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(e.Stderr, "idemgen: %v\n", err)
		if errors.Is(err, fs.ErrNotExist) {
			if hint := missingSpecHint(file, o.FileSet); hint != "" {
				fmt.Fprintf(e.Stderr, "idemgen: %s\n", hint)
			}
		}
		return nil, ExitUsage
	}
	f, ds := generator.ParseSpec(specPath(file), data)
	if !ds.HasErrors() {
		ds = append(ds, generatedWarnings(file, f)...)
	}
	ds = ds.Sorted()
	for _, d := range ds {
		fmt.Fprintln(e.Stderr, d)
	}
	if ds.HasErrors() || (o.Strict && len(ds) > 0) {
		return f, ExitFail
	}
	return f, ExitOK
}

// generatedWarnings are the warnings about the spec against what the last
// generate left in its output directory: a field gone from an adopted
// destination (generator.AdoptedWarnings). The directory is read as out
// names it, through a root; one that cannot be opened has nothing to say
// (generate and diff check out itself, and say what is wrong with it).
func generatedWarnings(file string, f *generator.Spec) generator.Diagnostics {
	out := "."
	if f.Out.Set {
		out = f.Out.Value
	}
	if filepath.IsAbs(out) {
		return nil
	}
	root, err := os.OpenRoot(filepath.Join(filepath.Dir(file), filepath.FromSlash(out)))
	if err != nil {
		return nil
	}
	defer root.Close()
	return generator.AdoptedWarnings(root.FS(), f)
}

// missingSpecHint says what to do about a spec file that does not exist:
// name the specs below the working directory when the default file is
// missing (the spec often sits in a subdirectory such as jobs/), or run
// init where the named file was expected.
func missingSpecHint(file string, named bool) string {
	if !named {
		specs, err := matchSpecs([]string{"./..."})
		if err != nil || len(specs) == 0 {
			return "run 'idemgen init' to write a starter spec here, or name one with -f"
		}
		also := ""
		if len(specs) > 1 {
			also = fmt.Sprintf(" (and %d more)", len(specs)-1)
		}
		return fmt.Sprintf("found %s%s below here: name it with -f %s, or give diff and vet the pattern ./... to work on every spec below here", specs[0], also, specs[0])
	}
	dir, base := filepath.Split(file)
	switch {
	case base != specName:
		return ""
	case dir == "":
		return "run 'idemgen init' to write a starter spec here"
	}
	return fmt.Sprintf("run 'idemgen init %s' to write a starter spec there", filepath.Clean(dir))
}

// specFiles returns the specs diff and vet work on: the -f file, or every
// spec the package patterns match. A code other than ExitOK ends the verb.
func specFiles(e Env, verb string, o *Options, patterns []string) ([]string, int) {
	if len(patterns) == 0 {
		return []string{o.File}, ExitOK
	}
	if o.FileSet {
		fmt.Fprintf(e.Stderr, "idemgen %s: -f and package patterns exclude each other\n", verb)
		return nil, ExitUsage
	}
	specs, err := matchSpecs(patterns)
	if err != nil {
		for line := range strings.Lines(err.Error()) {
			fmt.Fprintf(e.Stderr, "idemgen %s: %s", verb, line)
		}
		fmt.Fprintln(e.Stderr)
		return nil, ExitUsage
	}
	return specs, ExitOK
}

func runVet(e Env, args []string) int {
	var o Options
	patterns, code, ok := ParseFlags(e, "vet", args, -1, &o)
	if !ok {
		return code
	}
	files, code := specFiles(e, "vet", &o, patterns)
	for _, file := range files {
		_, c := loadSpec(e, file, &o)
		code = max(code, c)
	}
	return code
}

// target is a planned generation: what would change in which directory.
type target struct {
	plan *writeout.Plan
	// path turns a slash path relative to the output directory into one
	// relative to the working directory, as diff, -v and errors print it.
	path func(string) string
	// modRoot is the directory of the module the output is in.
	modRoot string
}

// plan runs the generator over the spec and compares its files with the
// output directory. It writes nothing. Spec diagnostics, refusals and
// failures are printed; a code other than ExitOK means generation stops.
func plan(e Env, file string, o *Options) (target, int) {
	f, code := loadSpec(e, file, o)
	if code != ExitOK {
		return target{}, code
	}
	dir, importPath, modRoot, err := outDir(file, f)
	if err != nil {
		printErr(e, err)
		return target{}, ExitFail
	}
	wd, err := os.Getwd()
	if err != nil {
		printErr(e, err)
		return target{}, ExitFail
	}
	t := target{
		path:    func(p string) string { return relToWD(wd, filepath.Join(dir, filepath.FromSlash(p))) },
		modRoot: modRoot,
	}

	runner, err := generator.SQLCChild(e.Ctx, e.Stderr, modRoot)
	if err != nil {
		printErr(e, err)
		return target{}, ExitFail
	}
	opts := generator.Options{SQLC: runner, ImportPath: importPath, Version: headerVersion(), Source: specSource(file, dir)}
	root, err := os.OpenRoot(dir)
	switch {
	case err == nil:
		defer root.Close()
		// Read through the root, like the writes: no symlink leads out.
		opts.Existing = root.FS()
	case !errors.Is(err, fs.ErrNotExist):
		printErr(e, fmt.Errorf("open output directory: %w", err))
		return target{}, ExitFail
	}
	files, err := generator.Generate(e.Ctx, f, opts)
	if err != nil {
		printErr(e, err)
		return target{}, ExitFail
	}
	t.plan, err = writeout.NewPlan(dir, files)
	if conflicts, ok := errors.AsType[writeout.ConflictError](err); ok {
		for _, c := range conflicts {
			fmt.Fprintf(e.Stderr, "idemgen: %s %s\n", t.path(c.Path), c.Reason)
		}
		fmt.Fprintf(e.Stderr, "idemgen: nothing was written\n")
		return target{}, ExitFail
	}
	if err != nil {
		printErr(e, err)
		return target{}, ExitFail
	}
	for _, n := range t.plan.Notes {
		fmt.Fprintf(e.Stderr, "idemgen: %s: %s\n", t.path(n.Path), n.Reason)
	}
	// A version bump is deliberate, but its cost (the effects performed
	// again) should be seen before it ships: generate and diff both say it.
	// It is a note, not a warning: -strict and the exit code ignore it.
	for _, b := range generator.Bumps(opts.Existing, f) {
		fmt.Fprintf(e.Stderr, "%s:%d:%d: note: %s\n", specPath(file), b.Pos.Line, b.Pos.Col, b.Note)
	}
	return t, ExitOK
}

func runGenerate(e Env, args []string) int {
	var o Options
	if _, code, ok := ParseFlags(e, "generate", args, 0, &o); !ok {
		return code
	}
	t, code := plan(e, o.File, &o)
	if code != ExitOK {
		return code
	}
	if err := t.plan.Apply(); err != nil {
		printErr(e, err)
		return ExitFail
	}
	if o.Verbose {
		for _, c := range t.plan.Changes {
			fmt.Fprintf(e.Stdout, "%s %s\n", c.Op, t.path(c.Path))
		}
	}
	prebuildOpsChild(e, t.modRoot)
	return ExitOK
}

func runDiff(e Env, args []string) int {
	var o Options
	patterns, code, ok := ParseFlags(e, "diff", args, -1, &o)
	if !ok {
		return code
	}
	files, code := specFiles(e, "diff", &o, patterns)
	for _, file := range files {
		code = max(code, diffSpec(e, file, &o))
	}
	return code
}

// diffSpec prints, as a unified diff with paths relative to the working
// directory, what generate would change for one spec: new files against
// /dev/null, deleted ones to it, as git and patch -p1 expect.
func diffSpec(e Env, file string, o *Options) int {
	t, code := plan(e, file, o)
	if code != ExitOK {
		return code
	}
	for _, c := range t.plan.Changes {
		name := filepath.ToSlash(t.path(c.Path))
		from, to := "a/"+name, "b/"+name
		switch c.Op {
		case writeout.Create:
			from = "/dev/null"
		case writeout.Delete:
			to = "/dev/null"
		}
		e.Stdout.Write(diff.Diff(from, c.Old, to, c.New))
	}
	if n := len(t.plan.Changes); n > 0 {
		files := "files differ"
		if n == 1 {
			files = "file differs"
		}
		name := specPath(file)
		fmt.Fprintf(e.Stderr, "idemgen: %s: %d generated %s from the spec; run 'idemgen generate -f %s'\n", name, n, files, name)
		return ExitFail
	}
	return ExitOK
}

// printErr prints spec diagnostics one per line in go-build form and any
// other error prefixed with the program name.
func printErr(e Env, err error) {
	if ds, ok := errors.AsType[generator.Diagnostics](err); ok {
		for _, d := range ds.Sorted() {
			fmt.Fprintln(e.Stderr, d)
		}
		return
	}
	fmt.Fprintf(e.Stderr, "idemgen: %v\n", err)
}

func mustAbs(p string) string {
	abs, err := filepath.Abs(p)
	if err != nil {
		return p
	}
	return abs
}

// headerVersion is the idemgen version the generated files record: the
// version of idemgen's module that the service requires. A build of
// idemgen's own repository records "(devel)", whatever its version
// control stamps, so that its example and goldens stay a fixed point.
func headerVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok || bi.Main.Path == modulePath {
		return "(devel)"
	}
	return version(bi)
}

// specSource is the spec file's path relative to the output directory
// dir, slash-separated, as the generated files record it.
func specSource(file, dir string) string {
	spec, err1 := filepath.Abs(file)
	out, err2 := filepath.Abs(dir)
	rel, err3 := filepath.Rel(out, spec)
	if err1 != nil || err2 != nil || err3 != nil {
		return filepath.Base(file)
	}
	return filepath.ToSlash(rel)
}
