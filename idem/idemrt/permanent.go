package idemrt

import "errors"

// ErrPermanent marks an effect failure that no retry can fix; see Permanent.
var ErrPermanent = errors.New("permanent failure")

// Permanent marks err, returned by an effect provider, as a failure that
// no retry can fix (a declined card, an address that does not exist). The
// effect is parked at once (state parked, outcome EffectParked)
// instead of being retried up to its max_attempts, and replays report it
// parked without calling the provider again. errors.Is(Permanent(err),
// ErrPermanent) holds and errors.Unwrap gives err back; Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

type permanentError struct{ err error }

// permanentPrefix starts a permanent failure's text, also in the ledger's last_error.
const permanentPrefix = "permanent: "

func (p permanentError) Error() string        { return permanentPrefix + p.err.Error() }
func (p permanentError) Unwrap() error        { return p.err }
func (p permanentError) Is(target error) bool { return target == ErrPermanent }
