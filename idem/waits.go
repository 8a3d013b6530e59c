package idem

import (
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// DefaultWaitBound is the wait bound of a job that does not set one
// (WithWaitBound) and has no effect whose lease is shorter than twice it.
const DefaultWaitBound = idemrt.DefaultWaitBound

// WithWaitBound bounds each wait of the job's transactions for a pool
// connection or a row lock (default DefaultWaitBound, or half the job's
// shortest effect lease when that is less: a write that waits longer than
// that could not perform its effects within their lease anyway).
func WithWaitBound(d time.Duration) Option { return idemrt.WithWaitBound(d) }

// WaitError is a wait that ran out of its bound: What names what was
// waited for. errors.Is(err, ErrBusy) reports it.
type WaitError = idemrt.WaitError
