package idemrt

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Backoff is the wait between failed attempts of an effect: Initial after
// the first failure, doubling up to Max, each wait drawn between half and
// all of it (jitter), so a fleet that failed together does not retry
// together. The next attempt's time is kept in the ledger row, on the
// database's clock: no worker claims the row before it.
type Backoff struct {
	Initial, Max time.Duration
}

// DefaultRetry is the backoff of an effect whose spec sets no retry.
var DefaultRetry = Backoff{Initial: time.Second, Max: time.Hour}

// orDefault fills a zero field from DefaultRetry.
func (b Backoff) orDefault() Backoff {
	if b.Initial <= 0 {
		b.Initial = DefaultRetry.Initial
	}
	if b.Max <= 0 {
		b.Max = max(DefaultRetry.Max, b.Initial)
	}
	return b
}

// wait is the backoff after attempts failed attempts: Initial·2^(attempts-1),
// at most Max, scaled by a draw in [0.5, 1).
func (b Backoff) wait(attempts int32, draw func() float64) time.Duration {
	b = b.orDefault()
	d := b.Initial
	for i := int32(1); i < attempts && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(float64(d) * (0.5 + draw()/2))
}

// Longest is the most a failed attempt can wait before the next one: Max,
// or the default's when unset.
func (b Backoff) Longest() time.Duration { return b.orDefault().Max }

// ErrRetryAfter marks a provider's "not now" (see RetryAfter).
var ErrRetryAfter = errors.New("provider asked to be called later")

// RetryAfter marks err, returned by an effect provider, as its "not now"
// (HTTP 429 or 503 with Retry-After): the next attempt waits at least d
// (the effect's backoff when d is not positive), fleet-wide, for the time
// is kept in the ledger, and this attempt does not count against
// max_attempts. errors.Is(RetryAfter(d, err), ErrRetryAfter) holds and
// errors.Unwrap gives err back; RetryAfter(d, nil) is nil. A failure both
// Permanent and RetryAfter is permanent.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return retryAfterError{d: d, err: err}
}

type retryAfterError struct {
	d   time.Duration
	err error
	// effect: the "not now" is about the provider, not the key: the whole
	// effect pauses (PauseEffect).
	effect bool
}

func (r retryAfterError) Error() string {
	if r.effect {
		return fmt.Sprintf("effect paused for %s: %v", r.d, r.err)
	}
	return fmt.Sprintf("retry after %s: %v", r.d, r.err)
}
func (r retryAfterError) Unwrap() error        { return r.err }
func (r retryAfterError) Is(target error) bool { return target == ErrRetryAfter }

// retryAfterOf returns the wait err asks for when it is a RetryAfter.
func retryAfterOf(err error) (time.Duration, bool) {
	var r retryAfterError
	if errors.As(err, &r) {
		return r.d, true
	}
	return 0, false
}

// ErrCallTimeout: a provider call ran past its effect's timeout and was
// canceled. Its outcome is unknown; the effect is tried again later with
// the same key, never while the timed-out call could still be in flight.
var ErrCallTimeout = errors.New("provider call timed out")

// jitter draws the backoff's random factor, in [0, 1).
var jitter = rand.Float64
