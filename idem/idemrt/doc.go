// Package idem is the runtime every package idemgen generates imports: the
// engine that runs jobs (keys, ledger, leases, progress, parked units), and
// the types a service sees: Report, Outcome, EffectOutcome, Option, Window,
// the errors (ErrPayloadMismatch, ErrParked, ErrPermanent, ...) and
// Permanent. One runtime serves every generated package of a service, so a
// Report or an error from one job is the same type as from any other.
//
// The exported names below the "for generated code" comments (Engine, Job,
// Effect, Store, Querier, the Key*, SQL* and Read* helpers, crash points)
// are the contract between the runtime and the code idemgen generates.
// Services call the generated packages, not these.
//
// The crash-simulation harness the generated tests use is the package
// crashsim below this one; production builds never import it.
// OpenTelemetry reporting is the package idemotel below this one, an
// Observer given to a job with WithObserver; without it nothing of
// OpenTelemetry is linked.
package idemrt

import "github.com/idemgen/idemgen/idem/names"

// Version is the runtime's version. Generated code checks at compile time
// that the runtime is at least as new as the generator that wrote it.
const Version = names.Version

// These constants are compile-time assertions: generated code refers to the
// one its generator needs, so a runtime older than the generator fails to
// build with an undefined name that says so. Upgrade the runtime with
//
//	go get github.com/idemgen/idemgen@latest
//
// (or the version of the idemgen you generate with). Each release keeps
// every earlier constant.
const (
	IsAtLeastVersion0_2_0 = true
	IsAtLeastVersion0_3_0 = true
)
