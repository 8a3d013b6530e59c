package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"time"
)

// The crash simulation's cost per job (issue 39): `-only crashsim` plays
// the generated crash matrices of the example's jobs and of the stress
// spec's watermark job (two effects under a rate and a concurrency) as a
// service's `go test` does, once the way the harness played them before
// (IDEMGEN_CRASHSIM_COLD=1: a new SQLite file and new connections per
// scenario, new PostgreSQL sessions per incarnation, the engine's own
// bound on a wait for a call slot, four at once) and once as it plays
// them now (warm files, pools handed from one finished incarnation to the
// next, the simulation's slot wait, twice the CPUs at once, at least six),
// and then the -short sample, on SQLite and, with -db, on PostgreSQL. It prints each
// job's scenarios and seconds side by side, in one run; -kills then runs
// the mutation check and prints how many planted bugs each tier kills:
//
//	go run ./example/bench -only crashsim
//	go run ./example/bench -only crashsim -db "$IDEMGEN_TEST_POSTGRES" -kills

// crashSimPackage is a package whose generated crash tests are measured.
type crashSimPackage struct{ pkg, name string }

var crashSimPackages = []crashSimPackage{
	{"./example/billing", "billing"},
	{"./example/fulfilment", "fulfilment"},
	{"./example/stress/shop", "shop"},
}

// crashSimRow is one job on one database in one mode.
type crashSimRow struct {
	job, db   string
	scenarios int
	took      time.Duration // the harness's own figure for the job's matrix
}

// crashSimMode is one way of playing the matrices.
type crashSimMode struct {
	label string
	short bool
	env   []string
}

// The cold "before" side plays last: its churn (a file or a session per
// incarnation, several minutes of it for the stress job) left the machine
// writing behind it, and an "after" that followed it took up to half as
// long again (order_sync on SQLite: 14.2 s after "before", 9.5 s alone).
var crashSimModes = []crashSimMode{
	{label: "after"},
	{label: "short", short: true},
	{label: "before", env: []string{"IDEMGEN_CRASHSIM_COLD=1", "IDEMGEN_CRASHSIM_WORKERS=4"}},
}

// crashSimLine is the line the harness logs for each job's matrix.
var crashSimLine = regexp.MustCompile(`crashsim (\S+) (sqlite|postgres): \d+ points, (\d+) scenarios in \d+ families .*all invariants held in (\S+)`)

func measureCrashSim(ctx context.Context, cfg *config, out io.Writer) error {
	root, err := repoRoot(ctx)
	if err != nil {
		return err
	}
	bin, err := os.MkdirTemp("", "idemgen-crashsim-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(bin)
	dbs := []string{"sqlite"}
	if cfg.db != "" {
		dbs = append(dbs, "postgres")
	}
	rows := map[string]map[string]crashSimRow{} // mode -> job/db -> row
	cpu := map[string]time.Duration{}           // mode -> CPU of the test processes
	var order []string
	for _, p := range crashSimPackages {
		exe := filepath.Join(bin, p.name+".test")
		if _, err := runIn(ctx, root, os.Environ(), "go", "test", "-c", "-o", exe, p.pkg); err != nil {
			return err
		}
	}
	for _, m := range crashSimModes { // every "after" first, every "before" last
		for _, p := range crashSimPackages {
			exe := filepath.Join(bin, p.name+".test")
			for _, db := range dbs {
				env := append(os.Environ(), m.env...)
				// IDEMGEN_STRESS: the stress spec's package plays its whole
				// matrix only in the stress tier (example/stress/shop/tier_test.go).
				env = append(env, "IDEMGEN_TEST_POSTGRES="+cfg.db, "IDEMGEN_STRESS=1")
				args := []string{"-test.run", "^TestCrashSim.*/" + db + "$", "-test.v", "-test.count=1", "-test.timeout=60m"}
				if m.short {
					args = append(args, "-test.short")
				}
				cmd := exec.CommandContext(ctx, exe, args...)
				cmd.Dir = filepath.Join(root, filepath.FromSlash(p.pkg))
				cmd.Env = env
				var buf bytes.Buffer
				cmd.Stdout, cmd.Stderr = &buf, &buf
				if err := cmd.Run(); err != nil {
					return fmt.Errorf("%s %s (%s): %v\n%s", p.pkg, db, m.label, err, buf.String())
				}
				cpu[m.label+"/"+db] += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
				for _, match := range crashSimLine.FindAllStringSubmatch(buf.String(), -1) {
					n, _ := strconv.Atoi(match[3])
					took, err := time.ParseDuration(match[4])
					if err != nil {
						return fmt.Errorf("%s: %q: %v", p.pkg, match[0], err)
					}
					key := match[1] + "/" + match[2]
					if rows[m.label] == nil {
						rows[m.label] = map[string]crashSimRow{}
					}
					if _, seen := rows["after"][key]; !seen && m.label == "after" {
						order = append(order, key)
					}
					rows[m.label][key] = crashSimRow{job: match[1], db: match[2], scenarios: n, took: took}
				}
			}
		}
	}
	fmt.Fprintf(out, "\ncrash simulation, seconds per job (CPUs %s; before: cold SQLite files, PostgreSQL sessions per incarnation, the engine's slot bound, 4 at once; after: warm files, pools handed on, the simulated slot wait, %s at once)\n",
		strconv.Itoa(runtime.GOMAXPROCS(0)), "2×CPUs (at least 6)")
	fmt.Fprintf(out, "%-18s %-9s %9s %9s %9s %7s %9s %9s\n", "job", "database", "scenarios", "before_s", "after_s", "ratio", "short_sc", "short_s")
	for _, key := range order {
		b, a, s := rows["before"][key], rows["after"][key], rows["short"][key]
		if a.scenarios != b.scenarios {
			return fmt.Errorf("crashsim %s: %d scenarios before, %d after: the matrix changed", key, b.scenarios, a.scenarios)
		}
		if a.scenarios <= s.scenarios {
			return fmt.Errorf("crashsim %s: the whole matrix played %d scenarios, the -short sample %d: the whole matrix was not played", key, a.scenarios, s.scenarios)
		}
		fmt.Fprintf(out, "%-18s %-9s %9d %9.1f %9.1f %7.2f %9d %9.1f\n", b.job, b.db, b.scenarios, b.took.Seconds(), a.took.Seconds(),
			a.took.Seconds()/b.took.Seconds(), s.scenarios, s.took.Seconds())
	}
	for _, db := range dbs {
		fmt.Fprintf(out, "CPU of the test processes, %s: before %.1f s, after %.1f s, short %.1f s\n", db,
			cpu["before/"+db].Seconds(), cpu["after/"+db].Seconds(), cpu["short/"+db].Seconds())
	}
	if cfg.kills {
		return crashSimKills(ctx, root, cfg, out)
	}
	return nil
}

// mutationScore is the line the mutation check logs at its end.
var mutationScore = regexp.MustCompile(`mutation score (\d+)/(\d+) \(the -short sample kills (\d+)\)`)

// crashSimKills runs the mutation check (generator/internal/mutation, on
// SQLite and, with -db, PostgreSQL) and prints the planted bugs the whole
// matrix and the -short sample kill. A survivor fails the check, and the
// run with it.
func crashSimKills(ctx context.Context, root string, cfg *config, out io.Writer) error {
	env := append(os.Environ(), "IDEMGEN_MUTATION=1", "IDEMGEN_TEST_POSTGRES="+cfg.db)
	began := time.Now()
	log, err := runIn(ctx, root, env, "go", "test", "-count=1", "-timeout=120m", "-v", "-run", "TestMutantsAreKilled", "./generator/internal/mutation")
	if err != nil {
		return fmt.Errorf("the mutation check: %v", err) // its output is in err
	}
	m := mutationScore.FindStringSubmatch(log)
	if m == nil {
		return fmt.Errorf("the mutation check printed no score:\n%s", log)
	}
	killed, _ := strconv.Atoi(m[1])
	total, _ := strconv.Atoi(m[2])
	short, _ := strconv.Atoi(m[3])
	fmt.Fprintf(out, "planted bugs of the mutation check killed: whole matrix %d of %d, -short sample %d of %d (%.1f%%), in %s\n",
		killed, total, short, total, 100*float64(short)/float64(max(1, total)), time.Since(began).Round(time.Second))
	return nil
}
