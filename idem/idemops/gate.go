package idemops

import (
	"context"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// GateStatus is an effect's gate (idem/idemrt/gate.go) as status shows it: paused
// by its provider (idem.PauseEffect) or its circuit open, since and until
// when, and why: the provider's last answer.
type GateStatus struct {
	// State is "paused", "open" (the circuit: no call until Until, then
	// one probe) or "probe" (the probe in flight until Until at most).
	State    string     `json:"state"`
	Since    *time.Time `json:"since"`
	Until    *time.Time `json:"until"`
	Reason   string     `json:"reason"`
	Failures int        `json:"failures_in_a_row"`
	Opens    int        `json:"opens_in_a_row"`
	// By is who paused the effect by hand (idem.PauseByHand); "" for a
	// pause of its provider and a circuit.
	By string `json:"by,omitempty"`
}

// readGates sets each effect's Gate from the limits table's gate rows
// (slot -2) whose pause or circuit holds at now. A table from before the
// gate has none.
func (d *DB) readGates(ctx context.Context, now time.Time, jobFor func(string) *JobStatus) error {
	return d.eachGate(ctx, now, "", "", func(job, effect string, g *GateStatus) {
		js := jobFor(job)
		for i := range js.Effects {
			if js.Effects[i].Effect == effect {
				js.Effects[i].Gate = g
			}
		}
	})
}

// Gate reads job's effect's gate as status shows it (the same read): nil
// when the effect is neither paused nor its circuit open at the page's
// clock. The operations page shows it before a lift.
func (d *DB) Gate(ctx context.Context, job, effect string) (*GateStatus, error) {
	var found *GateStatus
	err := d.eachGate(ctx, d.now().UTC(), job, effect, func(_, _ string, g *GateStatus) { found = g })
	return found, err
}

// eachGate calls f with each gate row (of job's effect only, when job is
// not "") that holds at now: a pause or cool-down not yet over, or a probe
// in flight.
func (d *DB) eachGate(ctx context.Context, now time.Time, job, effect string, f func(job, effect string, g *GateStatus)) error {
	if !d.hasGateColumns(ctx) {
		return nil
	}
	rows, err := d.gateRows(ctx, job, effect)
	if err != nil {
		return wrapRead(d.t.Limits, err)
	}
	for _, r := range rows {
		if r.gate != idemrt.GateProbe && (!r.heldUntil.valid || !r.heldUntil.t.After(now)) {
			continue // a pause or cool-down over: the next call goes through (the probe, for a circuit)
		}
		g := &GateStatus{State: r.gate, Since: r.since.ptr(), Until: r.heldUntil.ptr(), Reason: r.reason, Failures: r.failures, Opens: r.opens}
		if r.gate == idemrt.GatePaused {
			g.By = r.owner // a provider's pause has no owner; one by hand has who
		}
		f(r.job, r.effect, g)
	}
	return nil
}

// GateText says in one line what an effect's gate holds, for status.
func GateText(g *GateStatus) string {
	when := func(t *time.Time) string {
		if t == nil {
			return "?"
		}
		return t.UTC().Format(time.RFC3339)
	}
	switch g.State {
	case idemrt.GatePaused:
		if g.By != "" {
			return fmt.Sprintf("paused by hand by %s since %s until %s", g.By, when(g.Since), when(g.Until))
		}
		return fmt.Sprintf("paused by its provider since %s until %s: %s", when(g.Since), when(g.Until), g.Reason)
	case idemrt.GateProbe:
		return fmt.Sprintf("circuit open since %s, its probe in flight (until %s at most): %s", when(g.Since), when(g.Until), g.Reason)
	}
	return fmt.Sprintf("circuit open since %s until %s (opened %d times in a row), then one probe: %s", when(g.Since), when(g.Until), g.Opens, g.Reason)
}

// LiftGate lifts the pause of job's effect, or closes its circuit, by
// hand: the runtime's idem.LiftGate, as `idemgen ledger lift JOB EFFECT`
// does. It reports whether there was anything to lift; logged.
func (d *DB) LiftGate(ctx context.Context, job, effect string) (bool, error) {
	if err := d.canRecover(); err != nil {
		return false, err
	}
	lifted, err := idem.LiftGate(ctx, d.st, job, effect)
	if err != nil {
		return false, err
	}
	if lifted {
		d.log.Info("idemgen ledger: lifted the effect's pause or closed its circuit", "package", d.pkg.Name, "job", job, "effect", effect)
	}
	return lifted, nil
}
