package idemui_test

import "github.com/idemgen/idemgen/idem/internal/billingtest"

// The operations page is tested over a real generated package, the
// example's billing (example/idemgen.yaml), on a real database: its pages
// show the runtime's own rows, and its actions change them. The outside
// world those runs meet, the databases and the scenario the pages show are
// idem/internal/billingtest's.

// quiet drops the log, in the tests and the examples alike.
var quiet = billingtest.Quiet
