package idem

import (
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// ErrRetryAfter marks a provider's "not now" (see RetryAfter).
var ErrRetryAfter = idemrt.ErrRetryAfter

// RetryAfter marks err, returned by an effect provider, as its "not now"
// (HTTP 429 or 503 with Retry-After): the next attempt waits at least d
// (the effect's backoff when d is not positive), fleet-wide, for the time
// is kept in the ledger, and this attempt does not count against
// max_attempts. errors.Is(RetryAfter(d, err), ErrRetryAfter) holds and
// errors.Unwrap gives err back; RetryAfter(d, nil) is nil. A failure both
// Permanent and RetryAfter is permanent.
func RetryAfter(d time.Duration, err error) error { return idemrt.RetryAfter(d, err) }

// ErrCallTimeout: a provider call ran past its effect's timeout and was
// canceled. Its outcome is unknown; the effect is tried again later with
// the same key, never while the timed-out call could still be in flight.
var ErrCallTimeout = idemrt.ErrCallTimeout
