package idem

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// ErrNothingUnderKey is returned by Retry and Forget for a key no ledger
// row, parked-table row or handed-in key record is under.
var ErrNothingUnderKey = idemrt.ErrNothingUnderKey

// RefusedError is a recovery refused because of a row's state, such as an
// effect a worker holds under a live lease. Nothing was written.
type RefusedError = idemrt.RefusedError

// The kinds of row a Change is about.
const (
	KindEffect   = idemrt.KindEffect   // a ledger row
	KindUnit     = idemrt.KindUnit     // a parked-table row: a unit whose write failed
	KindHandedIn = idemrt.KindHandedIn // a handed-in unit's key record
)

// Change is one row a recovery changed or removed (or, for a dry run,
// would remove).
type Change = idemrt.Change

// Recovery is the ledger and parked-unit listings and a person's recovery
// calls of one generated package: its Store embeds one, so store.Retry,
// store.Forget, store.LedgerPage and the rest work on that package's
// tables, on the database's clock.
type Recovery = idemrt.Recovery

// Retry puts back what is parked under key, in job (every job when job is
// ""): the parked effect whose effect key it is is owed again with its
// attempts at 0, so the next Run or Drain performs it with the same key;
// the failing or parked unit whose unit key it is is written again from
// its stored payload by the next Run (Drain, for handed-in units). An
// effect that is not parked refuses the whole retry (*RefusedError): a
// leased one is a worker's, a pending one is owed already, a done one
// needs Forget. now is the time leases are compared on (the database's
// clock: StoreNow). It returns what it changed.
func Retry(ctx context.Context, st Store, job, key string, now time.Time) ([]Change, error) {
	return idemrt.Retry(ctx, st, job, key, now)
}

// RetryParked puts every parked effect and parked unit of the jobs back,
// as Retry does, in one transaction, and returns what it changed.
func RetryParked(ctx context.Context, st Store, now time.Time, jobs ...string) ([]Change, error) {
	return idemrt.RetryParked(ctx, st, now, jobs...)
}

// Forget forgets key on purpose, in job (every job when job is ""): it
// removes the ledger row whose effect key it is, and the parked-table row
// and handed-in key record whose unit key it is, and returns them. An
// effect a worker holds under a lease live at now refuses the whole
// forget (*RefusedError). With dryRun it returns what it would remove and
// writes nothing.
//
// Forgetting has consequences the caller chose: an effect whose row is
// gone is owed again only if a write decides it again (a backfill, a
// version bump); a handed-in key is processed as new when handed in
// again; a parked unit is attempted again when it is fetched or handed in
// again.
func Forget(ctx context.Context, st Store, job, key string, now time.Time, dryRun bool) ([]Change, error) {
	return idemrt.Forget(ctx, st, job, key, now, dryRun)
}
