package idemops

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Steering by hand (idem/idemrt/steer.go): an override of an effect's
// rate and concurrency, and a pause by hand, which `idemgen ledger limit`,
// `idemgen ledger pause` and the operations page write through the
// runtime, and status shows.

// OverrideStatus is an effect's rate and concurrency set by hand, as
// status shows it: the values followed instead of the spec's (none: the
// spec's), who set them and since when.
type OverrideStatus struct {
	RateN       int        `json:"rate_n,omitempty"`
	RatePer     Seconds    `json:"rate_per_s,omitempty"`
	Concurrency int        `json:"concurrency,omitempty"`
	By          string     `json:"by"`
	Since       *time.Time `json:"since"`
	// Spec is the effect's limits in the spec, which -reset puts back.
	Spec *EffectSpec `json:"-"`
}

// Text says in one line what the override sets, beside the spec's values.
func (o *OverrideStatus) Text() string {
	spec := o.Spec
	s := ""
	if o.RateN > 0 {
		s = fmt.Sprintf("rate %s", RateText(o.RateN, time.Duration(o.RatePer)))
		if spec != nil {
			s += fmt.Sprintf(" (spec: %s)", RateText(spec.RateN, spec.RatePer))
		}
	}
	if o.Concurrency > 0 {
		if s != "" {
			s += ", "
		}
		s += fmt.Sprintf("concurrency %d", o.Concurrency)
		if spec != nil {
			s += fmt.Sprintf(" (spec: %s)", concurrencyText(spec.Concurrency))
		}
	}
	when := "?"
	if o.Since != nil {
		when = o.Since.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("limits set by hand by %s since %s: %s", o.By, when, s)
}

// RateText writes a rate as the spec does (20/s, 600/m), or "none".
func RateText(n int, per time.Duration) string {
	switch {
	case n <= 0 || per <= 0:
		return "none"
	case per == time.Second:
		return fmt.Sprintf("%d/s", n)
	case per == time.Minute:
		return fmt.Sprintf("%d/m", n)
	case per == time.Hour:
		return fmt.Sprintf("%d/h", n)
	}
	return fmt.Sprintf("%d/%s", n, per)
}

func concurrencyText(n int) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// readOverrides sets each effect's Override from the limits table's
// override rows (slot -3). A table from before the gate's columns has none.
func (d *DB) readOverrides(ctx context.Context, jobFor func(string) *JobStatus) error {
	return d.eachOverride(ctx, "", "", func(job, effect string, o *OverrideStatus) {
		js := jobFor(job)
		for i := range js.Effects {
			if js.Effects[i].Effect == effect {
				js.Effects[i].Override = o
			}
		}
	})
}

// Override reads job's effect's override as status shows it; nil when its
// limits are the spec's.
func (d *DB) Override(ctx context.Context, job, effect string) (*OverrideStatus, error) {
	var found *OverrideStatus
	err := d.eachOverride(ctx, job, effect, func(_, _ string, o *OverrideStatus) { found = o })
	return found, err
}

// eachOverride calls f with each override row (of job's effect only, when
// job is not "").
func (d *DB) eachOverride(ctx context.Context, job, effect string, f func(job, effect string, o *OverrideStatus)) error {
	if !d.hasGateColumns(ctx) {
		return nil
	}
	rows, err := d.overrideRows(ctx, job, effect)
	if err != nil {
		return wrapRead(d.t.Limits, err)
	}
	for _, r := range rows {
		o, err := idemrt.ReadOverride(int32(r.failures), r.reason, int32(r.opens), r.owner, r.since.t)
		if err != nil {
			return wrapRead(d.t.Limits, err)
		}
		f(r.job, r.effect, &OverrideStatus{RateN: int(o.Rate.N), RatePer: Seconds(o.Rate.Per), Concurrency: int(o.Concurrency),
			By: o.By, Since: r.since.ptr(), Spec: d.effect(r.job, r.effect)})
	}
	return nil
}

// hasGateColumns reports whether the package has a limits table with the
// gate's columns (the migration that added them ran).
func (d *DB) hasGateColumns(ctx context.Context) bool {
	return d.t.Limits != "" && d.hasColumns(ctx, d.t.Limits, "job, effect, slot, owner, held_until, gate, failures, opens, since, reason")
}

// steerable refuses to steer an effect the spec does not have (a typo
// would steer nothing) or a database whose limits table predates steering.
func (d *DB) steerable(ctx context.Context, job, effect string) error {
	if d.job(job) == nil {
		return fmt.Errorf("package %s has no job %q in its spec", d.pkg.Name, job)
	}
	if d.effect(job, effect) == nil {
		return fmt.Errorf("job %s has no effect %q in the spec", job, effect)
	}
	if !d.hasGateColumns(ctx) {
		return fmt.Errorf("package %s: the limits table lacks the columns of a newer migration; apply the package's migrations (Store.Migrate) first", d.pkg.Name)
	}
	return nil
}

// SetLimits overrides the rate and concurrency of job's effect
// fleet-wide (idem.SetLimits), as `idemgen ledger limit` does; o.By says
// who. Logged.
func (d *DB) SetLimits(ctx context.Context, job, effect string, o idem.LimitOverride) error {
	if err := d.steerable(ctx, job, effect); err != nil {
		return err
	}
	if err := idem.SetLimits(ctx, d.st, job, effect, o); err != nil {
		return err
	}
	d.log.Info("idemgen ledger: set the effect's limits by hand", "package", d.pkg.Name, "job", job, "effect", effect,
		"rate", RateText(int(o.Rate.N), o.Rate.Per), "concurrency", o.Concurrency, "by", o.By)
	return nil
}

// ResetLimits puts the spec's rate and concurrency of job's effect back
// (idem.ResetLimits), as `idemgen ledger limit -reset` does. It reports
// whether there was an override; logged.
func (d *DB) ResetLimits(ctx context.Context, job, effect, by string) (bool, error) {
	if err := d.steerable(ctx, job, effect); err != nil {
		return false, err
	}
	had, err := idem.ResetLimits(ctx, d.st, job, effect)
	if err != nil {
		return false, err
	}
	if had {
		d.log.Info("idemgen ledger: the effect's limits are the spec's again", "package", d.pkg.Name, "job", job, "effect", effect, "by", by)
	}
	return had, nil
}

// PauseByHand pauses job's effect for dur fleet-wide (idem.PauseByHand),
// as `idemgen ledger pause` does; LiftGate ends it. It returns the
// pause's end; logged.
func (d *DB) PauseByHand(ctx context.Context, job, effect string, dur time.Duration, by string) (time.Time, error) {
	if err := d.steerable(ctx, job, effect); err != nil {
		return time.Time{}, err
	}
	until, err := idem.PauseByHand(ctx, d.st, job, effect, dur, by)
	if err != nil {
		return time.Time{}, err
	}
	d.log.Info("idemgen ledger: paused the effect by hand", "package", d.pkg.Name, "job", job, "effect", effect, "until", until, "by", by)
	return until, nil
}

// ParseRate reads a rate as the spec writes it: N/s, N/m or N/h (N/1s,
// N/500ms and other Go durations too).
func ParseRate(s string) (idem.Rate, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	calls, err := strconv.Atoi(n)
	if !ok || err != nil || calls <= 0 || calls > math.MaxInt32 {
		return idem.Rate{}, fmt.Errorf("rate %q: want N/s, N/m or N/h with N a positive number of calls", s)
	}
	d, known := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[per]
	if !known {
		if d, err = time.ParseDuration(per); err != nil || d <= 0 {
			return idem.Rate{}, fmt.Errorf("rate %q: the period is s, m, h or a positive Go duration", s)
		}
	}
	return idem.Rate{N: int32(calls), Per: d}, nil
}
