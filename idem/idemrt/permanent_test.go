package idemrt

import (
	"errors"
	"fmt"
	"testing"
)

func TestPermanentWrapsAndIsRecognised(t *testing.T) {
	declined := errors.New("card declined")
	p := Permanent(declined)
	if !errors.Is(p, ErrPermanent) || !errors.Is(p, declined) {
		t.Fatalf("errors.Is(Permanent(err), ErrPermanent / err) = %v / %v, want true", errors.Is(p, ErrPermanent), errors.Is(p, declined))
	}
	if errors.Unwrap(p) != declined {
		t.Fatalf("errors.Unwrap gives %v, want the provider's error", errors.Unwrap(p))
	}
	// Wrapped again by the engine or the provider, it is still permanent.
	if wrapped := fmt.Errorf("charge: %w", p); !errors.Is(wrapped, ErrPermanent) {
		t.Fatal("a wrapped permanent error lost its mark")
	}
	if errors.Is(declined, ErrPermanent) || errors.Is(fmt.Errorf("x: %w", declined), ErrPermanent) {
		t.Fatal("a plain error counts as permanent")
	}
	if Permanent(nil) != nil {
		t.Fatal("Permanent(nil) is not nil")
	}
	if got := p.Error(); got != "permanent: card declined" {
		t.Fatalf("Error() = %q", got)
	}
}
