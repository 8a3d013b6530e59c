package idemrt

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DBClock is a store, or a querier, that can read its database's clock
// (a querier on its own connection or transaction). Leases are taken,
// checked and taken over on that clock, the one every worker shares, so a
// worker whose own clock is wrong by minutes can neither stretch nor
// shorten another worker's lease. Generated stores implement it.
type DBClock interface {
	DBNow(ctx context.Context) (time.Time, error)
}

// dbClockRefresh is how long a reading of the database clock is extended
// with the worker's monotonic clock before it is read again: the drift of
// a monotonic clock over it is far below any lease.
const dbClockRefresh = 10 * time.Second

// dbClock extends the last reading of the database clock with the local
// monotonic clock (which wall-clock steps and skew do not move), so leases
// cost one query per dbClockRefresh, not one per claim. Its mutex guards
// the reading only: it is never held across a round trip, which can wait
// for a connection or a lock.
type dbClock struct {
	mu         sync.Mutex
	db         time.Time // the database's time at the reading
	local      time.Time // time.Now at the reading, for its monotonic part
	refreshing bool      // a caller is reading the database clock anew
}

// leaseNow is the time leases are compared on: the database's clock, or a
// test's lease clock (idemtest.WithLeaseClock); a store that cannot read
// its database's clock falls back to the job's clock. Inside a transaction, pass its querier: the
// clock is then read on the transaction's own connection, never on a
// second one from the pool the transaction holds one of (with every
// connection held by transactions waiting on this one's locks, that second
// connection never comes). Outside one, pass nil: the store reads it.
//
// Under a test's lease clock the database's clock is still read where and
// when it would be, and its reading thrown away: tests meet the round trips,
// and the connections they take, that production meets.
func (e *Engine[U]) leaseNow(ctx context.Context, inTx Querier) (time.Time, error) {
	var src DBClock = inTx
	if inTx == nil {
		st, ok := e.st.(DBClock)
		if !ok {
			if e.opt.hooks.LeaseClock != nil {
				return e.opt.hooks.LeaseClock(), nil
			}
			return e.opt.now(), nil
		}
		src = st
	}
	now, err := e.opt.dbClock.now(ctx, src)
	if err == nil && e.opt.hooks.LeaseClock != nil {
		now = e.opt.hooks.LeaseClock()
	}
	return now, err
}

// now is the database's time: the last reading extended, or a new one
// from src when it is older than dbClockRefresh.
func (c *dbClock) now(ctx context.Context, src DBClock) (time.Time, error) {
	c.mu.Lock()
	fresh := !c.local.IsZero() && time.Since(c.local) <= dbClockRefresh
	// A stale reading is still good while another caller refreshes it:
	// the monotonic clock drifts far less than a lease meanwhile.
	if fresh || !c.local.IsZero() && c.refreshing {
		now := c.db.Add(time.Since(c.local))
		c.mu.Unlock()
		return now, nil
	}
	c.refreshing = true
	c.mu.Unlock()
	db, local, err := readDBClock(ctx, src)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshing = false
	if err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	if local.After(c.local) {
		c.db, c.local = db, local
	}
	return c.db.Add(time.Since(c.local)), nil
}

// readDBClock reads src's clock and the local time it matches. The reading
// is somewhere in its round trip; take its middle, of the shorter of two
// round trips (the first may open a connection), so workers' readings
// agree within a fraction of a round trip: a rate's call starts are
// spaced on them.
func readDBClock(ctx context.Context, src DBClock) (db, local time.Time, err error) {
	best := time.Duration(-1)
	for range 2 {
		before := time.Now()
		now, err := src.DBNow(ctx)
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		if rtt := time.Since(before); best < 0 || rtt < best {
			best, db, local = rtt, now, before.Add(rtt/2)
		}
	}
	return db, local, nil
}
