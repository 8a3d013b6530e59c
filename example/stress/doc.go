// Package stress runs the crash simulations over and over, several at
// once, and fails if a single run ends in anything but a normal exit: a
// process killed by a fault, a run that hangs, a schema left behind. It
// runs only with IDEMGEN_STRESS set (CI sets it); see stress_test.go.
package stress

//go:generate go tool idemgen generate
