package idem

import "github.com/idemgen/idemgen/idem/idemrt"

// DefaultPurgeBatch is how many rows one of Purge's statements deletes at
// most, unless WithPurgeBatch says otherwise.
const DefaultPurgeBatch = idemrt.DefaultPurgeBatch

// WithPurgeBatch bounds how many rows one of Purge's statements deletes
// (default DefaultPurgeBatch): Purge repeats the statement until fewer come
// back, so no statement holds its locks, or writes its WAL, for long.
func WithPurgeBatch(n int) Option { return idemrt.WithPurgeBatch(n) }

// DefaultPurgeShare is the share of its time Purge spends in its
// statements unless WithPurgeShare says otherwise.
const DefaultPurgeShare = idemrt.DefaultPurgeShare

// WithPurgeShare sets the most of its time Purge spends running its
// statements (default DefaultPurgeShare): after a batch that took d, it
// waits d × (1 − share) / share before the next. A purge is housekeeping
// beside running jobs: at 0.25 it leaves them three quarters of the
// database's time (on SQLite, of its one write lock) while it clears a
// year of expired rows. 1 waits not at all, for a purge run alone; values
// outside (0, 1] are taken as 1.
func WithPurgeShare(share float64) Option { return idemrt.WithPurgeShare(share) }
