package idemrt

import (
	"fmt"
	"testing"
)

func TestSettle(t *testing.T) {
	effects := func(os ...EffectOutcome) []EffectResult {
		var out []EffectResult
		for _, o := range os {
			out = append(out, EffectResult{Effect: "fx", Key: "k", Outcome: o})
		}
		return out
	}
	wrap := func(err error) error { return fmt.Errorf("job %q key %q: %w", "j", "k", err) }
	tests := []struct {
		name string
		r    UnitResult
		want Settlement
	}{
		{"inserted, no effects", UnitResult{Outcome: OutcomeInserted}, SettleDone},
		{"updated, effect done", UnitResult{Outcome: OutcomeUpdated, Effects: effects(EffectDone)}, SettleDone},
		{"unchanged", UnitResult{Outcome: OutcomeUnchanged}, SettleDone},
		{"deduped, effect deduped", UnitResult{Outcome: OutcomeDeduped, Effects: effects(EffectDeduped)}, SettleDone},
		{"accepted, effect parked (a person sees it)", UnitResult{Outcome: OutcomeAccepted, Effects: effects(EffectDone, EffectParked)}, SettleDone},
		{"deduped, effect busy under a dead worker's lease", UnitResult{Outcome: OutcomeDeduped, Effects: effects(EffectDone, EffectBusy)}, SettleOwed},
		{"inserted, effect waiting", UnitResult{Outcome: OutcomeInserted, Effects: effects(EffectWaiting)}, SettleOwed},
		{"inserted, effect failed", UnitResult{Outcome: OutcomeInserted, Effects: effects(EffectFailed, EffectDone)}, SettleOwed},
		{"write failed", UnitResult{Outcome: OutcomeFailed, Err: wrap(fmt.Errorf("%w: disk full", ErrWriteFailed))}, SettleRetry},
		{"failed, no error", UnitResult{Outcome: OutcomeFailed}, SettleRetry},
		{"mismatch", UnitResult{Outcome: OutcomeMismatch, Err: wrap(ErrPayloadMismatch)}, SettleDead},
		{"empty key", UnitResult{Outcome: OutcomeFailed, Err: wrap(ErrEmptyKey)}, SettleDead},
		{"parked", UnitResult{Outcome: OutcomeParked, Err: wrap(ErrParked)}, SettleDead},
		{"unknown outcome", UnitResult{Outcome: "new"}, SettleRetry},
	}
	for _, tc := range tests {
		if got := tc.r.Settle(); got != tc.want {
			t.Errorf("%s: Settle() = %s, want %s", tc.name, got, tc.want)
		}
	}
	for s, want := range map[Settlement]string{SettleDone: "done", SettleOwed: "owed", SettleRetry: "retry", SettleDead: "dead", 9: "unknown"} {
		if s.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(s), s.String(), want)
		}
	}
}
