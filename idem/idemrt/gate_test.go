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

// The cool-down doubles with each opening, with jitter in [1, 1.25) of its
// step, and never lasts longer than the ceiling: 8 times the cool-down, or
// max_cool_down.
func TestCircuitCoolDown(t *testing.T) {
	for _, tc := range []struct {
		c     Circuit
		opens int32
		least time.Duration // the cool-down at the least draw
		most  time.Duration // its bound at the most draw (exclusive, or the ceiling)
	}{
		{Circuit{CoolDown: 10 * time.Second}, 1, 10 * time.Second, 12500 * time.Millisecond},
		{Circuit{CoolDown: 10 * time.Second}, 2, 20 * time.Second, 25 * time.Second},
		{Circuit{CoolDown: 10 * time.Second}, 4, 80 * time.Second, 80 * time.Second},
		{Circuit{CoolDown: 10 * time.Second}, 40, 80 * time.Second, 80 * time.Second},
		{Circuit{CoolDown: 2 * time.Second, MaxCoolDown: 3 * time.Second}, 1, 2 * time.Second, 2500 * time.Millisecond},
		{Circuit{CoolDown: 2 * time.Second, MaxCoolDown: 3 * time.Second}, 2, 3 * time.Second, 3 * time.Second},
		{Circuit{CoolDown: 2 * time.Second, MaxCoolDown: 3 * time.Second}, 9, 3 * time.Second, 3 * time.Second},
		{Circuit{CoolDown: 5 * time.Second, MaxCoolDown: time.Second}, 3, 5 * time.Second, 5 * time.Second}, // below CoolDown: CoolDown
	} {
		if got := tc.c.coolDown(tc.opens, func() float64 { return 0 }); got != tc.least {
			t.Errorf("%+v opening %d, least draw: %s, want %s", tc.c, tc.opens, got, tc.least)
		}
		got := tc.c.coolDown(tc.opens, func() float64 { return 0.999 })
		if got < tc.least || got > tc.most || (got == tc.most && tc.most != tc.c.ceiling()) {
			t.Errorf("%+v opening %d, most draw: %s, want in [%s, %s)", tc.c, tc.opens, got, tc.least, tc.most)
		}
	}
}
