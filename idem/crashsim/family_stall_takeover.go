package crashsim

import (
	"context"
	"errors"
	"time"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// The stall-takeover family: a provider call that hangs past its effect's
// timeout, ignoring the cancel, while the world goes on around it.
//
// Worker A calls an effect (the first call of each effect in phase 0) and
// the provider does not answer. Once A's timeout has fired (A cancelled
// the call but the provider has not given up), the database's clock moves
// on to a second before A's lease ends, past the effect's retry backoff,
// and worker B drains: A still
// holds the lease while its call is under way, so B must not call (two
// calls of one key in flight; the provider records it in twice). Then:
//
//   - alive: the provider answers A at last; A records the effect done.
//   - crash: A's process dies during the call (the provider drops the
//     request unanswered); once A's lease has run out, a new worker takes
//     the effect over and performs it: two calls, one applied.

const famStallTakeover = "stall-takeover"

// simPlanHangs adds stall-takeover's scenarios: each effect's first call,
// with A alive and with A crashed.
func simPlanHangs[U any](job *Job[U], order []string, effectOf func(string) string) []simScenario {
	var plan []simScenario
	for _, fx := range job.Effects {
		c := -1
		for i, k := range order {
			if effectOf(k) == fx.Name {
				c = i
				break
			}
		}
		if c < 0 {
			continue
		}
		for _, v := range []string{"alive", "crash"} {
			sc := newScenario(famStallTakeover)
			sc.call, sc.variant = c, v
			sc.faults = map[int]simFault{c: faultHang}
			plan = append(plan, sc)
		}
	}
	return plan
}

// hangInterlude is the world while worker A's call of key hangs (called on
// A's call goroutine, without the provider's lock). It reports whether A's
// process died meanwhile: then the provider drops the call.
func (r *simRun[U]) hangInterlude(ctx context.Context, key string) (dropped bool) {
	select {
	case <-ctx.Done(): // A's timeout fired: A has cancelled the call
	case <-time.After(simStallFor):
		r.violate("stall-takeover: the call of %s ran %s past its start without its timeout (%s) cancelling it", key, simStallFor, simStallTimeout)
	}
	r.mu.Lock()
	a := r.incByID[simIncOf(ctx)]
	r.mu.Unlock()
	// A second before A's lease ends: past the effect's retry backoff
	// (when it is shorter than the lease), A's claim still live.
	r.setClock(r.now().Add(r.effectOf(key).Lease - time.Second))
	r.prov.mu.Lock()
	before := r.prov.calls[key]
	r.prov.mu.Unlock()
	b := r.start(0, workDrain, nil)
	if _, paused := b.wait(); paused {
		b.finish()
	}
	r.prov.mu.Lock()
	if r.prov.calls[key] != before {
		r.violate("stall-takeover: worker B called %s while worker A's call of it, past its timeout, was still under way (A's lease was live)", key)
	}
	r.prov.mu.Unlock()
	if r.sc.variant != "crash" || a == nil {
		return false
	}
	// A's process dies during the call: everything it would do next parks.
	a.dead.Store(true)
	a.crashed <- struct{}{}
	return true
}

// errDropped ends the call of a process that died during it: nobody reads
// it, and the provider applied nothing.
var errDropped = errors.New("simulated: the caller's process died during the call; the provider dropped the request")

type stallTakeoverFamily[U any] struct{ baseFamily[U] }

func (*stallTakeoverFamily[U]) about() familyAbout {
	return familyAbout{name: "stall-takeover", guarantees: []int{2, 5, 8},
		what: "a provider call hangs past its timeout, ignoring the cancel: a second worker draining a " +
			"second before the caller's lease ends must not call (never two calls of one key in " +
			"flight); then the call is answered and recorded, or its process dies during it and, once " +
			"the lease has run out, another worker takes the effect over and performs it once"}
}

func (*stallTakeoverFamily[U]) plan(d *discovery[U]) []simScenario {
	return simPlanHangs(d.job, d.order[:d.calls], func(k string) string { return d.effectOf[k] })
}

// setup: the world goes on while the hanging call hangs (hangInterlude).
func (*stallTakeoverFamily[U]) setup(r *simRun[U]) { r.prov.hang = r.hangInterlude }

// limit: the stall families' short timeout on every effect.
func (*stallTakeoverFamily[U]) limit(_ *simRun[U], fx *idemrt.Effect[U], _ idemrt.Effect[U]) {
	fx.Timeout = simStallTimeout
}

func (*stallTakeoverFamily[U]) exactCalls(simScenario) bool { return true }

// expect: when A's process died, the dropped call, then the takeover's.
func (*stallTakeoverFamily[U]) expect(r *simRun[U], e *simExpect[U]) {
	if k := r.callKey(r.sc.call); e.calls != nil && k != "" && r.sc.variant == "crash" {
		e.calls[k] = 2
	}
}
