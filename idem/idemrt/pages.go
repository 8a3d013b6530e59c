package idemrt

import (
	"context"
	"fmt"
	"time"
)

// Reads and deletes over the bookkeeping tables are bounded: a listing
// reads a page at a time on a table's primary key, and Purge deletes in
// batches, each its own short statement. Nothing an operator or a test
// runs has to hold a large ledger in one result or one transaction.

// DefaultPurgeBatch is how many rows one of Purge's statements deletes at
// most, unless WithPurgeBatch says otherwise.
const DefaultPurgeBatch = 1000

// WithPurgeBatch bounds how many rows one of Purge's statements deletes
// (default DefaultPurgeBatch): Purge repeats the statement until fewer come
// back, so no statement holds its locks, or writes its WAL, for long.
func WithPurgeBatch(n int) Option { return func(o *options) { o.purgeBatch = n } }

// DefaultPurgeShare is the share of its time Purge spends in its
// statements unless WithPurgeShare says otherwise.
const DefaultPurgeShare = 0.25

// WithPurgeShare sets the most of its time Purge spends running its
// statements (default DefaultPurgeShare): after a batch that took d, it
// waits d × (1 − share) / share before the next. A purge is housekeeping
// beside running jobs: at 0.25 it leaves them three quarters of the
// database's time (on SQLite, of its one write lock) while it clears a
// year of expired rows. 1 waits not at all, for a purge run alone; values
// outside (0, 1] are taken as 1.
func WithPurgeShare(share float64) Option {
	return func(o *options) {
		if share <= 0 || share > 1 {
			share = 1
		}
		o.purgeShare = share
	}
}

// purgePause is how long Purge waits after a batch that took took, so that
// its batches fill at most share of its time.
func purgePause(took time.Duration, share float64) time.Duration {
	return time.Duration(float64(took) * (1 - share) / share)
}

// ledgerReadPage is how many rows a whole-table read (Querier.Ledger)
// fetches per statement.
const ledgerReadPage = 1000

// LedgerPage returns at most limit ledger rows whose effect keys sort after
// after ("" for the first page), in effect key order, and the cursor of
// the next page: the last key returned, or "" when no row follows. It reads
// on the ledger's primary key, so a page costs the same however large the
// ledger is. The generated Store's LedgerPage calls it:
//
//	for after := ""; ; {
//		rows, next, err := store.LedgerPage(ctx, after, 100)
//		...
//		if next == "" {
//			break
//		}
//		after = next
//	}
func LedgerPage(ctx context.Context, st Store, after string, limit int) ([]LedgerEntry, string, error) {
	if limit <= 0 {
		return nil, "", fmt.Errorf("idem: ledger page: limit %d is not positive", limit)
	}
	rows, err := st.Auto().LedgerPage(ctx, after, int32(limit)+1)
	return pageOf(rows, err, limit, func(e LedgerEntry) string { return e.Key })
}

// ParkedPage returns at most limit of job's parked-table rows (failing,
// parked or put back for retry) whose unit keys sort after after ("" for
// the first page), in unit key order, and the cursor of the next page, ""
// when no row follows. It reads on the parked table's primary key (job,
// unit_key). The generated Store's ParkedPage calls it.
func ParkedPage(ctx context.Context, st Store, job, after string, limit int) ([]ParkedUnit, string, error) {
	if limit <= 0 {
		return nil, "", fmt.Errorf("idem: parked page: limit %d is not positive", limit)
	}
	rows, err := st.Auto().ParkedPage(ctx, job, after, int32(limit)+1)
	return pageOf(rows, err, limit, func(u ParkedUnit) string { return u.Key })
}

// pageOf cuts rows, read with one row more than the page's limit (which
// says whether a next page exists), to the page and its next cursor: the
// last key returned, or "" when no row follows.
func pageOf[T any](rows []T, err error, limit int, key func(T) string) ([]T, string, error) {
	if err != nil {
		return nil, "", err
	}
	if len(rows) <= limit {
		return rows, "", nil
	}
	rows = rows[:limit]
	return rows, key(rows[limit-1]), nil
}

// ReadWholeLedger reads every ledger row through page, a store's
// LedgerPage, a page at a time: what a dialect's Querier.Ledger does, so
// no statement returns the whole table. The result still holds every row.
func ReadWholeLedger(ctx context.Context, page func(ctx context.Context, after string, limit int32) ([]LedgerEntry, error)) ([]LedgerEntry, error) {
	var out []LedgerEntry
	for after := ""; ; {
		rows, err := page(ctx, after, ledgerReadPage)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		if len(rows) < ledgerReadPage {
			return out, nil
		}
		after = rows[len(rows)-1].Key
	}
}

// purgeInBatches runs one batch delete (at most limit rows per call) until a
// call deletes fewer than limit, pausing between batches so that they fill
// at most share of its time (purgePause) and checking ctx there, and
// returns how many rows it deleted in all.
func purgeInBatches(ctx context.Context, limit int, share float64, batch func(limit int32) (int64, error)) (int64, error) {
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		start := time.Now()
		n, err := batch(int32(limit))
		total += n
		if err != nil || n < int64(limit) {
			return total, err
		}
		if pause := purgePause(time.Since(start), share); pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return total, ctx.Err()
			case <-t.C:
			}
		}
	}
}
