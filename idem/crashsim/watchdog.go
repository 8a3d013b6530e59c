package crashsim

// The watchdog: a scenario that makes no progress for simStallBound fails
// at once, saying where it stopped, instead of waiting silently until go
// test's timeout kills the whole binary.
//
// Progress is any hit (a crash point or an SQL boundary, in any of the
// scenario's incarnations) and any call to the fake provider. A healthy
// scenario makes hundreds a second; its longest quiet stretch is a worker
// waiting on SQLite's busy timeout (10 s) behind a paused one.
//
// A stalled scenario is reported with its family, name (which holds its
// seed and crash points), last hit, replay command, the stacks of its own
// goroutines (they carry a pprof label) and the database's view of its
// sessions; its database is abandoned (sessions terminated, never reused)
// and the test goes on with the next scenario, then fails.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// simStallBound is how long a scenario may go without progress:
// IDEMGEN_CRASHSIM_STALL (a Go duration) or 15 s, doubled on a machine with
// fewer than four CPUs, where three test binaries at once share two.
var simStallBound = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("IDEMGEN_CRASHSIM_STALL")); err == nil && d > 0 {
		return d
	}
	if runtime.NumCPU() < 4 {
		return 30 * time.Second
	}
	return 15 * time.Second
}()

// simScenarioLabel is the pprof label every goroutine of a scenario carries.
const simScenarioLabel = "idemgen.crashsim.scenario"

var simScenarioSeq atomic.Int64

// watched plays the scenario in a goroutine of its own and returns its
// violations, or stalled=true with a report once it has made no progress
// for simStallBound.
func (r *simRun[U]) watched() (violations []string, stalled bool, report string) {
	label := fmt.Sprintf("%s#%d", r.sc, simScenarioSeq.Add(1))
	done := make(chan []string, 1)
	go pprof.Do(context.Background(), pprof.Labels(simScenarioLabel, label), func(context.Context) {
		done <- r.play()
	})
	tick := time.NewTicker(min(time.Second, simStallBound/10))
	defer tick.Stop()
	last, since := r.progress.Load(), time.Now()
	for {
		select {
		case v := <-done:
			return v, false, ""
		case <-tick.C:
			if p := r.progress.Load(); p != last {
				last, since = p, time.Now()
				continue
			}
			if time.Since(since) < simStallBound {
				continue
			}
			r.t.Stop() // its goroutines may wake later: they must not touch the test
			return nil, true, r.stallReport(label, time.Since(since))
		}
	}
}

// stallReport says where the scenario stopped.
func (r *simRun[U]) stallReport(label string, quiet time.Duration) string {
	var b strings.Builder
	r.mu.Lock()
	last := "none"
	if n := len(r.trace); n > 0 {
		h := r.trace[n-1]
		last = fmt.Sprintf("hit %d: %s %q in incarnation %d", n-1, h.p, h.detail, h.inc)
	}
	hits, incs := r.hits, r.incs
	r.mu.Unlock()
	fmt.Fprintf(&b, "crashsim watchdog: %s %s: scenario %q made no progress for %s (bound %s; IDEMGEN_CRASHSIM_STALL sets it)\n",
		r.job.Name, r.env, r.sc, quiet.Round(time.Second), simStallBound)
	fmt.Fprintf(&b, "  family %s, %d hits, %d incarnations, last %s\n", r.sc.family, hits, incs, last)
	fmt.Fprintf(&b, "  replay: IDEMGEN_CRASHSIM_SCENARIO=%q go test -run '%s' .\n", r.sc.String(), r.t.Name())
	b.WriteString("  goroutines of this scenario:\n")
	b.WriteString(indent(scenarioStacks(label), "    "))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b.WriteString("  the database's view:\n")
	b.WriteString(indent(r.db.diagnose(ctx), "    "))
	return b.String()
}

// scenarioStacks returns the stacks of the goroutines labelled label.
func scenarioStacks(label string) string {
	var all bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&all, 1)
	want := fmt.Sprintf("%q:%q", simScenarioLabel, label)
	var out strings.Builder
	for _, group := range strings.Split(all.String(), "\n\n") {
		if strings.Contains(group, want) {
			out.WriteString(group)
			out.WriteString("\n")
		}
	}
	if out.Len() == 0 {
		return "(none left)\n"
	}
	return out.String()
}

func indent(s, prefix string) string {
	var b strings.Builder
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		b.WriteString(prefix)
		b.WriteString(sc.Text())
		b.WriteString("\n")
	}
	return b.String()
}

// simT is the test as a scenario sees it. Once the scenario is abandoned
// (stalled), its goroutines may still wake up, after the test has ended;
// from then on what they report is dropped, and FailNow ends only the
// goroutine that calls it.
type simT struct {
	testing.TB
	stopped atomic.Bool
}

func (t *simT) Stop() { t.stopped.Store(true) }

func (t *simT) Errorf(format string, args ...any) {
	if !t.stopped.Load() {
		t.TB.Errorf(format, args...)
	}
}

func (t *simT) Fatalf(format string, args ...any) {
	if !t.stopped.Load() {
		t.TB.Fatalf(format, args...)
	}
	runtime.Goexit()
}

func (t *simT) Fatal(args ...any) {
	if !t.stopped.Load() {
		t.TB.Fatal(args...)
	}
	runtime.Goexit()
}

func (t *simT) Logf(format string, args ...any) {
	if !t.stopped.Load() {
		t.TB.Logf(format, args...)
	}
}
