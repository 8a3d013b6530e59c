package idem

import "time"

// Backoff is the wait between failed attempts of an effect: Initial after
// the first failure, doubling up to Max, each wait drawn between half and
// all of it (jitter), so a fleet that failed together does not retry
// together.
type Backoff struct {
	Initial, Max time.Duration
}

// DefaultRetry is the backoff of an effect whose spec sets no retry.
var DefaultRetry = Backoff{Initial: time.Second, Max: time.Hour}

// Rate is a number of provider calls per period (spec rate: 50/s, 600/m, 1000/h).
type Rate struct {
	N   int32
	Per time.Duration
}
