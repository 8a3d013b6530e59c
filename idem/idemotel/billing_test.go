package idemotel_test

import "github.com/idemgen/idemgen/idem/internal/billingtest"

// The observer is tested over a real generated package, the example's
// billing (example/idemgen.yaml), on a real database: what it counts and
// traces is what the runs did. The outside world those runs meet and the
// databases are idem/internal/billingtest's.

// quiet drops the log.
var quiet = billingtest.Quiet
