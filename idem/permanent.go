package idem

import "github.com/idemgen/idemgen/idem/idemrt"

// ErrPermanent marks an effect failure that no retry can fix; see Permanent.
var ErrPermanent = idemrt.ErrPermanent

// Permanent marks err, returned by an effect provider, as a failure that
// no retry can fix (a declined card, an address that does not exist). The
// effect is parked at once (state parked, outcome EffectParked)
// instead of being retried up to its max_attempts, and replays report it
// parked without calling the provider again. errors.Is(Permanent(err),
// ErrPermanent) holds and errors.Unwrap gives err back; Permanent(nil) is nil.
func Permanent(err error) error { return idemrt.Permanent(err) }
