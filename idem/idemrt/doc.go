// Package idemrt is the contract between idemgen's generated code and its
// runtime: the engine that runs jobs (keys, ledger, leases, progress,
// parked units), the stores' interface (Store, Querier), the helpers the
// generated SQL code calls (Key*, SQL*, Read*, Pg*, SQLite*). The hooks
// the tests set in a job (a crash hook at its crash points, a simulated
// lease clock) are not here: they are the package idemtest's, for tests
// only.
//
// Services import package idem, not this: it declares the names a service
// uses (Report, Outcome, the errors, Permanent, RetryAfter, the options,
// Retry, RetryParked, Forget) as this package's, so a value of one is a
// value of the other. What is here may change with any release of idemgen,
// together with the code it generates.
//
// The crash-simulation harness the generated tests use is the package
// crashsim beside this one; production builds never import it, nor
// idemtest.
// OpenTelemetry reporting is the package idemotel, an Observer given to a
// job with WithObserver; without it nothing of OpenTelemetry is linked.
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
