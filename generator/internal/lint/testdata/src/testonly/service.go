// Package testonly is a service that reaches idemgen's test packages.
package testonly

import (
	"time"

	"github.com/idemgen/idemgen/idem/crashsim" // want `github.com/idemgen/idemgen/idem/crashsim is for tests only, imported here by a file that is not a _test.go file`
	"github.com/idemgen/idemgen/idem/idemtest" // want `github.com/idemgen/idemgen/idem/idemtest is for tests only, imported here by a file that is not a _test.go file: production code could reach its test hooks`
)

var clocks = []func() time.Time{crashsim.Clock, idemtest.WithLeaseClock(time.Now)}
