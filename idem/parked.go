package idem

import "github.com/idemgen/idemgen/idem/idemrt"

// States of a parked-table row.
const (
	UnitStateFailing = idemrt.UnitStateFailing // failed fewer than max_attempts times (or has no max_attempts): progress waits
	UnitStateParked  = idemrt.UnitStateParked  // failed max_attempts times: skipped with this payload, passed by progress
	UnitStateRetry   = idemrt.UnitStateRetry   // put back by a person: each Run (or Drain) writes it again
)

// ErrParked is the error of a unit that was not attempted because it is
// parked with the same payload; Retry (idemgen ledger retry) puts it back.
var ErrParked = idemrt.ErrParked

// ParkedUnit is one unit whose write failed and that has not been written
// since, for operators and tests (what `idemgen ledger list` shows).
type ParkedUnit = idemrt.ParkedUnit
