package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// providersTestRate is R, the provider's calls/s, in these tests: small.
const providersTestRate = 100

// providersRun runs the providers measurement alone on the PostgreSQL
// IDEMGEN_TEST_POSTGRES names, at R = providersTestRate.
func providersRun(t *testing.T, extra ...string) *results {
	t.Helper()
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the providers measurement")
	}
	args := append([]string{"-db", url, "-only", "providers", "-provider-rate", fmt.Sprint(providersTestRate)}, extra...)
	var out bytes.Buffer
	res, err := run(t.Context(), args, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// One worker and a fleet of four, each through a 2-second outage (503
// without Retry-After) in a run of about 4 s at 100 calls/s: nothing parks,
// the provider applies every effect exactly once, and the outage did make
// calls fail and be tried again.
func TestProvidersOutage(t *testing.T) {
	res := providersRun(t, "-provider-duration", "4s", "-outage", "2s", "-provider-workers", "1,4")
	if len(res.providers) != 2 {
		t.Fatalf("%d providers runs, want 2 (1 and 4 workers)", len(res.providers))
	}
	for _, r := range res.providers {
		if r.units != 200 || r.parked != 0 || !r.exactlyOnce() {
			t.Errorf("%s: %d units, %d parked, applied once %d, twice or foreign %d, done %d; want 200 units, none parked, each applied once and done",
				r.name(), r.units, r.parked, r.onceKeys, r.wrongKeys, r.done)
		}
		if r.sim.unavailable == 0 || r.attempts < 2 {
			t.Errorf("%s: %d calls answered 503, at most %d attempts on one effect; the outage should have failed calls that were tried again",
				r.name(), r.sim.unavailable, r.attempts)
		}
		// The effect's rate keeps the fleet under the provider's: the
		// target is 5%; a loaded machine that stalls a worker lets a few
		// of its paced calls out together, so the test allows 20%. An
		// effect rate above R (200/s, the spec's, if the measurement did
		// not set it) is about half 429s.
		if s := r.throttledShare(); !(s <= 0.2) {
			t.Errorf("%s: %.1f%% of calls answered 429; the effect's rate should keep them under 20%%", r.name(), 100*s)
		}
	}
}

// Without the effect's rate, the provider throttles most calls: the
// measurement must say MISS. Retry-After still costs no attempt, so
// nothing parks, every effect is applied once, and each in one attempt.
func TestProvidersWithoutRateMiss(t *testing.T) {
	res := providersRun(t, "-provider-n", "300", "-provider-client-rate", "0", "-provider-workers", "1")
	if len(res.providers) != 1 {
		t.Fatalf("%d providers runs, want 1", len(res.providers))
	}
	r := res.providers[0]
	if r.throttledShare() <= providerThrottleTarget || r.met() || !strings.Contains(r.checked(), "MISS") {
		t.Errorf("%s: %.1f%% of calls answered 429, targets met %v (%s); want the 429 target missed",
			r.name(), 100*r.throttledShare(), r.met(), r.checked())
	}
	// Retry-After burns no attempt: every effect took one attempt, its
	// success (a client that ignored Retry-After would count its 429s).
	if r.parked != 0 || !r.exactlyOnce() || r.attempts != 1 {
		t.Errorf("%s: %d parked, applied once %d of %d, at most %d attempts on one effect; want none parked, each applied once, in 1 attempt",
			r.name(), r.parked, r.onceKeys, r.units, r.attempts)
	}
}

// With the effect's gate on, a 3-second outage in a run of about 9 s at
// 100 calls/s (two workers): calls during the outage stay within the
// failures that open the circuit and about two a cool-down, nothing parks, every effect is applied
// once, and the provider's recovery is followed by a full second at
// 0.9 × R (how soon is measured, not bounded here: a loaded machine).
// The run is 600 units so that about 3 s of work at R waits for the
// circuit's probe: with 300 (a run of 6 s) only 1.4 s did, and a CI
// machine under go test ./...'s load never filled a second at 0.9 × R.
func TestProvidersGateOutage(t *testing.T) {
	res := providersRun(t, "-provider-duration", "9s", "-outage", "3s", "-provider-workers", "2", "-provider-gate", "on")
	if len(res.providers) != 1 || !res.providers[0].gate {
		t.Fatalf("%d providers runs, want 1 with the gate on", len(res.providers))
	}
	r := res.providers[0]
	if r.parked != 0 || !r.exactlyOnce() {
		t.Errorf("%s: %d parked, applied once %d of %d; want none parked, each applied once", r.name(), r.parked, r.onceKeys, r.units)
	}
	// The bound is for outages many cool-downs long; this one is
	// 1.5 cool-downs, and the circuit's failures that open it come on top,
	// with the calls that start while they are being recorded: a tenth of
	// a second of R (a loaded CI machine let 11 through in all, where an
	// idle one lets 6 to 8). Without the gate the outage meets about
	// 3 s × R = 300 calls.
	if most := r.outageCallsBound() + int(benchCircuit.Failures) + providersTestRate/10; r.sim.unavailable == 0 || r.sim.unavailable > most {
		t.Errorf("%s: %d calls during the outage, want some and at most (outage ÷ cool_down) × 2 + failures + R/10 = %d", r.name(), r.sim.unavailable, most)
	}
	if !r.recovered || !strings.Contains(r.checked(), "seconds from provider recovery to 0.9R: ") {
		t.Errorf("%s: no second at 0.9 × R after the outage: %s", r.name(), r.checked())
	}
}

// A provider that answers 429 with Retry-After to every call for 2 s:
// without the gate each row that calls meanwhile gets its own 429; with
// it (Retry-After as idem.PauseEffect) the first pauses the whole effect,
// so the 429s fall to a tenth or less; nothing parks either way.
func TestProvidersGateThrottle(t *testing.T) {
	res := providersRun(t, "-provider-duration", "6s", "-throttle", "2s", "-provider-workers", "2", "-provider-gate", "off,on")
	if len(res.providers) != 2 || res.providers[0].gate || !res.providers[1].gate {
		t.Fatalf("%d providers runs, want 2: the gate off, then on", len(res.providers))
	}
	off, on := res.providers[0], res.providers[1]
	for _, r := range res.providers {
		if r.parked != 0 || !r.exactlyOnce() {
			t.Errorf("%s: %d parked, applied once %d of %d; want none parked, each applied once", r.name(), r.parked, r.onceKeys, r.units)
		}
	}
	if off.sim.throttled < 50 || on.sim.throttled*10 > off.sim.throttled {
		t.Errorf("429s: %d without the gate, %d with it; want the throttle window to answer many calls without it, and a tenth or less with it",
			off.sim.throttled, on.sim.throttled)
	}
}
