package idem

import "github.com/idemgen/idemgen/idem/idemrt"

// Observer is told what a job does while it does it, for metrics and
// traces; idem/idemotel implements it over OpenTelemetry, so this package
// imports none of it. The engine calls it on the job's goroutine, in order;
// it must be quick and must not fail the job. A method that returns a
// context returns the one the engine carries on with (a span's, say) until
// the matching end, which gets that context back.
type Observer = idemrt.Observer

// WithObserver reports the job to o (see Observer); idemotel.Option is
// the OpenTelemetry one. Without it a job pays one nil check per event.
func WithObserver(o Observer) Option { return idemrt.WithObserver(o) }

// Backlog is what a job owes and what waits for a person.
type Backlog = idemrt.Backlog
