package idem

import (
	"context"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// PauseEffect marks err, returned by an effect provider, as a "not now"
// for the whole effect, not only the key (an account throttled, a
// provider down for maintenance): no worker sharing the database starts a
// call of the effect before d has passed (the effect's first retry step
// when d is not positive), and no row waiting for it counts an attempt.
// It is a RetryAfter too: errors.Is(err, ErrRetryAfter) holds, and on an
// effect without limits (no rate, concurrency or circuit) it holds this
// row only. PauseEffect(d, nil) is nil.
func PauseEffect(d time.Duration, err error) error { return idemrt.PauseEffect(d, err) }

// LiftGate lifts the pause of job's effect, or closes its circuit, by
// hand (`idemgen ledger lift JOB EFFECT`): calls start again at once, and
// the circuit counts failures from none. It reports whether the gate was
// paused, open or counting failures; the provider's last answer is kept.
func LiftGate(ctx context.Context, st Store, job, effect string) (bool, error) {
	return idemrt.LiftGate(ctx, st, job, effect)
}

// LimitOverride is an effect's rate and concurrency set by hand at run
// time (SetLimits); a zero Rate or Concurrency keeps the spec's.
type LimitOverride = idemrt.LimitOverride

// Rate is N provider calls per period (the spec's rate: 50/s, 600/m).
type Rate = idemrt.Rate

// SetLimits overrides the spec's rate and concurrency of job's effect,
// fleet-wide, in the package's limits table (`idemgen ledger limit`):
// every worker sharing the database follows within about a second, with
// no restart. o.By says who set it; its Since is the database's now.
func SetLimits(ctx context.Context, st Store, job, effect string, o LimitOverride) error {
	return idemrt.SetLimits(ctx, st, job, effect, o)
}

// ResetLimits removes the override of job's effect (`idemgen ledger limit
// -reset`): its limits are the spec's again. It reports whether there was
// one.
func ResetLimits(ctx context.Context, st Store, job, effect string) (bool, error) {
	return idemrt.ResetLimits(ctx, st, job, effect)
}

// PauseByHand pauses job's effect for d fleet-wide (`idemgen ledger pause
// JOB EFFECT -for D`), as PauseEffect from a provider does, even on an
// effect without limits of its own (its workers see it within about a
// second); LiftGate ends it early. by says who paused it. It returns the
// pause's end on the database's clock.
func PauseByHand(ctx context.Context, st Store, job, effect string, d time.Duration, by string) (time.Time, error) {
	return idemrt.PauseByHand(ctx, st, job, effect, d, by)
}
