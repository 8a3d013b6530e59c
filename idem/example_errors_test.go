package idem_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// An effect's provider declined for good: Permanent parks the effect at
// its first failure instead of trying again up to max_attempts, and the
// provider's own error stays reachable through the wrap.
func ExamplePermanent() {
	declined := errors.New("402 card declined")
	err := idem.Permanent(declined)
	fmt.Println(errors.Is(err, idem.ErrPermanent), errors.Is(err, declined))
	fmt.Println(err)
	// Output:
	// true true
	// permanent: 402 card declined
}

// A provider that throttles the whole account, not one call: PauseEffect
// stops every worker of the fleet from calling the effect for d, on the
// database's clock, and no unit waiting for it counts an attempt.
func ExamplePauseEffect() {
	err := idem.PauseEffect(time.Minute, errors.New("429 account throttled"))
	fmt.Println(errors.Is(err, idem.ErrRetryAfter))
	fmt.Println(err)
	// Output:
	// true
	// effect paused for 1m0s: 429 account throttled
}

// A Report counts what one call did; String prints it on one line, as
// the logs show it, and Add sums the reports of several calls.
func ExampleReport_String() {
	first := idem.Report{Job: "invoice_sync", Seen: 3, Inserted: 3, EffectsDone: 3}
	second := idem.Report{Job: "invoice_sync", Seen: 3, Unchanged: 3, EffectsDeduped: 3}
	fmt.Println(first)
	first.Add(second)
	fmt.Println(first)
	// Output:
	// invoice_sync: seen=3 inserted=3 updated=0 unchanged=0 deduped=0 accepted=0 failed=0 mismatched=0 parked=0 effects: done=3 deduped=0 failed=0 parked=0 busy=0 waiting=0
	// invoice_sync: seen=6 inserted=3 updated=0 unchanged=3 deduped=0 accepted=0 failed=0 mismatched=0 parked=0 effects: done=3 deduped=3 failed=0 parked=0 busy=0 waiting=0
}
