// Package names holds what the generator and the runtime both need to
// agree on and nothing else: the runtime's version and the names of its
// bookkeeping tables. It imports nothing, so the idemgen command, which
// needs these names, does not link the runtime (pgx, goose) to generate.
// Package idem re-exports both; use them from there.
package names

// Version is the runtime's version (idem.Version).
const Version = "0.3.0"

// Tables names a generated package's bookkeeping tables (idemrt.Tables).
type Tables struct {
	Ledger, Progress, Seen, Parked string
	// Limits holds the fleet-wide bounds of effects with a rate or a
	// concurrency (spec rate, concurrency): a pacing row and call slots.
	Limits string
}

// LedgerPlaceholders are the table names the runtime's ledger queries are
// written with (idemrt.LedgerPlaceholders).
var LedgerPlaceholders = Tables{Ledger: "idem_ledger", Progress: "idem_progress", Seen: "idem_seen", Parked: "idem_parked", Limits: "idem_limits"}
