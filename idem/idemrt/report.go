package idemrt

import (
	"fmt"
	"log/slog"
)

// Outcome is what happened to one unit.
type Outcome string

const (
	OutcomeInserted  Outcome = "inserted"  // a new destination row
	OutcomeUpdated   Outcome = "updated"   // an existing row took newer data
	OutcomeUnchanged Outcome = "unchanged" // the row already held this (or newer) data
	OutcomeDeduped   Outcome = "deduped"   // the key was already handled; nothing written
	OutcomeAccepted  Outcome = "accepted"  // no destination: the unit's effects were considered
	OutcomeFailed    Outcome = "failed"    // the unit's write failed; retried on the next run
	OutcomeMismatch  Outcome = "mismatch"  // a handed-in key came back with a different payload
	OutcomeParked    Outcome = "parked"    // failed max_attempts runs, or parked with this payload already; progress passes it
)

// EffectOutcome is what happened to one effect of one unit.
type EffectOutcome string

const (
	EffectDone    EffectOutcome = "done"    // the provider was called and the ledger marked done
	EffectDeduped EffectOutcome = "deduped" // the ledger says done already; the kept result is returned
	EffectFailed  EffectOutcome = "failed"  // the provider failed; retried on a later run
	EffectParked  EffectOutcome = "parked"  // failed max_attempts times; left for a person
	EffectBusy    EffectOutcome = "busy"    // another run holds the reservation's lease
	EffectWaiting EffectOutcome = "waiting" // failed or throttled; waits for its next attempt time (retry, RetryAfter)
)

// Report counts what one run did. Units is filled by Process only.
type Report struct {
	Job string

	Seen, Inserted, Updated, Unchanged, Deduped, Accepted, Failed, Mismatched int

	// Parked counts units parked by this run or skipped as parked. They were
	// not written, so Failed counts them too.
	Parked int

	EffectsDone, EffectsDeduped, EffectsFailed, EffectsParked, EffectsBusy int

	// EffectsWaiting counts effects the provider asked to call later
	// (RetryAfter), or met before their next attempt time.
	EffectsWaiting int

	Units []UnitResult

	// Backlog is the job's work in the ledger when a Run, Backfill or
	// Drain ended: what is owed, and what is parked and waits for a
	// person, whether or not this call met it. A run meets a parked effect
	// only while it reads the effect's unit again (inside the overlap
	// window, or in a backfilled window), and counts it in EffectsParked
	// then; Backlog counts it on every run until a person puts it back.
	// nil for Process (it reports its own units), when the call stopped,
	// and when the count could not be read (a warning is logged).
	Backlog *Backlog
}

// UnitResult is the outcome of one handed-in unit and its effects.
type UnitResult struct {
	Key     string
	Outcome Outcome
	Err     error
	Effects []EffectResult
}

// EffectResult is the outcome of one effect; Result is the kept result, if any.
type EffectResult struct {
	Effect  string
	Key     string
	Outcome EffectOutcome
	Result  []byte
	Err     error
}

func (r *Report) countUnit(o Outcome) {
	r.Seen++
	switch o {
	case OutcomeInserted:
		r.Inserted++
	case OutcomeUpdated:
		r.Updated++
	case OutcomeUnchanged:
		r.Unchanged++
	case OutcomeDeduped:
		r.Deduped++
	case OutcomeAccepted:
		r.Accepted++
	case OutcomeFailed:
		r.Failed++
	case OutcomeMismatch:
		r.Failed++
		r.Mismatched++
	case OutcomeParked:
		r.Failed++
		r.Parked++
	}
}

func (r *Report) countEffect(o EffectOutcome) {
	switch o {
	case EffectDone:
		r.EffectsDone++
	case EffectDeduped:
		r.EffectsDeduped++
	case EffectFailed:
		r.EffectsFailed++
	case EffectParked:
		r.EffectsFailed++
		r.EffectsParked++
	case EffectBusy:
		r.EffectsBusy++
	case EffectWaiting:
		r.EffectsWaiting++
	}
}

// Add adds o's counts and units to r, to sum the reports of several calls.
func (r *Report) Add(o Report) {
	r.Seen += o.Seen
	r.Inserted += o.Inserted
	r.Updated += o.Updated
	r.Unchanged += o.Unchanged
	r.Deduped += o.Deduped
	r.Accepted += o.Accepted
	r.Failed += o.Failed
	r.Mismatched += o.Mismatched
	r.Parked += o.Parked
	r.EffectsDone += o.EffectsDone
	r.EffectsDeduped += o.EffectsDeduped
	r.EffectsFailed += o.EffectsFailed
	r.EffectsParked += o.EffectsParked
	r.EffectsBusy += o.EffectsBusy
	r.EffectsWaiting += o.EffectsWaiting
	r.Units = append(r.Units, o.Units...)
}

// LogValue lets a Report be logged as one slog group.
func (r Report) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("job", r.Job),
		slog.Int("seen", r.Seen), slog.Int("inserted", r.Inserted), slog.Int("updated", r.Updated),
		slog.Int("unchanged", r.Unchanged), slog.Int("deduped", r.Deduped), slog.Int("accepted", r.Accepted),
		slog.Int("failed", r.Failed), slog.Int("mismatched", r.Mismatched), slog.Int("parked", r.Parked),
		slog.Int("effects_done", r.EffectsDone), slog.Int("effects_deduped", r.EffectsDeduped),
		slog.Int("effects_failed", r.EffectsFailed), slog.Int("effects_parked", r.EffectsParked),
		slog.Int("effects_busy", r.EffectsBusy), slog.Int("effects_waiting", r.EffectsWaiting),
		slog.Any("backlog", r.Backlog),
	)
}

// String prints the counts on one line, then the backlog if read.
func (r Report) String() string {
	return r.counts() + r.Backlog.text()
}

func (r Report) counts() string {
	return fmt.Sprintf("%s: seen=%d inserted=%d updated=%d unchanged=%d deduped=%d accepted=%d failed=%d mismatched=%d parked=%d effects: done=%d deduped=%d failed=%d parked=%d busy=%d waiting=%d",
		r.Job, r.Seen, r.Inserted, r.Updated, r.Unchanged, r.Deduped, r.Accepted, r.Failed, r.Mismatched, r.Parked,
		r.EffectsDone, r.EffectsDeduped, r.EffectsFailed, r.EffectsParked, r.EffectsBusy, r.EffectsWaiting)
}
