package idemops_test

import "github.com/idemgen/idemgen/idem/internal/billingtest"

// The operations reads and recovery are tested over a real generated
// package, the example's billing (example/idemgen.yaml), on a real
// database: what they read is what the runtime's runs wrote. The outside
// world those runs meet, the databases and the scenario the tests read are
// idem/internal/billingtest's.

// quiet drops the log, in the tests and the examples alike.
var quiet = billingtest.Quiet
