// Package mutation proves the generated crash tests: it plants classic
// idempotency bugs into generated packages and requires each to be caught.
// It is a package of its own so its run has its own test timeout.
package mutation

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A mutant plants one classic idempotency bug (CRASHSIM.md) into the
// example's generated package. Edits are exact: a mutant whose text no longer
// occurs fails the test, so the list cannot rot silently.
type mutant struct {
	name  string
	test  string // the generated crash test expected to kill it
	edits []mutantEdit
}

type mutantEdit struct {
	file string // relative to the target package's directory
	old  string // a regular expression that must match exactly once
	new  string
}

// mutantTarget is a generated package whose crash tests face mutants:
// together they cover every source kind (watermark, none, cursor).
type mutantTarget struct {
	module  string // module root, relative to the repository root
	pkg     string // package directory, relative to module
	tests   []string
	mutants []mutant
}

const (
	engineFile = "idemgen_rt_engine.go"
	sqliteSQL  = "internal/sqlitedb/queries.sql.go"
	syncTest   = "TestCrashSimInvoiceSync"
	hookTest   = "TestCrashSimPaymentWebhook"
	cursorTest = "TestCrashSimEventImport"
)

var targets = []mutantTarget{
	{module: ".", pkg: "example/billing", tests: []string{syncTest, hookTest}, mutants: mutants},
	{module: "testdata", pkg: "golden/cursor", tests: []string{cursorTest}, mutants: cursorMutants},
}

var cursorMutants = []mutant{
	{"cursor saved before its page is applied", cursorTest, []mutantEdit{{engineFile,
		`res, err = e\.apply\(ctx, units, rep, false, nil\)\n`,
		"if advance {\n\t\t\t\t_ = saveCursor(e.st.auto())\n\t\t\t}\n\t\t\tres, err = e.apply(ctx, units, rep, false, nil)\n"}}},
	{"cursor moved back by a slower run", cursorTest, []mutantEdit{{sqliteSQL,
		`WHERE excluded\.cursor_position > p\.cursor_position`,
		""}}},
	{"insert_once without ON CONFLICT", cursorTest, []mutantEdit{{sqliteSQL,
		`ON CONFLICT \(seq\) DO NOTHING\n`,
		""}}},
}

var mutants = []mutant{
	{"progress saved before the work", syncTest, []mutantEdit{{engineFile,
		`return e\.runWindow\(ctx, w, true, fetch, markOf, rep\)`,
		"if err := e.st.auto().saveWatermark(ctx, e.def.name, w.Until, e.def.version, e.opt.now()); err != nil {\n\t\t\treturn err\n\t\t}\n\t\treturn e.runWindow(ctx, w, true, fetch, markOf, rep)"}}},
	{"ledger marked done before the provider call", syncTest, []mutantEdit{{engineFile,
		`result, callErr := fx\.call\(ctx, key, u\)`,
		"_, _ = e.st.auto().complete(ctx, key, e.opt.owner, nil, e.opt.now())\n\tresult, callErr := fx.call(ctx, key, u)"}}},
	{"a fresh idempotency key per attempt", syncTest, []mutantEdit{{engineFile,
		`result, callErr := fx\.call\(ctx, key, u\)`,
		`result, callErr := fx.call(ctx, key+"/"+e.opt.owner, u)`}}},
	{"insert without ON CONFLICT", syncTest, []mutantEdit{{sqliteSQL,
		`(?s)ON CONFLICT \(invoice_id\) DO UPDATE SET.*?RETURNING idemgen_write`,
		"RETURNING idemgen_write"}}},
	{"watermark set without GREATEST", syncTest, []mutantEdit{{sqliteSQL,
		`watermark = coalesce\(max\(p\.watermark, excluded\.watermark\), excluded\.watermark\)`,
		"watermark = excluded.watermark"}}},
	{"upsert without its version guard", syncTest, []mutantEdit{{sqliteSQL,
		`WHERE excluded\.updated_at >= d\.updated_at AND `,
		"WHERE "}}},
	{"reservation outside the destination's transaction", syncTest, []mutantEdit{
		// Reservations are collected during the write and inserted after the commit.
		{engineFile, `type engine\[U any\] struct \{`, "type engine[U any] struct {\n\towed []ledgerRow"},
		{engineFile, `if err := q\.reserve\(ctx, r, now\); err != nil \{`,
			"e.owed = append(e.owed, r)\n\t\tif err := error(nil); err != nil {"},
		{engineFile, `err = e\.hit\(ctx, pointUnitAfterCommit, key\)\n\t\}`,
			"err = e.hit(ctx, pointUnitAfterCommit, key)\n\t}\n\tfor _, r := range e.owed {\n\t\t_ = e.st.auto().reserve(ctx, r, e.opt.now())\n\t}\n\te.owed = nil"}}},
	{"provider called without reading the ledger", syncTest, []mutantEdit{{engineFile,
		`claimed, err := e\.st\.auto\(\)\.claim\(ctx, key, e\.opt\.owner, now, leaseUntil\)`,
		"_, _ = e.st.auto().claim(ctx, key, e.opt.owner, now, leaseUntil)\n\tclaimed, err := true, error(nil)"}}},
	{"lease without a fencing check", syncTest, []mutantEdit{{engineFile,
		`if !e\.opt\.now\(\)\.Before\(leaseUntil\) \{`,
		"if false {"}}},
	{"same key, different payload silently deduped", hookTest, []mutantEdit{{engineFile,
		`if !bytes\.Equal\(prev, sum\[:\]\) \{`,
		"if false && !bytes.Equal(prev, sum[:]) {"}}},
}

// deterministic families: a kill must come from one of these, not only
// from the seeded concurrent schedules.
var deterministic = []string{"clean", "crash", "crash2", "resplost", "failpre", "commitunknown", "preempt", "double", "mismatch", "subprocess"}

// TestMutantsAreKilled proves the generated crash tests: each planted bug
// must fail them, through a deterministic family, while the unmutated
// package passes. It builds the example with `go test -overlay`, so the
// working tree is never touched. SQLite only, to keep it fast.
func TestMutantsAreKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the generated crash tests once per mutant")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, _ := filepath.Abs(filepath.Join("..", "..", ".."))
	familyRE := regexp.MustCompile(`families: ([a-z0-9, ]+)\)`)

	run := func(t *testing.T, tg mutantTarget, test string, overlay map[string]string) (string, error) {
		args := []string{"test", "-count=1", "-run", "^" + test + "$/^sqlite$", "./" + tg.pkg}
		if overlay != nil {
			b, _ := json.Marshal(map[string]any{"Replace": overlay})
			f := filepath.Join(t.TempDir(), "overlay.json")
			if err := os.WriteFile(f, b, 0o644); err != nil {
				t.Fatal(err)
			}
			args = append([]string{"test", "-overlay", f}, args[1:]...)
		}
		cmd := exec.Command(goBin, args...)
		cmd.Dir = filepath.Join(root, tg.module)
		cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
			return strings.HasPrefix(e, "IDEMGEN_TEST_POSTGRES=")
		}), "GOFLAGS=-buildvcs=false")
		if overlay != nil {
			// One broken scenario is a kill; the rest need not run.
			cmd.Env = append(cmd.Env, "IDEMGEN_CRASHSIM_FAILFAST=1")
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	var (
		mu     sync.Mutex
		killed []string
		total  int
	)
	for _, tg := range targets {
		dir := filepath.Join(root, tg.module, filepath.FromSlash(tg.pkg))
		total += len(tg.mutants)
		t.Run(tg.pkg, func(t *testing.T) {
			t.Run("unmutated", func(t *testing.T) {
				for _, test := range tg.tests {
					if out, err := run(t, tg, test, nil); err != nil {
						t.Fatalf("%s fails without any mutant:\n%s", test, out)
					}
				}
			})
			for _, m := range tg.mutants {
				t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
					t.Parallel()
					contents := map[string][]byte{}
					for _, e := range m.edits {
						path := filepath.Join(dir, filepath.FromSlash(e.file))
						src, ok := contents[path]
						if !ok {
							var err error
							if src, err = os.ReadFile(path); err != nil {
								t.Fatal(err)
							}
						}
						re := regexp.MustCompile(e.old)
						if n := len(re.FindAllIndex(src, -1)); n != 1 {
							t.Fatalf("mutant no longer applies: %q matches %d times in %s", e.old, n, e.file)
						}
						contents[path] = re.ReplaceAllLiteral(src, []byte(e.new))
					}
					overlay := map[string]string{}
					for path, src := range contents {
						mutated := filepath.Join(t.TempDir(), filepath.Base(path))
						if err := os.WriteFile(mutated, src, 0o644); err != nil {
							t.Fatal(err)
						}
						overlay[path] = mutated
					}
					start := time.Now()
					out, err := run(t, tg, m.test, overlay)
					if err == nil {
						t.Fatalf("mutant %q survived: %s passed", m.name, m.test)
					}
					if strings.Contains(out, "[build failed]") || strings.Contains(out, "vet:") {
						t.Fatalf("mutant %q does not compile:\n%s", m.name, out)
					}
					var fams []string
					for _, match := range familyRE.FindAllStringSubmatch(out, -1) {
						fams = append(fams, strings.Split(match[1], ", ")...)
					}
					if !slices.ContainsFunc(fams, func(f string) bool { return slices.Contains(deterministic, f) }) {
						t.Fatalf("mutant %q was not killed by a deterministic family (families: %v):\n%s", m.name, fams, tail(out))
					}
					slices.Sort(fams)
					mu.Lock()
					killed = append(killed, fmt.Sprintf("%s: %s: killed by %s in %s", tg.pkg, m.name, strings.Join(slices.Compact(fams), ", "), time.Since(start).Round(time.Second)))
					mu.Unlock()
				})
			}
		})
	}
	slices.Sort(killed)
	t.Logf("mutation score: %d/%d killed\n  %s", len(killed), total, strings.Join(killed, "\n  "))
	if len(killed) != total {
		t.Errorf("mutation score %d/%d", len(killed), total)
	}
}

func tail(s string) string {
	lines := bytes.Split([]byte(s), []byte("\n"))
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
