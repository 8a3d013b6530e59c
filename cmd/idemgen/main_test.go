package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/idemgen/idemgen/cmd/idemgen/internal/cli"
	"github.com/idemgen/idemgen/cmd/idemgen/internal/writeout"
	"github.com/idemgen/idemgen/generator"
)

// TestMain makes this test binary the idemgen command of the scripts, by
// its main: so it is also the sqlc child that generate starts (cli.Main
// checks for the child environment before anything else) and the vet tool
// of go vet -vettool.
// With fakeSQLCEnv set it is instead the sqlc child of
// TestSQLCChildStopsWithIdemgen, which waits for a signal.
func TestMain(m *testing.M) {
	if dir := os.Getenv(fakeSQLCEnv); dir != "" && generator.IsSQLCChild() {
		os.Exit(fakeSQLCChild(dir))
	}
	testscript.Main(m, map[string]func(){"idemgen": main})
}

func TestScripts(t *testing.T) {
	p := scriptParams(t)
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		// The ops scripts' database: a SQLite file (see ops_test.go).
		env.Setenv("DB", filepath.Join(env.WorkDir, "billing.db"))
		return setup(env)
	}
	testscript.Run(t, p)
}

// scriptParams are the parameters every script runs with. The scripts
// share a user cache directory, so that the SQLite driver's WebAssembly,
// which idemgen status and ledger keep there, is compiled once, not in
// every process.
func scriptParams(t *testing.T) testscript.Params {
	cache := t.TempDir()
	child := filepath.Join(cache, "idemgen-sqlc")
	if err := generator.BuildSQLCChild(context.Background(), os.Stderr, "", child); err != nil {
		t.Fatal(err)
	}
	// status and ledger run in idemgen's database child (internal/cli/ops_child.go).
	opsChild := filepath.Join(cache, "idemgen-ops")
	if out, err := exec.Command("go", "build", "-tags", "idemgen_ops", "-o", opsChild, "github.com/idemgen/idemgen/cmd/idemgen").CombinedOutput(); err != nil {
		t.Fatalf("build the database child: %v\n%s", err, out)
	}
	return testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("XDG_CACHE_HOME", cache)
			// This test binary does not link sqlc, as the idemgen command
			// does not: generate runs the sqlc child built above, as it
			// would the one it builds on a user's machine (newcomer.txtar
			// unsets this and so builds its own).
			env.Setenv(generator.SQLCExeEnv, child)
			env.Setenv(cli.OpsExeEnv, opsChild)
			port, err := freePort()
			if err != nil {
				return err
			}
			env.Setenv("UIPORT", port) // for idemgen ui (ops_ui.txtar)
			return setupGo(env)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":           cmdExits,
			"backdate":        cmdBackdate,
			"mtime-unchanged": cmdMtimeUnchanged,
			"manifest-owns":   cmdManifestOwns,
			"no-mention":      cmdNoMention,
			"edit-generated":  cmdEditGenerated,
			"claim":           cmdClaim,
			"append":          cmdAppend,
			"replace":         cmdReplace,
			"count-files":     cmdCountFiles,
			"billing":         cmdBilling,
			"http":            cmdHTTP,
		},
	}
}

// goEnv is what scripts that run the go command (newcomer.txtar) need from
// the real environment: testscript sets HOME to /no-home and passes on
// little but PATH, so without these the go command would have no module
// cache or build cache and would fetch and compile everything (sqlc
// included) from scratch. Looked up once, with `go env`, so the defaults
// derived from the real HOME come along too.
var goEnv = sync.OnceValues(func() ([]string, error) {
	names := []string{"GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY", "GOFLAGS", "GONOSUMDB", "GONOPROXY", "GOPRIVATE", "GOSUMDB", "GOINSECURE", "GOENV"}
	out, err := exec.Command("go", append([]string{"env"}, names...)...).Output()
	if err != nil {
		return nil, err
	}
	values := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(values) != len(names) {
		return nil, fmt.Errorf("go env printed %d lines for %d names", len(values), len(names))
	}
	vars := []string{"GOTOOLCHAIN=local"} // build with this go, never download another
	for i, name := range names {
		vars = append(vars, name+"="+values[i])
	}
	return vars, nil
})

// setupGo gives every script IDEMGEN_ROOT, the absolute path of this
// checkout's module root, and, when the go command is on PATH, the go
// environment of goEnv. Scripts that need go check [exec:go] themselves.
func setupGo(env *testscript.Env) error {
	wd, err := os.Getwd() // go test runs in cmd/idemgen
	if err != nil {
		return err
	}
	root := filepath.Join(wd, "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("the module root: %w", err)
	}
	env.Setenv("IDEMGEN_ROOT", root)
	// The idemgen command testscript installed, for go vet -vettool,
	// which wants a path.
	for _, dir := range filepath.SplitList(env.Getenv("PATH")) {
		if p := filepath.Join(dir, "idemgen"); fileExists(p) {
			env.Setenv("IDEMGEN_BIN", p)
			break
		}
	}
	if _, err := exec.LookPath("go"); err != nil {
		return nil
	}
	vars, err := goEnv()
	if err != nil {
		return fmt.Errorf("reading the go environment: %w", err)
	}
	env.Vars = append(env.Vars, vars...)
	env.Setenv("IDEMGEN_TOOL_GOPROXY", toolProxy(env.Getenv("GOPROXY")))
	return nil
}

// toolProxy is the GOPROXY under which a script's `go get -tool` takes
// this checkout (through a replace) in place of the unpublished module:
// every proxy of goproxy in turn, whatever it answers ("|": proxy.golang.org
// answers 404 for an unpublished module, others 403), and last "off", whose
// "not found" sends go to the replacement. Modules the cache lacks still
// come from the proxies; "direct" is left out (no VCS is reachable here).
func toolProxy(goproxy string) string {
	var list []string
	for _, p := range strings.FieldsFunc(goproxy, func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			list = append(list, p)
		}
	}
	return strings.Join(append(list, "off"), "|")
}

func fileExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir()
}

// cmdExits runs a program and checks its exact exit code:
//
//	exits 2 idemgen frobnicate
//
// Its stdout and stderr are kept for the stdout and stderr commands.
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE PROGRAM [ARGS...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	err = ts.Exec(args[1], args[2:]...)
	got := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited %d, want %d", strings.Join(args[1:], " "), got, want)
	}
}

// backdated is the mtime backdate gives files; anything generate rewrites
// gets a fresh one, whatever the filesystem's timestamp granularity.
var backdated = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

// walkFiles calls f for every regular file at or under each path.
func walkFiles(ts *testscript.TestScript, paths []string, f func(path string, info fs.FileInfo)) {
	for _, p := range paths {
		ts.Check(filepath.Walk(ts.MkAbs(p), func(path string, info fs.FileInfo, err error) error {
			if err == nil && info.Mode().IsRegular() {
				f(path, info)
			}
			return err
		}))
	}
}

// cmdBackdate sets the mtime of every file at or under the paths to a fixed
// past time:
//
//	backdate gen
func cmdBackdate(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: backdate PATH...")
	}
	walkFiles(ts, args, func(path string, _ fs.FileInfo) {
		ts.Check(os.Chtimes(path, backdated, backdated))
	})
}

// cmdMtimeUnchanged checks that every file at or under the paths still has
// the mtime backdate gave it, i.e. was not rewritten; with !, that some was.
//
//	mtime-unchanged gen
func cmdMtimeUnchanged(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) == 0 {
		ts.Fatalf("usage: [!] mtime-unchanged PATH...")
	}
	var touched []string
	walkFiles(ts, args, func(path string, info fs.FileInfo) {
		if !info.ModTime().Equal(backdated) {
			touched = append(touched, path)
		}
	})
	switch {
	case !neg && len(touched) > 0:
		ts.Fatalf("rewritten: %s", strings.Join(touched, ", "))
	case neg && len(touched) == 0:
		ts.Fatalf("no file was rewritten under %s", strings.Join(args, ", "))
	}
}

// cmdManifestOwns checks the manifest in DIR against the files there: every
// file with an idemgen header is listed (nothing generated but unrecorded),
// and every listed file exists with a generated-code header (nothing stale
// left behind, nothing of the user's claimed).
//
//	manifest-owns gen
func cmdManifestOwns(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: manifest-owns DIR")
	}
	dir := ts.MkAbs(args[0])
	owned := listed(ts, args[0])
	walkFiles(ts, args, func(path string, _ fs.FileInfo) {
		rel, _ := filepath.Rel(dir, path)
		if h := firstLine(ts, path); (h == generator.Header || h == generator.SQLHeader) && !slices.Contains(owned, filepath.ToSlash(rel)) {
			ts.Fatalf("%s has the idemgen header but the manifest does not list it", rel)
		}
	})
	for _, name := range owned {
		if h := firstLine(ts, filepath.Join(dir, filepath.FromSlash(name))); !generatedCode.MatchString(h) {
			ts.Fatalf("manifest lists %s, whose first line %q is no generated-code header", name, h)
		}
	}
}

var generatedCode = regexp.MustCompile(`^(//|--|#) Code generated .* DO NOT EDIT\.$`)

func firstLine(ts *testscript.TestScript, path string) string {
	content, err := os.ReadFile(path)
	ts.Check(err)
	first, _, _ := bytes.Cut(content, []byte("\n"))
	return string(first)
}

// listed returns the paths the manifest in dir lists, in its (sorted) order.
func listed(ts *testscript.TestScript, dir string) []string {
	data, err := os.ReadFile(filepath.Join(ts.MkAbs(dir), writeout.ManifestName))
	ts.Check(err)
	var paths []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			paths = append(paths, line)
		}
	}
	if len(paths) == 0 {
		ts.Fatalf("manifest in %s lists no files", dir)
	}
	return paths
}

// cmdEditGenerated appends a line to the first file the manifest in DIR
// lists and sets $EDITED to its path relative to DIR. Scripts use it so
// they need not know the generator's file names.
//
//	edit-generated gen
func cmdEditGenerated(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: edit-generated DIR")
	}
	name := listed(ts, args[0])[0]
	f, err := os.OpenFile(filepath.Join(ts.MkAbs(args[0]), filepath.FromSlash(name)), os.O_WRONLY|os.O_APPEND, 0)
	ts.Check(err)
	_, err = f.WriteString("// edited by hand\n")
	ts.Check(errors.Join(err, f.Close()))
	ts.Setenv("EDITED", name)
}

// cmdClaim turns the generated tree in DIR into what a user who never ran
// idemgen might have: the last Go file the manifest lists stays, rewritten
// without the idemgen header; every other file idemgen wrote, and the
// manifest, are removed. $CLAIMED is set to the kept file's path relative
// to DIR. Keeping the last file means a generate that wrote before checking
// would already have written the others. (A Go file, not a migration: the
// generator reads existing migrations back as its own.)
//
//	claim gen
func cmdClaim(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: claim DIR")
	}
	dir := ts.MkAbs(args[0])
	var keep string
	for _, p := range listed(ts, args[0]) {
		if strings.HasSuffix(p, ".go") {
			keep = p
		}
	}
	if keep == "" {
		ts.Fatalf("manifest in %s lists no Go file", args[0])
	}
	for _, p := range listed(ts, args[0]) {
		if p != keep {
			ts.Check(os.Remove(filepath.Join(dir, filepath.FromSlash(p))))
		}
	}
	ts.Check(os.Remove(filepath.Join(dir, writeout.ManifestName)))
	ts.Check(os.WriteFile(filepath.Join(dir, filepath.FromSlash(keep)), []byte("// My own file, written by hand.\n"), 0o644))
	ts.Setenv("CLAIMED", keep)
}

// cmdAppend appends a line to a file:
//
//	append gen/.idemgen-manifest jobs/old.go
func cmdAppend(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: append FILE LINE")
	}
	f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_WRONLY|os.O_APPEND, 0)
	ts.Check(err)
	_, err = f.WriteString(args[1] + "\n")
	ts.Check(errors.Join(err, f.Close()))
}

// cmdReplace replaces OLD with NEW in FILE, and fails unless OLD is there
// exactly once: a script that edits a copy of the example's spec must not
// pass because the spec changed under it.
//
//	replace bumped.yaml 'version: 2' 'version: 3'
func cmdReplace(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replace FILE OLD NEW")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	if n := strings.Count(string(data), args[1]); n != 1 {
		ts.Fatalf("%s holds %q %d times, want 1", args[0], args[1], n)
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strings.Replace(string(data), args[1], args[2], 1)), 0o644))
}

// cmdCountFiles checks how many regular files DIR holds, at any depth.
//
//	count-files gen 1
func cmdCountFiles(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: count-files DIR N")
	}
	want, err := strconv.Atoi(args[1])
	ts.Check(err)
	var got []string
	walkFiles(ts, args[:1], func(path string, _ fs.FileInfo) { got = append(got, path) })
	if len(got) != want {
		ts.Fatalf("%s holds %d files, want %d: %v", args[0], len(got), want, got)
	}
}

// cmdNoMention checks that no file at or under DIR contains WORD, ignoring
// case: after a job is removed, nothing generated may still refer to it.
//
//	no-mention gen refund
func cmdNoMention(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: no-mention DIR WORD")
	}
	word := strings.ToLower(args[1])
	walkFiles(ts, args[:1], func(path string, _ fs.FileInfo) {
		content, err := os.ReadFile(path)
		ts.Check(err)
		if bytes.Contains(bytes.ToLower(content), []byte(word)) {
			ts.Fatalf("%s still mentions %q", path, args[1])
		}
		if strings.Contains(strings.ToLower(filepath.ToSlash(path[len(ts.MkAbs(args[0])):])), word) {
			ts.Fatalf("%s is named after %q", path, args[1])
		}
	})
}

// The idemgen command links neither sqlc nor a database driver nor the
// runtime (docs/development.md: a service's first generate compiles none
// of them);
// generate and status build them into their children. Built with
// -tags idemgen_ops, the database child links the drivers.
func TestCommandLinksNoSqlcNorDriver(t *testing.T) {
	links := func(tags ...string) map[string]bool {
		out, err := exec.Command("go", append(append([]string{"list", "-deps"}, tags...), ".")...).Output()
		if err != nil {
			t.Fatalf("go list -deps %v: %v", tags, err)
		}
		deps := map[string]bool{}
		for _, p := range strings.Fields(string(out)) {
			deps[p] = true
		}
		return deps
	}
	heavy := func(deps map[string]bool) []string {
		var found []string
		for p := range deps {
			for _, root := range []string{"github.com/sqlc-dev/sqlc", "github.com/jackc/pgx/v5", "github.com/ncruces/go-sqlite3", "github.com/pressly/goose/v3"} {
				if p == root || strings.HasPrefix(p, root+"/") {
					found = append(found, p)
				}
			}
		}
		if deps["github.com/idemgen/idemgen/idem"] {
			found = append(found, "github.com/idemgen/idemgen/idem")
		}
		slices.Sort(found)
		return found
	}
	if found := heavy(links()); len(found) > 0 {
		t.Errorf("the idemgen command links %v", found)
	}
	if found := heavy(links("-tags", "idemgen_ops")); !slices.ContainsFunc(found, func(p string) bool { return strings.HasPrefix(p, "github.com/ncruces/go-sqlite3") }) ||
		!slices.Contains(found, "github.com/jackc/pgx/v5") {
		t.Errorf("built with -tags idemgen_ops, idemgen links none of the drivers: %v", found)
	}
}
