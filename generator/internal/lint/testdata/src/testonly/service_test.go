package testonly

import (
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
)

func TestClock(t *testing.T) {
	if idemtest.WithLeaseClock(time.Now) == nil {
		t.Fatal("no clock")
	}
}
