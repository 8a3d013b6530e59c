package idemrt

import (
	"errors"
	"testing"
	"time"
)

func TestPauseEffect(t *testing.T) {
	if PauseEffect(time.Second, nil) != nil {
		t.Error("PauseEffect(d, nil) is not nil")
	}
	cause := errors.New("429")
	err := PauseEffect(30*time.Second, cause)
	if !errors.Is(err, ErrRetryAfter) || errors.Unwrap(err) != cause {
		t.Errorf("PauseEffect: %v is not a RetryAfter of its cause", err)
	}
	if d, ok := pauseOf(err); !ok || d != 30*time.Second {
		t.Errorf("pauseOf: %v %v", d, ok)
	}
	if _, ok := pauseOf(RetryAfter(time.Second, cause)); ok {
		t.Error("a RetryAfter of the key is taken for a pause of the effect")
	}
}

// The cool-down doubles with each opening, up to 8 times, with jitter in
// [1, 1.25) of its step.
func TestCircuitCoolDown(t *testing.T) {
	c := Circuit{Failures: 5, CoolDown: 10 * time.Second}
	for _, tc := range []struct {
		opens int32
		step  time.Duration
	}{{1, 10 * time.Second}, {2, 20 * time.Second}, {4, 80 * time.Second}, {5, 80 * time.Second}, {40, 80 * time.Second}} {
		if got := c.coolDown(tc.opens, func() float64 { return 0 }); got != tc.step {
			t.Errorf("opening %d, least draw: %s, want %s", tc.opens, got, tc.step)
		}
		if got := c.coolDown(tc.opens, func() float64 { return 0.999 }); got < tc.step || got >= tc.step*5/4 {
			t.Errorf("opening %d, most draw: %s, want in [%s, %s)", tc.opens, got, tc.step, tc.step*5/4)
		}
	}
}
