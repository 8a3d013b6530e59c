package crashsim

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
)

// How the matrix is played: how many scenarios at once, and whether a
// SQLite scenario gets its file and connections warm from the one before
// (sqlitewarm.go). Both change the time a matrix takes, never its
// scenarios or what they check; the benchmark (example/bench -only
// crashsim, docs/benchmarks.md) plays the example's matrices both ways.
const (
	// EnvWorkers sets how many scenarios play at once (default
	// DefaultWorkers); 1 plays them one after another.
	EnvWorkers = "IDEMGEN_CRASHSIM_WORKERS"
	// EnvCold, set to 1, plays the matrix as the harness did before
	// issue 39, for the benchmark's "before" side: every SQLite scenario
	// gets a new copy of the template and new connections, every
	// PostgreSQL incarnation new sessions (postgres.go), a wait for a
	// call slot runs to the engine's own bound (limits.go), the
	// scenarios start in the plan's order, not the long families' first,
	// and a consumer job's consumer families play after the others
	// (run.go).
	EnvCold = "IDEMGEN_CRASHSIM_COLD"
)

// DefaultWorkers is how many scenarios play at once without EnvWorkers:
// twice the CPUs Go may use, at least six. A scenario waits on its
// database's round trips and its workers' hand-offs a good part of its
// time: on two cores four left a tenth of the CPU idle, and six played
// the stress spec's matrix about a tenth faster on both databases.
func DefaultWorkers() int { return max(6, 2*runtime.GOMAXPROCS(0)) }

// simWorkers reads EnvWorkers; a value that is not a positive number is
// reported and the default used.
func simWorkers() int {
	raw := os.Getenv(EnvWorkers)
	if raw == "" {
		return DefaultWorkers()
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 {
		fmt.Fprintf(os.Stderr, "crashsim: %s=%q is not a positive number of workers; using %d\n", EnvWorkers, raw, DefaultWorkers())
		return DefaultWorkers()
	}
	return n
}

// simCold reports whether EnvCold asks for cold SQLite scenarios.
func simCold() bool { return os.Getenv(EnvCold) == "1" }

// simVerbose reports whether IDEMGEN_CRASHSIM_VERBOSE asks for each
// scenario's time in the test's log.
func simVerbose() bool { return os.Getenv("IDEMGEN_CRASHSIM_VERBOSE") != "" }
