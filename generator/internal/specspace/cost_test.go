package specspace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envCost turns TestSpecSpaceCost on: how many drawn specs it measures.
const envCost = "IDEMGEN_SPECSPACE_COST"

// crashSubtest is a job's crash simulation on one database, as the
// generated test names it: TestCrashSimOrderSync/sqlite.
var crashSubtest = regexp.MustCompile(`^TestCrashSim(\w+)/(sqlite|postgres)$`)

// TestSpecSpaceCost measures what the proof costs users' specs, not ours:
// it draws IDEMGEN_SPECSPACE_COST specs (the run's seed and
// IDEMGEN_SPECSPACE_FROM as TestSpecSpace takes them), generates and
// builds them, then plays every job's crash simulation in full and as
// the -short sample, one package at a time (two cores for one service's
// go test, both databases in one process; IDEMGEN_SPECSPACE_ONLY
// measures one), and prints per dialect and
// mode the median, 90th percentile and worst seconds per job, then each
// job's figures. It fails on a failing crash test; the targets
// (docs/benchmarks.md) are read from its table, not asserted.
func TestSpecSpaceCost(t *testing.T) {
	n := envInt(t, envCost, 0)
	if n == 0 {
		t.Skip(envCost + "=N measures the crash simulation's cost over N drawn specs")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available: cannot build the drawn specs")
	}
	seed := uint64(envInt(t, envSeed, defaultSeed))
	from := envInt(t, envFrom, 0)
	dir := moduleDir(t)
	indexes := make([]int, n)
	for i := range indexes {
		indexes[i] = from + i
	}
	if s := os.Getenv(envOnly); s != "" {
		only, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", envOnly, s, err)
		}
		indexes = []int{only}
	}
	for _, i := range indexes {
		c := draw(seed, i)
		if err := write(dir, c); err != nil {
			t.Fatalf("seed %d spec %d does not generate: %v", seed, i, err)
		}
	}
	build := exec.Command(gocmd, "test", "-count=1", "-run", "^$", "./...")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false -mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the drawn specs' tests: %v\n%s", err, out)
	}
	full := crashSeconds(t, gocmd, dir, false)
	short := crashSeconds(t, gocmd, dir, true)

	var b strings.Builder
	fmt.Fprintf(&b, "crash simulation seconds per job, %d specs (seed %d, from %d), one package at a time\n", n, seed, from)
	fmt.Fprintf(&b, "%-9s %-6s %5s %7s %7s %7s\n", "dialect", "mode", "jobs", "median", "p90", "worst")
	for _, dialect := range []string{"sqlite", "postgres"} {
		for _, m := range []struct {
			name string
			secs map[string]float64
		}{{"full", full}, {"-short", short}} {
			var xs []float64
			for k, s := range m.secs {
				if strings.HasSuffix(k, "/"+dialect) {
					xs = append(xs, s)
				}
			}
			if len(xs) == 0 {
				continue
			}
			slices.Sort(xs)
			fmt.Fprintf(&b, "%-9s %-6s %5d %7.1f %7.1f %7.1f\n", dialect, m.name, len(xs), quantile(xs, 0.5), quantile(xs, 0.9), xs[len(xs)-1])
		}
	}
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range full {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "  %-48s full %6.1f  -short %5.1f\n", k, full[k], short[k])
	}
	t.Log("\n" + b.String())
}

// crashSeconds plays every drawn package's crash simulations (-short or
// in full), one package at a time, and returns each job's seconds per
// database, keyed "package TestCrashSimJob/dialect".
func crashSeconds(t *testing.T, gocmd, dir string, short bool) map[string]float64 {
	args := []string{"test", "-json", "-count=1", "-p", "1", "-timeout", "60m", "-run", "^TestCrashSim"}
	if short {
		args = append(args, "-short")
	}
	cmd := exec.Command(gocmd, append(args, "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false -mod=mod", "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	stdout, err := cmd.Output()
	t.Logf("go %s: %s", strings.Join(args, " "), time.Since(start).Round(time.Second))
	secs := map[string]float64{}
	output := map[string]*strings.Builder{}
	var failed []string
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Action, Package, Test, Output string
			Elapsed                       float64
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || !crashSubtest.MatchString(ev.Test) {
			continue
		}
		key := strings.TrimPrefix(ev.Package, specModule+"/") + " " + ev.Test
		if output[key] == nil {
			output[key] = &strings.Builder{}
		}
		output[key].WriteString(ev.Output)
		switch ev.Action {
		case "pass":
			secs[key] = ev.Elapsed
		case "fail":
			failed = append(failed, key)
		}
	}
	for _, key := range failed {
		t.Errorf("%s fails:\n%s", key, tail(output[key].String(), 60))
	}
	if err != nil && len(failed) == 0 {
		t.Fatalf("go %s: %v\n%s\n%s", strings.Join(args, " "), err, tail(string(stdout), 40), stderr.String())
	}
	if len(secs) == 0 {
		t.Fatalf("go %s ran no crash simulation", strings.Join(args, " "))
	}
	return secs
}

// quantile is the q-th quantile of the sorted xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	i := int(q*float64(len(xs))+0.999999) - 1
	return xs[max(0, min(i, len(xs)-1))]
}
