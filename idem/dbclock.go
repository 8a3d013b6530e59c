package idem

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// DBClock is a store that can read its database's clock. Leases are taken,
// checked and taken over on that clock, the one every worker shares, so a
// worker whose own clock is wrong by minutes can neither stretch nor
// shorten another worker's lease. Generated stores implement it.
type DBClock interface {
	DBNow(ctx context.Context) (time.Time, error)
}

// WithLeaseClock replaces the database clock leases are compared on. It is
// for tests that simulate time passing on the database (the crash
// simulation expires leases with it); WithClock does not move leases.
func WithLeaseClock(now func() time.Time) Option { return func(o *options) { o.leaseClock = now } }

// dbClockRefresh is how long a reading of the database clock is extended
// with the worker's monotonic clock before it is read again: the drift of
// a monotonic clock over it is far below any lease.
const dbClockRefresh = 10 * time.Second

// dbClock extends the last reading of the database clock with the local
// monotonic clock (which wall-clock steps and skew do not move), so leases
// cost one query per dbClockRefresh, not one per claim.
type dbClock struct {
	mu    sync.Mutex
	db    time.Time // the database's time at the reading
	local time.Time // time.Now at the reading, for its monotonic part
}

// leaseNow is the time leases are compared on: the database's clock, or the
// test's WithLeaseClock; a store that cannot read its database's clock falls
// back to the job's clock.
func (e *Engine[U]) leaseNow(ctx context.Context) (time.Time, error) {
	if e.opt.leaseClock != nil {
		return e.opt.leaseClock(), nil
	}
	st, ok := e.st.(DBClock)
	if !ok {
		return e.opt.now(), nil
	}
	c := e.opt.dbClock
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.local.IsZero() || time.Since(c.local) > dbClockRefresh {
		// The reading is somewhere in its round trip; take its middle, of
		// the shorter of two round trips (the first may open a
		// connection), so workers' readings agree within a fraction of a
		// round trip: a rate's call starts are spaced on them.
		best := time.Duration(-1)
		for range 2 {
			before := time.Now()
			db, err := st.DBNow(ctx)
			if err != nil {
				return time.Time{}, fmt.Errorf("read the database clock: %w", err)
			}
			if rtt := time.Since(before); best < 0 || rtt < best {
				best, c.db, c.local = rtt, db, before.Add(rtt/2)
			}
		}
	}
	return c.db.Add(time.Since(c.local)), nil
}
