package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// childFlag is the hidden flag that turns the binary into a peak-memory
// child: it runs copy_job over that many units on a space of its own and
// exits, and the parent reads the child's peak RSS from its rusage.
const childFlag = "internal-child-copyjob"

// childEnv marks the child too, for binaries that parse their own flags
// first (a test binary: see TestMain in bench_test.go).
const childEnv = "IDEMGEN_BENCH_CHILD"

type memResult struct {
	units   int
	maxRSS  int64 // bytes
	elapsed time.Duration
}

// measureMemory re-executes this binary once per cfg.memRows size.
func measureMemory(ctx context.Context, cfg *config) ([]memResult, error) {
	var out []memResult
	for _, n := range cfg.memRows {
		args := []string{"-" + childFlag, strconv.Itoa(n), "-batch", strconv.Itoa(cfg.batch),
			"-concurrency", strconv.Itoa(cfg.concurrency)}
		if cfg.db != "" {
			args = append(args, "-db", cfg.db)
		}
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return out, fmt.Errorf("copy_job child at %d units: %w\n%s", n, err, buf.String())
		}
		if !strings.Contains(buf.String(), fmt.Sprintf("rows=%d ", n)) {
			return out, fmt.Errorf("copy_job child at %d units did not report its rows:\n%s", n, buf.String())
		}
		ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		if !ok {
			return out, fmt.Errorf("no rusage for the child on this system")
		}
		// Linux reports ru_maxrss in KiB.
		out = append(out, memResult{units: n, maxRSS: ru.Maxrss * 1024, elapsed: time.Since(start)})
	}
	return out, nil
}

// memChild is the child: copy_job over cfg.childCopyJob units, the same
// measurement as the parent's first line, then the counts on stdout.
func memChild(ctx context.Context, cfg *config, out io.Writer) error {
	d, err := openDatabase(cfg.db, cfg.concurrency+4)
	if err != nil {
		return err
	}
	defer d.close()
	cfg.rows = cfg.childCopyJob
	res, err := measureCopyJob(ctx, d, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s in %v\n", res.check, res.elapsed)
	return nil
}
