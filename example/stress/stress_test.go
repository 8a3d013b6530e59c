package stress

// The stress tests run generated crash simulations as a user's CI would,
// over and over and several at once, each in a process of its own, and
// pass only if every process exits normally: no fault that kills the
// process (as the SQLite driver's JIT once did), no run that hangs (as the
// PostgreSQL session hand-off once did), no schema left behind.
//
// They run with IDEMGEN_STRESS=1 (.ci/run sets it); the counts are
// IDEMGEN_STRESS_SQLITE_RUNS and IDEMGEN_STRESS_PG_RUNS, and
// IDEMGEN_STRESS_PARALLEL processes run at once (default 3).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/crashsim"
	"github.com/jackc/pgx/v5"
)

// A target is a generated package whose crash simulations the stress runs.
type target struct {
	pkg  string // relative to the repository root
	race bool   // also built with -race
}

var targets = []target{
	{pkg: "example/billing", race: true},
	{pkg: "example/fulfilment"},
	{pkg: "example/bench/benchjobs"},
	{pkg: "example/stress/shop", race: true},
}

// runTimeout bounds one process: far above a healthy run (seconds) and the
// crash simulation's own watchdog (30 s without progress), so a process
// that hits it hung in a way the watchdog cannot see.
const runTimeout = 10 * time.Minute

func enabled(t *testing.T) {
	if os.Getenv("IDEMGEN_STRESS") == "" {
		t.Skip("set IDEMGEN_STRESS=1 to run the crash simulations many times (CI does)")
	}
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive count", name, v)
	}
	return n
}

// build compiles pkg's test binary (with -race if race) into dir.
func build(t *testing.T, dir, pkg string, race bool) string {
	t.Helper()
	name := strings.ReplaceAll(pkg, "/", "_")
	args := []string{"test", "-c", "-o", filepath.Join(dir, name+".test")}
	if race {
		name += "_race"
		args = []string{"test", "-c", "-race", "-o", filepath.Join(dir, name+".test")}
	}
	args = append(args, "./"+pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join("..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return filepath.Join(dir, name+".test")
}

// A run is one process to start.
type run struct {
	name string
	bin  string
	dir  string   // the package's directory: the test's working directory
	args []string // test flags
	env  []string
}

type result struct {
	run     run
	elapsed time.Duration
	err     error
	out     string
}

// runAll runs every run, parallel at a time, and fails the test for every
// process that did not exit normally.
func runAll(t *testing.T, runs []run, parallel int) {
	start := time.Now()
	results := make(chan result, len(runs))
	slots := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, r.bin, r.args...)
			cmd.Dir = r.dir
			cmd.Env = append(os.Environ(), r.env...)
			cmd.WaitDelay = 10 * time.Second
			began := time.Now()
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				err = fmt.Errorf("still running after %s: killed (hung): %w", runTimeout, err)
			}
			results <- result{run: r, elapsed: time.Since(began), err: err, out: string(out)}
		}()
	}
	wg.Wait()
	close(results)
	var (
		failed  int
		longest time.Duration
		total   time.Duration
	)
	for res := range results {
		total += res.elapsed
		longest = max(longest, res.elapsed)
		if res.err == nil && strings.HasSuffix(strings.TrimSpace(res.out), "PASS") {
			continue
		}
		failed++
		if failed <= 3 {
			t.Errorf("%s did not exit normally after %s: %v\n%s", res.run.name, res.elapsed.Round(time.Millisecond), res.err, tail(res.out, 60))
		}
	}
	t.Logf("%d runs, %d at a time, in %s (longest %s, mean %s): %d did not exit normally",
		len(runs), parallel, time.Since(start).Round(time.Second), longest.Round(time.Millisecond),
		(total / time.Duration(max(len(runs), 1))).Round(time.Millisecond), failed)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("... (%d lines before)", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// TestSQLiteCrashSimulationsNeverKillTheProcess runs every SQLite crash
// simulation of the example, the bench jobs and the stress spec, some
// under the race detector (their -short sample: the race detector slows a
// run tenfold), round after round.
func TestSQLiteCrashSimulationsNeverKillTheProcess(t *testing.T) {
	enabled(t)
	n := envInt(t, "IDEMGEN_STRESS_SQLITE_RUNS", 24)
	parallel := envInt(t, "IDEMGEN_STRESS_PARALLEL", 3)
	dir := t.TempDir()
	var kinds []run
	for _, tg := range targets {
		pkgDir := filepath.Join("..", "..", tg.pkg)
		kinds = append(kinds, run{name: tg.pkg, bin: build(t, dir, tg.pkg, false), dir: pkgDir,
			args: []string{"-test.run", "CrashSim.*/sqlite", "-test.count", "1"}})
		if tg.race {
			kinds = append(kinds, run{name: tg.pkg + " -race -short", bin: build(t, dir, tg.pkg, true), dir: pkgDir,
				args: []string{"-test.run", "CrashSim.*/sqlite", "-test.count", "1", "-test.short"}})
		}
	}
	var runs []run
	for i := range n {
		r := kinds[i%len(kinds)]
		r.name = fmt.Sprintf("run %d: %s", i+1, r.name)
		r.env = []string{"IDEMGEN_TEST_POSTGRES="} // SQLite only
		runs = append(runs, r)
	}
	runAll(t, runs, parallel)
}

// pgStressWorkers plays each PostgreSQL process's matrix four scenarios at
// a time unless IDEMGEN_CRASHSIM_WORKERS says otherwise: this test looks
// for hangs, not speed, and three processes at the default six would
// hold about 100 sessions at their peaks, a stock server's max_connections.
func pgStressWorkers() []string {
	if os.Getenv(crashsim.EnvWorkers) != "" {
		return nil
	}
	return []string{crashsim.EnvWorkers + "=4"}
}

// TestPostgresCrashSimulationsNeverHang runs the stress spec's whole
// crash-simulation matrix on PostgreSQL (a watermark job with two effects,
// as a service team writes one), several processes at once, then checks
// that no test run left a scenario schema behind.
func TestPostgresCrashSimulationsNeverHang(t *testing.T) {
	enabled(t)
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Fatal("IDEMGEN_STRESS is set but IDEMGEN_TEST_POSTGRES is not: the PostgreSQL stress needs a database")
	}
	n := envInt(t, "IDEMGEN_STRESS_PG_RUNS", 30)
	parallel := envInt(t, "IDEMGEN_STRESS_PARALLEL", 3)
	bin := build(t, t.TempDir(), "example/stress/shop", false)
	var runs []run
	for i := range n {
		runs = append(runs, run{name: fmt.Sprintf("run %d: example/stress/shop on PostgreSQL", i+1), bin: bin,
			dir: filepath.Join("shop"), args: []string{"-test.run", "CrashSim.*/postgres", "-test.count", "1"},
			env: pgStressWorkers()})
	}
	runAll(t, runs, parallel)

	// Every process has exited: any idemsim_ schema named after a run that
	// has no session left is one a run failed to drop. (Schemas named the
	// older way, after a time, belong to tests of an older idemgen.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left []string
	rows, err := conn.Query(ctx, `
SELECT n.nspname FROM pg_namespace n
WHERE n.nspname LIKE 'idemsim\_%' AND split_part(n.nspname, '_', 2) !~ '^[0-9]{19}$'
  AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                  WHERE a.application_name = 'idemsim_admin_' || split_part(n.nspname, '_', 2))`)
	if err != nil {
		t.Fatal(err)
	}
	if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Errorf("%d scenario schemas left behind by runs that have ended: %s", len(left), strings.Join(left[:min(len(left), 10)], ", "))
	}
}
