package crashsim

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
)

type subprocessFamily[U any] struct{ baseFamily[U] }

func (*subprocessFamily[U]) about() familyAbout {
	return familyAbout{name: "subprocess", long: 500 * time.Millisecond, guarantees: []int{1, 2, 3},
		what: "a real process death (`os.Exit`) at points of the first phase"}
}

// plan: real process deaths at points spread over phase 0, including
// inside the write transaction.
func (*subprocessFamily[U]) plan(d *discovery[U]) []simScenario {
	phase0 := d.firstPhase
	if d.job.Source == SourceNoneName {
		phase0 = len(d.trace) / 2
	}
	var exits []int
	for i := 0; i < 5; i++ {
		exits = append(exits, i*phase0/5)
	}
	if k := slices.IndexFunc(d.trace[:phase0], func(h simHit) bool { return h.p == idemtest.PointUnitBeforeCommit }); k >= 0 {
		exits = append(exits, k)
	}
	var plan []simScenario
	for _, k := range slices.Compact(slices.Sorted(slices.Values(exits))) {
		sc := newScenario("subprocess")
		sc.crashAt = []int{k}
		plan = append(plan, sc)
	}
	return plan
}

// playPhase: phase 0's first run in a child process that dies at the
// scenario's hit; a new process recovers.
func (*subprocessFamily[U]) playPhase(r *simRun[U], phase int) {
	if phase != 0 {
		r.runPhase(phase, phasePlay{})
		return
	}
	if r.runChild() {
		simChildDeaths.Add(1)
		r.recover(phase)
	}
}

// Subprocess mode: the test binary re-executes itself as a child that runs
// the first run of phase 0 and exits for real at the planned point. The
// fake provider's calls are journaled to a file, synced before each call
// returns, so the outside world outlives the process.
const (
	simChildEnv     = "IDEMGEN_CRASHSIM_CHILD"
	simChildCrashed = 73
)

// simChildDeaths counts children that died at their planned point.
var simChildDeaths atomic.Int64

type simChildSpec struct {
	Locator string
	CrashAt int
	Journal string
}

// runChild runs phase 0's first run in a child process and merges what it
// did at the provider; it reports whether the child died at its point.
func (r *simRun[U]) runChild() bool {
	journal := filepath.Join(r.t.TempDir(), "provider.journal")
	spec, _ := json.Marshal(simChildSpec{Locator: r.db.locator(), CrashAt: r.sc.crashAt[0], Journal: journal})
	test, sub, _ := strings.Cut(r.t.Name(), "/")
	sub, _, _ = strings.Cut(sub, "/")
	// The child's hits are its own: it gets half the watchdog's bound, so
	// a child that hangs is reported as such before the parent stalls.
	ctx, cancel := context.WithTimeout(context.Background(), simStallBound/2)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+test+"$/^"+sub+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), simChildEnv+"="+string(spec))
	cmd.WaitDelay = time.Second
	r.progress.Add(1)
	out, err := cmd.CombinedOutput()
	r.progress.Add(1)
	r.worldMoved() // the child wrote outside this process's hooks
	var exit *exec.ExitError
	crashed := errors.As(err, &exit) && exit.ExitCode() == simChildCrashed
	switch {
	case ctx.Err() != nil:
		r.violate("subprocess child still running after %s: killed\n%s", simStallBound/2, out)
	case err != nil && !crashed:
		r.violate("subprocess child failed: %v\n%s", err, out)
	}
	data, _ := os.ReadFile(journal)
	r.prov.mu.Lock()
	defer r.prov.mu.Unlock()
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			continue
		}
		key := f[0]
		r.prov.calls[key]++
		r.prov.effect[key] = f[1]
		r.prov.order = append(r.prov.order, key)
		r.prov.n++
		if r.prov.applied[key] == 0 {
			r.prov.applied[key] = 1
			r.prov.first[key] = []byte(f[2])
		}
	}
	r.sc.crashAt = r.sc.crashAt[1:]
	return crashed
}

// simChild is the child side: attach to the parent's database, replay the
// fixture's first phase and run until the planned exit.
func simChild[U any](t *testing.T, env Env, job *Job[U], raw string) {
	var spec simChildSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatalf("child spec: %v", err)
	}
	f, err := os.OpenFile(spec.Journal, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	sc := newScenario("child")
	sc.crashAt = []int{spec.CrashAt}
	r := newSimRun(t, job, env.attach(t, spec.Locator), sc, env.name())
	r.child = true
	r.prov.journal = f
	r.setClock(phaseClock(0))
	r.serve(0)
	r.runTask(0, workPhase)
	os.Exit(0) // finished before the planned point
}
