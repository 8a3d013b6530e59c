package testonly

import (
	"time"

	// A directive above the import counts as one on its line.
	//idemgen:allow-testonly the demo simulates a day, leases included
	simulated "github.com/idemgen/idemgen/idem/idemtest"
)

var demoClock = simulated.WithLeaseClock(time.Now)
