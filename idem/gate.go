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
