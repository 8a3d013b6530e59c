package storetest

// Shared limits and the gate: the rate's pace and the concurrency slots,
// and an effect's gate (pause, open, probe, lift).

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

func testLimits(t *testing.T, o Opened) {
	st := o.Store
	ctx, q := ctxOf(t), st.Auto()
	epoch := time.Unix(0, 0).UTC()
	must(t, q.EnsureLimitRows(ctx, job, effect, []int32{-1, 0, 1, 2}))
	pace, err := q.Pace(ctx, job, effect)
	must(t, err)
	if !pace.Equal(epoch) {
		t.Errorf("Pace: %v, want the first pacing row's %v (at once)", pace, epoch)
	}
	if moved, err := q.MovePace(ctx, job, effect, epoch, at(time.Second)); !moved || err != nil {
		t.Errorf("MovePace from the start read: %v (%v), want true", moved, err)
	}
	if moved, err := q.MovePace(ctx, job, effect, epoch, at(2*time.Second)); moved || err != nil {
		t.Errorf("MovePace from a start another worker took: %v (%v), want false", moved, err)
	}
	// Added once: a second worker's rows leave the first's as they are.
	must(t, q.EnsureLimitRows(ctx, job, effect, []int32{-1, 0, 1, 2}))
	if pace, _ = q.Pace(ctx, job, effect); !pace.Equal(at(time.Second)) {
		t.Errorf("Pace after moving it and adding the rows again: %v", pace)
	}

	take := func(owner string, now time.Time) (int32, bool) {
		t.Helper()
		slot, ok, err := q.TakeSlot(ctx, job, effect, 2, owner, now, now.Add(time.Minute))
		must(t, err)
		return slot, ok
	}
	a, okA := take("A", t0)
	b, okB := take("B", t0)
	_, okC := take("C", t0)
	if !okA || !okB || a == b || a < 0 || a > 1 || b < 0 || b > 1 || okC {
		t.Errorf("three takers of two slots: A %d %v, B %d %v, C %v; want A and B in slots 0 and 1, C none", a, okA, b, okB, okC)
	}
	// Another worker's engine adds the rows again: the slots stay held.
	must(t, q.EnsureLimitRows(ctx, job, effect, []int32{-2, 0, 1, 2}))
	if slot, ok := take("C", t0); ok {
		t.Errorf("after the rows were added again, C took slot %d that A or B holds", slot)
	}
	must(t, q.FreeSlot(ctx, job, effect, a, "B")) // not B's
	if _, ok := take("C", t0); ok {
		t.Error("a slot freed by a worker that did not hold it was taken")
	}
	must(t, q.FreeSlot(ctx, job, effect, a, "A"))
	if slot, ok := take("C", at(time.Second)); !ok || slot != a {
		t.Errorf("after A freed slot %d: C took %d %v", a, slot, ok)
	}
	if slot, ok := take("D", at(2*time.Minute)); !ok || slot < 0 || slot > 1 {
		t.Errorf("once the holders' leases ended: D took %d %v, want a slot below 2", slot, ok)
	}
}

// testGate: an effect's gate (idem/idemrt/gate.go) pauses, opens after the
// failures in a row, lets one probe through, and is lifted by hand.
func testGate(t *testing.T, o Opened) {
	ctx, q := ctxOf(t), o.Store.Auto()
	if _, found, err := q.Gate(ctx, job, effect); found || err != nil {
		t.Fatalf("Gate before its row: found %v (%v)", found, err)
	}
	must(t, q.EnsureLimitRows(ctx, job, effect, []int32{-2}))
	gate := func() idemrt.EffectGate {
		t.Helper()
		g, found, err := q.Gate(ctx, job, effect)
		must(t, err)
		if !found {
			t.Fatal("the gate row is gone")
		}
		return g
	}
	if g := gate(); g.State != idemrt.GateClosed || g.Shut(t0) || g.Failures != 0 {
		t.Errorf("a new gate: %+v, want closed", g)
	}
	// A pause, then a shorter one: the later end stays, since the first.
	must(t, q.PauseGate(ctx, job, effect, t0, at(time.Minute), "429 a"))
	must(t, q.PauseGate(ctx, job, effect, at(time.Second), at(30*time.Second), "429 b"))
	if g := gate(); g.State != idemrt.GatePaused || !g.Until.Equal(at(time.Minute)) || !g.Since.Equal(t0) || g.Reason != "429 b" || !g.Shut(at(59*time.Second)) || g.Shut(at(time.Minute)) {
		t.Errorf("paused twice: %+v, want paused since t0 until +1m, the last answer", g)
	}
	if ok, err := q.TakeProbe(ctx, job, effect, "P", at(2*time.Minute), at(3*time.Minute)); ok || err != nil {
		t.Errorf("a probe of a paused, not open, gate: %v (%v)", ok, err)
	}
	// Two failures in a row of three: closed; the third opens it.
	for i, want := range []string{idemrt.GatePaused, idemrt.GatePaused, idemrt.GateOpen} {
		state, until, err := q.FailGate(ctx, job, effect, 3, at(2*time.Minute), at(3*time.Minute), "503")
		must(t, err)
		if state != want || want == idemrt.GateOpen && !until.Equal(at(3*time.Minute)) {
			t.Errorf("failure %d of 3: %s until %v, want %s", i+1, state, until, want)
		}
	}
	if g := gate(); g.Opens != 1 || !g.Since.Equal(at(2*time.Minute)) {
		t.Errorf("opened: %+v, want one opening since +2m", g)
	}
	if ok, _ := q.TakeProbe(ctx, job, effect, "P", at(150*time.Second), at(4*time.Minute)); ok {
		t.Error("a probe taken inside the cool-down")
	}
	okP, err := q.TakeProbe(ctx, job, effect, "P", at(3*time.Minute), at(4*time.Minute))
	must(t, err)
	okQ, err := q.TakeProbe(ctx, job, effect, "Q", at(3*time.Minute), at(4*time.Minute))
	must(t, err)
	if !okP || okQ {
		t.Errorf("two takers of the probe: P %v, Q %v; want P only", okP, okQ)
	}
	if ok, _ := q.ReopenGate(ctx, job, effect, "Q", at(5*time.Minute), "x"); ok {
		t.Error("a probe reopened by a worker that did not hold it")
	}
	if ok, _ := q.ReopenGate(ctx, job, effect, "P", at(5*time.Minute), "503 again"); !ok {
		t.Error("the probe's holder could not reopen the circuit")
	}
	if g := gate(); g.State != idemrt.GateOpen || g.Opens != 2 || !g.Until.Equal(at(5*time.Minute)) {
		t.Errorf("reopened: %+v", g)
	}
	// The probe's worker dies: once its lease ends, another takes it over.
	if ok, _ := q.TakeProbe(ctx, job, effect, "R", at(5*time.Minute), at(6*time.Minute)); !ok {
		t.Error("no probe after the second cool-down")
	}
	if ok, _ := q.TakeProbe(ctx, job, effect, "S", at(6*time.Minute), at(7*time.Minute)); !ok {
		t.Error("a dead probe's lease ended, and no other worker could take the probe")
	}
	if ok, _ := q.CloseGate(ctx, job, effect, "R"); ok {
		t.Error("the circuit closed by a probe taken over")
	}
	if ok, _ := q.CloseGate(ctx, job, effect, "S"); !ok {
		t.Error("the probe's success did not close the circuit")
	}
	if g := gate(); g.State != idemrt.GateClosed || g.Failures != 0 || g.Opens != 0 {
		t.Errorf("closed: %+v", g)
	}
	_, _, err = q.FailGate(ctx, job, effect, 3, at(8*time.Minute), at(9*time.Minute), "503")
	must(t, err)
	must(t, q.ResetGateFailures(ctx, job, effect))
	if g := gate(); g.Failures != 0 {
		t.Errorf("failures after a success: %d", g.Failures)
	}
	must(t, q.PauseGate(ctx, job, effect, at(10*time.Minute), at(time.Hour), "maintenance"))
	if ok, err := q.LiftGate(ctx, job, effect); !ok || err != nil {
		t.Errorf("LiftGate of a paused effect: %v (%v)", ok, err)
	}
	if g := gate(); g.Shut(at(10*time.Minute)) || g.Reason != "maintenance" {
		t.Errorf("lifted: %+v, want closed, the last answer kept", g)
	}
	if ok, _ := q.LiftGate(ctx, job, effect); ok {
		t.Error("LiftGate of a closed gate says it lifted something")
	}
}
