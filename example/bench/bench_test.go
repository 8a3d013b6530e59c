package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMain lets the test binary serve as the peak-memory child, as the
// bench binary does through its hidden flag (mem.go).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if _, err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

var ratiosLine = regexp.MustCompile(`^ratios: copyjob/copy=\S+ fxjob/handset=\S+ fxjob/per_row_tx=\S+ rerun/first=\S+ effects/bound=\S+ gen/sqlc=\S+ providers1/R=\S+ providers4/R=\S+ river/bare=\S+$`)

// smoke runs the whole benchmark at tiny sizes and checks that every
// measurement did its work, so that it cannot silently measure nothing.
func smoke(t *testing.T, rows, effectsN int, extra ...string) *results {
	t.Helper()
	args := append([]string{"-rows", fmt.Sprint(rows), "-batch", "300", "-effects-n", fmt.Sprint(effectsN),
		"-latency", "1ms", "-concurrency", "4", "-mem", "-mem-rows", "300,1500"}, extra...)
	var out bytes.Buffer
	res, err := run(t.Context(), args, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}

	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !ratiosLine.MatchString(last) {
		t.Errorf("last line %q is not the ratios line", last)
	}
	if n := strings.Count(out.String(), "ratios: "); n != 1 {
		t.Errorf("%d ratios lines, want exactly 1", n)
	}

	for _, c := range []struct {
		r           result
		rows, calls int
	}{
		{res.copyJob, rows, -1},
		{res.copy, rows, -1},
		{res.fxJob, rows, rows},
		{res.rerun, rows, 0}, // a re-run calls nobody
		{res.perRow, rows, rows},
		{res.handSet, rows, rows},
		{res.effects, effectsN, effectsN},
	} {
		if c.r.units == 0 || c.r.elapsed <= 0 {
			t.Errorf("%s: nothing measured (units %d, elapsed %v)", c.r.name, c.r.units, c.r.elapsed)
		}
		if c.r.rows != c.rows || c.r.calls != c.calls {
			t.Errorf("%s: %d rows and %d provider calls, want %d and %d", c.r.name, c.r.rows, c.r.calls, c.rows, c.calls)
		}
	}
	// Several batches' calls are in flight at once (effectsN spans
	// batches of 300), within one bound.
	if res.effectsPeak < 2 || res.effectsPeak > 4 {
		t.Errorf("effects: at most %d provider calls in flight at once, want 2 to the concurrency of 4", res.effectsPeak)
	}
	if len(res.mem) != 2 || res.mem[0].maxRSS <= 0 || res.mem[1].maxRSS <= 0 {
		t.Errorf("peak memory: %+v, want two positive figures", res.mem)
	}
	return res
}

func TestBenchSQLite(t *testing.T) {
	res := smoke(t, 2000, 700, "-gen-jobs", "3", "-gen-runs", "1")
	if res.gen == nil || res.gen.idemgen <= 0 || res.gen.sqlc <= 0 {
		t.Errorf("gen/sqlc: %+v, want both timed", res.gen)
	}
}

// TestBenchPostgres runs on the database IDEMGEN_TEST_POSTGRES names, with
// fewer rows (the per-unit engine writes a few hundred rows a second
// there on a busy machine) and without the generation measurement, which
// does not depend on the database and runs in TestBenchSQLite.
func TestBenchPostgres(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the benchmark there too")
	}
	smoke(t, 1000, 700, "-db", url, "-no-gen")

	// Every measurement's schema is gone.
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var left int
	err = conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_namespace WHERE nspname LIKE $1",
		fmt.Sprintf("idemgen_bench_%d_%%", os.Getpid())).Scan(&left)
	if err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d schemas of this run were left behind", left)
	}
}
