package crashsim

import (
	"context"
	"errors"
	"os"
	"slices"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The writeahead-fail family: writeahead's second phase (batches of one
// written ahead, a key's older version two batches before its newer one,
// the older write held back until the newer batch waits for it), with a
// write that fails once: in fail-between the batch between the two,
// while the older write is still in flight; in fail-newer the newer
// version's, after it waited. The unit fails alone; the watermark saved
// at the phase's end must not pass it (the next run fetches it again and
// writes it), and the newer version must end in the row.

const famWriteAheadFail = "writeahead-fail"

const (
	simFailBetween = "fail-between"
	simFailNewer   = "fail-newer"
)

type writeaheadFailFamily[U any] struct {
	writeaheadFamily[U]
	// Under r.mu: the key whose write failed, how many deliveries the
	// world had made then, and the writes of the echoed key seen at the
	// fail point.
	failedKey  string
	failedAt   int
	echoWrites int
}

func (*writeaheadFailFamily[U]) about() familyAbout {
	return familyAbout{name: famWriteAheadFail, guarantees: []int{1, 3, 8},
		what: "PostgreSQL: writeahead's second phase (a key's older version two batches of one before " +
			"its newer one, the older write held back), with one write that fails once: the batch " +
			"between the two while the older write is in flight, or the newer version's; the unit fails " +
			"alone, the watermark saved at the phase's end keeps its mark in the next window, the next run " +
			"writes it, and the newer version ends in the row (rows, parked units, progress checked)"}
}

// plan: writeahead's jobs fed by a watermark (whose window puts another
// batch between the two versions), on a store that writes ahead
// (PostgreSQL): one scenario a failing write.
func (*writeaheadFailFamily[U]) plan(d *discovery[U]) []simScenario {
	j := d.job
	if j.Source != SourceWatermarkName || !j.HasDest || j.Stage || len(j.Effects) > 0 || d.clean.env != "postgres" {
		return nil
	}
	if j.UnitMaxAttempts == 1 {
		return nil // one failure parks the unit, and the watermark passes it: poison's case
	}
	if os.Getenv(idemtest.EnvPoolOne) != "" {
		return nil // a pool of one connection writes one batch at a time: nothing is in flight
	}
	var plan []simScenario
	for _, v := range []string{simFailBetween, simFailNewer} {
		sc := newScenario(famWriteAheadFail)
		sc.variant = v
		plan = append(plan, sc)
	}
	return plan
}

// beforePhase: only the second phase repeats a key, two batches back.
func (f *writeaheadFailFamily[U]) beforePhase(r *simRun[U], phase int) {
	if phase == 1 {
		f.writeaheadFamily.beforePhase(r, phase)
	}
}

// faultAt fails one write at the fail point, once: fail-between the
// first of another key while the echoed key's older write is held back,
// fail-newer the echoed key's second.
func (f *writeaheadFailFamily[U]) faultAt(r *simRun[U], _ int, h simHit) error {
	if f.failedKey != "" || h.p != r.job.failPoint() || h.detail == "" {
		return nil
	}
	fail := false
	for key, l := range f.lagKeys {
		switch {
		case r.sc.variant == simFailBetween && key != h.detail && l.held && !l.awaited && !l.committed:
			fail = true
		case r.sc.variant == simFailNewer && key == h.detail:
			f.echoWrites++
			fail = f.echoWrites == 2
		}
	}
	if !fail {
		return nil
	}
	f.failedKey, f.failedAt = h.detail, len(r.history)
	return errors.New("simulated write failure while other batches are in flight")
}

// servedBefore is the lag of the repeated key whose older version the
// window served just before key, with key between it and the newer one;
// nil if key is no such unit.
func (f *writeaheadFailFamily[U]) servedBefore(r *simRun[U], key string) *simLag {
	r.window.mu.Lock()
	var lagKey string
	for k, e := range r.window.echo {
		if slices.Contains(e.betweenKeys, key) {
			lagKey = k
		}
	}
	r.window.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	return f.lagKeys[lagKey]
}

func (f *writeaheadFailFamily[U]) failedWrite() (string, int) { return f.failedKey, f.failedAt }

// beforeCrash: in fail-between, a unit served between the two versions
// starts only once the older write is held back (batches written ahead
// start in order but run as the scheduler lets them, so on a loaded
// machine the unit between could otherwise commit before the older one
// even started), and the newer version's batch waits for the batches in
// flight (batch.await, which lets the older write go) only once the write
// between has failed, so that write fails while the older one is in
// flight whatever the machine's speed; then writeahead's hold.
func (f *writeaheadFailFamily[U]) beforeCrash(ctx context.Context, r *simRun[U], inc *simInc, h simHit) error {
	between := r.sc.variant == simFailBetween && inc.writesAhead.Load() // else one batch after another
	if between && h.p == idemtest.PointUnitStart {
		if lag := f.servedBefore(r, h.detail); lag != nil && r.holdUntil(inc, func() bool { return lag.held || lag.committed }) {
			r.violate("%s: the older version's write of a key served before %s did not start within %s",
				r.sc.variant, h.detail, simWriteAheadHold)
		}
	}
	if between && h.p == idemtest.PointBatchAwait {
		r.mu.Lock()
		lag := f.lagKeys[h.detail] != nil
		r.mu.Unlock()
		if lag && r.holdUntil(inc, func() bool { return f.failedKey != "" }) {
			r.violate("%s: no write between the two versions failed within %s", r.sc.variant, simWriteAheadHold)
		}
	}
	return f.writeaheadFamily.beforeCrash(ctx, r, inc, h)
}

// playPhase: after the phase with the failure, the next window still
// holds the failed unit's mark.
func (f *writeaheadFailFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{})
	r.mu.Lock()
	key := f.failedKey
	r.mu.Unlock()
	if phase != 1 {
		return
	}
	if key == "" {
		r.violate("%s: no write failed while the older version's write was in flight", r.sc.variant)
		return
	}
	r.window.mu.Lock()
	u, ok := r.window.units[key]
	r.window.mu.Unlock()
	if !ok {
		return
	}
	p, err := r.db.observer().Auto().Progress(context.Background(), r.job.Name)
	if err != nil {
		r.violate("%s: read progress: %v", r.sc.variant, err)
		return
	}
	// The next window starts an overlap before the watermark, which
	// never goes back: a late unit behind it is fetched again in the
	// overlap.
	if mark := r.job.MarkOf(u); p.HasMark && p.Watermark.Add(-r.job.Overlap).After(mark) {
		r.violate("%s: the watermark was saved at %s, so the next window (from %s) passes the failed unit %s's mark %s",
			r.sc.variant, p.Watermark, p.Watermark.Add(-r.job.Overlap), key, mark)
	}
}

// checkEnd: writeahead's own (none: every scenario has a fault).
func (*writeaheadFailFamily[U]) checkEnd(context.Context, *simRun[U], simExpect[U]) {}
