// Package crashsim stands in for the crash-simulation harness, which may
// import idemtest: both are for tests only.
package crashsim

import (
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// Clock is a lease clock.
var Clock = idemtest.WithLeaseClock(time.Now)
