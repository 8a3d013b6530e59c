// Package idem is what a service uses of idemgen's runtime: the results
// the generated jobs return (Report, Outcome, EffectOutcome, the ledger's
// LedgerEntry and ParkedUnit), the errors (ErrPayloadMismatch, ErrParked,
// ErrPermanent, ...) with Permanent and RetryAfter for an effect's
// provider call, the options a job takes (WithLogger, WithOwner,
// WithBatchSize, ...) and a person's recovery (Retry, RetryParked,
// Forget). One runtime serves every generated package of a service, so a
// Report or an error from one job is the same type as from any other.
//
// The contract between the runtime and the code idemgen generates (the
// engine, the stores' interface, the SQL helpers, the crash points and the
// hooks the generated tests set) is the package idemrt, which services do
// not import. The names here are idemrt's: idem.Report is idemrt.Report.
package idem

import "github.com/idemgen/idemgen/idem/idemrt"

// Version is the runtime's version. Generated code checks at compile time
// that the runtime is at least as new as the generator that wrote it.
const Version = idemrt.Version
