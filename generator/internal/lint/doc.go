// Package lint holds static checks, built on golang.org/x/tools/go/analysis,
// of the Go code around a package idemgen generated: the mistakes no
// runtime can catch because they are in the caller's hands. An effect whose
// implementation drops its idempotency key, or makes a new one on every
// attempt, charges a card twice after a crash however correct the ledger is.
//
// The analyzers find generated packages by their header, "// Code generated
// by idemgen. DO NOT EDIT.", and by the shapes idemgen emits: unit structs
// with a Key method, effect interfaces whose one method takes (ctx, key,
// unit), their …Func adapters and job types with Process. What they learn
// there is exported as analysis facts, so packages that import a generated
// package are checked against it by any driver: `idemgen lint ./...`, or
// `go vet -vettool=$(which idemgen) ./...`, or a multichecker of your own
// over [Analyzers].
//
// Test files (_test.go) are not checked: tests routinely make up keys and
// fake providers that ignore them. One check, TestOnly, is of the other
// files only: it reports their imports of idemgen's test packages
// (idem/idemtest, idem/crashsim), whose hooks production must not reach.
package lint

import "golang.org/x/tools/go/analysis"

// Analyzers are idemgen's checks, in the order their help lists them.
var Analyzers = []*analysis.Analyzer{EffectKey, EffectResult, UnitKey, ProcessResult, TestOnly}
