package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/metrics"
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
	units    int
	maxRSS   int64 // bytes, the whole process
	peakHeap int64 // bytes, the live Go heap's largest sample (what the run holds, without the SQLite module or the binary)

	// rusageMaxRSS is the child's ru_maxrss, shown next to maxRSS to make
	// the difference visible (see peakRSS).
	rusageMaxRSS int64
	elapsed      time.Duration
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
		m := memResult{units: n, elapsed: time.Since(start)}
		report := buf.String()[strings.Index(buf.String(), "peak_heap="):] // found: "rows=" came first
		if _, err := fmt.Sscanf(report, "peak_heap=%d peak_rss=%d", &m.peakHeap, &m.maxRSS); err != nil {
			return out, fmt.Errorf("copy_job child at %d units did not report its memory: %w\n%s", n, err, buf.String())
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			m.rusageMaxRSS = ru.Maxrss * 1024 // Linux reports ru_maxrss in KiB
		}
		out = append(out, m)
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
	stop := make(chan struct{})
	peak := make(chan uint64)
	go sampleHeap(stop, peak)
	res, err := measureCopyJob(ctx, d, cfg)
	close(stop)
	if err != nil {
		return err
	}
	hwm, err := peakRSS()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s in %v peak_heap=%d peak_rss=%d\n", res.check, res.elapsed, <-peak, hwm)
	return nil
}

// peakRSS returns this process's peak resident set, VmHWM in
// /proc/self/status.
//
// Not the child's rusage (ProcessState.SysUsage().Maxrss), which looks
// like the obvious source: Go starts children with a vfork-like clone that
// shares the parent's memory until exec, and Linux carries that memory's
// high-water mark over the exec into the child's ru_maxrss. Every child
// then reports at least the parent's own peak (the same figure at every
// size), and the child's real peak only when it is larger. VmHWM belongs
// to the memory the child was given at exec, so it is the child's alone.
func peakRSS() (int64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("peak RSS: %w (the -mem measurement needs Linux)", err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("peak RSS: no VmHWM in /proc/self/status")
}

// sampleHeap samples the live Go heap (as of the last GC) every 20 ms until stop closes,
// then sends the largest sample.
func sampleHeap(stop <-chan struct{}, peak chan<- uint64) {
	var most uint64
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		metrics.Read(sample)
		most = max(most, sample[0].Value.Uint64())
		select {
		case <-stop:
			peak <- most
			return
		case <-t.C:
		}
	}
}
