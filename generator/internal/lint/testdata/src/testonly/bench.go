package testonly

import (
	"time"

	"github.com/idemgen/idemgen/idem/idemtest" //idemgen:allow-testonly the benchmark edits the spec's rate per run
)

var benchClock = idemtest.WithLeaseClock(time.Now)
