package main

// gen/sqlc: `idemgen generate` on a spec of many jobs against `sqlc
// generate` alone on the very sqlc.yaml and SQL that idemgen hands sqlc.
//
// idemgen runs sqlc in a child process (generator.SQLCChild: idemgen built with
// sqlc linked, started with IDEMGEN_SQLC_CHILD=1, one sqlc run over one
// sqlc.yaml for every dialect), so "sqlc alone" is the sqlc binary run
// once, as a process, over the same input: both sides pay a process start
// and sqlc's parse of the same SQL, and the difference is what idemgen
// adds (parsing the spec, emitting Go and SQL, writing the files, and its
// own start). The binaries are built once, from this module, before
// anything is timed.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/generator"
)

type genResult struct {
	jobs, runs    int
	idemgen, sqlc time.Duration // medians
}

func measureGenerate(ctx context.Context, cfg *config) (*genResult, error) {
	tmp, err := os.MkdirTemp("", "idemgen-bench-gen-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	idemgenBin, sqlcBin := filepath.Join(tmp, "idemgen"), filepath.Join(tmp, "sqlc")
	for bin, pkg := range map[string]string{idemgenBin: "github.com/idemgen/idemgen/cmd/idemgen", sqlcBin: "github.com/sqlc-dev/sqlc/cmd/sqlc"} {
		if err := runCmd(ctx, "", nil, "go", "build", "-o", bin, pkg); err != nil {
			return nil, fmt.Errorf("build %s (run the benchmark inside the idemgen module): %w", pkg, err)
		}
	}
	// idemgen's sqlc child, which generate would otherwise build in the
	// spec's module: that module does not require idemgen.
	child := filepath.Join(tmp, "idemgen-sqlc")
	if err := runCmd(ctx, "", nil, "go", "build", "-o", child, "github.com/idemgen/idemgen/generator/internal/sqlc/child"); err != nil {
		return nil, fmt.Errorf("build idemgen's sqlc child: %w", err)
	}
	childEnv := []string{generator.SQLCExeEnv + "=" + child}

	// The spec, in a module of its own.
	mod := filepath.Join(tmp, "mod")
	specFile := filepath.Join(mod, "idemgen.yaml")
	specText := manyJobsSpec(cfg.genJobs)
	if err := os.MkdirAll(mod, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module benchgen\n\ngo 1.26\n"), 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(specFile, []byte(specText), 0o644); err != nil {
		return nil, err
	}
	sqlcIn, err := sqlcInput(ctx, specFile, []byte(specText))
	if err != nil {
		return nil, err
	}

	res := &genResult{jobs: cfg.genJobs, runs: cfg.genRuns}
	var idemgenTimes, sqlcTimes []time.Duration
	for i := range cfg.genRuns {
		// idemgen: a first generation every time (no earlier output to compare with).
		if err := os.RemoveAll(filepath.Join(mod, "gen")); err != nil {
			return nil, err
		}
		start := time.Now()
		if err := runCmd(ctx, mod, childEnv, idemgenBin, "generate", "-f", specFile); err != nil {
			return nil, fmt.Errorf("idemgen generate: %w", err)
		}
		idemgenTimes = append(idemgenTimes, time.Since(start))
		if i == 0 {
			if _, err := os.Stat(filepath.Join(mod, "gen", "internal", "pgdb", "queries.sql.go")); err != nil {
				return nil, fmt.Errorf("idemgen generate wrote no sqlc output: %w", err)
			}
		}

		// sqlc alone, over a fresh copy of the same input.
		dir := filepath.Join(tmp, fmt.Sprintf("sqlc-%d", i))
		for name, data := range sqlcIn {
			p := filepath.Join(dir, filepath.FromSlash(name))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return nil, err
			}
		}
		start = time.Now()
		if err := runCmd(ctx, dir, nil, sqlcBin, "generate", "-f", filepath.Join(dir, "sqlc.yaml")); err != nil {
			return nil, fmt.Errorf("sqlc generate: %w", err)
		}
		sqlcTimes = append(sqlcTimes, time.Since(start))
		if _, err := os.Stat(filepath.Join(dir, "internal", "pgdb", "queries.sql.go")); err != nil {
			return nil, fmt.Errorf("sqlc generate wrote no output: %w", err)
		}
		os.RemoveAll(dir)
	}
	res.idemgen, res.sqlc = median(idemgenTimes), median(sqlcTimes)
	return res, nil
}

// sqlcInput returns the files idemgen hands sqlc for the spec: it runs the
// generator in this process with an SQLC that keeps its input and runs
// nothing.
func sqlcInput(ctx context.Context, file string, data []byte) (map[string][]byte, error) {
	f, ds := generator.ParseSpec(file, data)
	if ds.HasErrors() {
		return nil, fmt.Errorf("the generated spec is invalid: %v", ds.Sorted())
	}
	var c captureSQLC
	if _, err := generator.Generate(ctx, f, generator.Options{SQLC: &c, ImportPath: "benchgen/gen"}); err != nil {
		return nil, err
	}
	if _, ok := c.in["sqlc.yaml"]; !ok {
		return nil, errors.New("the generator handed sqlc no sqlc.yaml")
	}
	return c.in, nil
}

type captureSQLC struct{ in map[string][]byte }

func (c *captureSQLC) Run(_ context.Context, in map[string][]byte) (map[string][]byte, error) {
	c.in = maps.Clone(in)
	return nil, nil
}

// manyJobsSpec writes a spec of n jobs in three shapes: a watermark sync
// with an effect, a cursor sync without effects, handed-in units written
// once with an effect that keeps its result.
func manyJobsSpec(n int) string {
	var b strings.Builder
	b.WriteString("version: 1\npackage: gen\nout: gen\ndialects: [postgres, sqlite]\njobs:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - name: job_%02d\n    version: 1\n    unit:\n      type: Unit%02d\n      fields:\n", i, i)
		fmt.Fprintf(&b, "        - id: string\n        - account_id: string\n        - amount: int64\n        - ratio: float64\n        - flag: bool\n        - note: string?\n        - updated_at: time\n")
		fmt.Fprintf(&b, "      key: \"gen:%02d:{id}\"\n", i)
		switch i % 3 {
		case 0:
			fmt.Fprintf(&b, "    source:\n      watermark: {field: updated_at, overlap: 10m}\n")
			fmt.Fprintf(&b, "    destination: {table: rows_%02d, unique: [id], write: upsert, newer_wins: updated_at}\n", i)
			fmt.Fprintf(&b, "    effects:\n      - {name: notify_%02d, key: \"notify:%02d:v{version}:{id}\", version: 1, when: inserted, lease: 5m, retention: 720h}\n", i, i)
		case 1:
			fmt.Fprintf(&b, "    source:\n      cursor: {}\n")
			fmt.Fprintf(&b, "    destination: {table: rows_%02d, unique: [id], write: upsert}\n", i)
		case 2:
			fmt.Fprintf(&b, "    source:\n      none: {}\n")
			fmt.Fprintf(&b, "    destination: {table: rows_%02d, write: insert_once}\n", i)
			fmt.Fprintf(&b, "    effects:\n      - {name: receipt_%02d, key: \"receipt:%02d:v{version}:{id}\", version: 1, when: inserted, lease: 2m, retention: 720h, keep_result: true}\n", i, i)
		}
	}
	return b.String()
}

func runCmd(ctx context.Context, dir string, env []string, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return nil
}

func median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	return s[len(s)/2]
}
