package testonly

import (
	"time"

	//idemgen:allow-testonly
	"github.com/idemgen/idemgen/idem/idemtest" // want `//idemgen:allow-testonly needs its reason`
)

var lazyClock = idemtest.WithLeaseClock(time.Now)
