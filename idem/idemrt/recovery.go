package idemrt

import "context"

// Recovery is what a generated package's Store offers whoever looks after
// its jobs: the ledger and the parked units, whole or a page at a time,
// and a person's recovery (Retry, RetryParked, Forget) on the database's
// clock. The generated Store embeds it, so every package has the same
// methods with one implementation; `idemgen ledger` runs the same code.
type Recovery struct{ st Store }

// NewRecovery is the recovery of the jobs whose ledger st holds.
func NewRecovery(st Store) Recovery { return Recovery{st: st} }

// Ledger lists every ledger row, ordered by effect key, for tests and
// small ledgers: it reads a page at a time but holds every row in memory.
// LedgerPage reads one page.
func (r Recovery) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	return r.st.Auto().Ledger(ctx)
}

// LedgerPage lists at most limit ledger rows whose effect keys sort after
// after ("" for the first page), ordered by effect key, and the cursor of
// the next page: pass it as after to read on; "" when no row follows. Each
// page costs the same however large the ledger grows. `idemgen ledger
// list -limit N -after CURSOR` pages the same way.
func (r Recovery) LedgerPage(ctx context.Context, after string, limit int) ([]LedgerEntry, string, error) {
	return LedgerPage(ctx, r.st, after, limit)
}

// Parked lists the units whose writes failed and that were not written
// since, ordered by job and key: failing (progress waits for them), parked
// after their job's max_attempts (progress passes them), or put back for
// retry. It holds every row in memory; ParkedPage reads a job's rows a
// page at a time.
func (r Recovery) Parked(ctx context.Context) ([]ParkedUnit, error) {
	return r.st.Auto().UnitFailures(ctx)
}

// ParkedPage lists at most limit of job's units in Parked, those whose
// keys sort after after ("" for the first page), ordered by key, and the
// cursor of the next page: pass it as after to read on; "" when no row
// follows.
func (r Recovery) ParkedPage(ctx context.Context, job, after string, limit int) ([]ParkedUnit, string, error) {
	return ParkedPage(ctx, r.st, job, after, limit)
}

// Retry puts back what is parked under key in job ("" for every job) and
// returns what it changed: the parked effect whose effect key it is is
// owed again with its attempts at 0 (the next Run or Drain performs it,
// with the same key); the failing or parked unit whose unit key it is is
// written again from its stored payload by the next Run (Drain, for
// handed-in units). An effect that is not parked refuses the retry
// (*RefusedError); a key with nothing under it is ErrNothingUnderKey.
// `idemgen ledger retry KEY` runs the same code.
func (r Recovery) Retry(ctx context.Context, job, key string) ([]Change, error) {
	now, err := StoreNow(ctx, r.st)
	if err != nil {
		return nil, err
	}
	return Retry(ctx, r.st, job, key, now)
}

// RetryParked puts every parked effect and parked unit of job back, as
// Retry does, in one transaction, and returns what it changed. `idemgen
// ledger retry -all-parked` runs the same code.
func (r Recovery) RetryParked(ctx context.Context, job string) ([]Change, error) {
	now, err := StoreNow(ctx, r.st)
	if err != nil {
		return nil, err
	}
	return RetryParked(ctx, r.st, now, job)
}

// Forget forgets key in job ("" for every job) on purpose and returns what
// it removed: the ledger row whose effect key it is, the parked unit and
// the handed-in key record whose unit key it is. An effect held under a
// live lease refuses it (*RefusedError). An effect forgotten is owed again
// only if a write decides it again (a backfill, a version bump); a
// handed-in key is processed as new when handed in again. `idemgen ledger
// reset -force KEY` runs the same code.
func (r Recovery) Forget(ctx context.Context, job, key string) ([]Change, error) {
	now, err := StoreNow(ctx, r.st)
	if err != nil {
		return nil, err
	}
	return Forget(ctx, r.st, job, key, now, false)
}
