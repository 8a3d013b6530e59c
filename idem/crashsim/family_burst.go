package crashsim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// The burst family: more callers than the pool has connections, all in one
// "process" (one incarnation: one store, one pool) and all on the same
// keys at once, as a client retrying a payment in a burst or a webhook
// provider redelivering meets a service. A caller whose transaction needs
// a second connection of its own pool (the database clock read on the
// pool inside a write, say) waits for a connection that transactions
// blocked on its own row locks hold: a pool deadlock. Every caller must
// end within the wait bound; a crash at a hit spread over the first phase
// parks them all, and another incarnation takes over once the leases run
// out.

const famBurst = "burst"

// simBurstCallers run at once on simBurstConns connections.
const (
	simBurstCallers = 5
	simBurstConns   = 2
)

// simBurstWaitBound is the burst's wait bound (idem.WithWaitBound): a
// caller that waits this long for a connection or a lock has met a
// deadlock, not a queue (each transaction takes milliseconds), and the
// scenario says so before the watchdog's 30 s.
const simBurstWaitBound = 10 * time.Second

// connLimiter is a scenario database whose incarnations can be given a
// smaller pool.
type connLimiter interface{ limitConns(n int) }

// burst runs the phase's work simBurstCallers times at once on one
// incarnation; if it crashed, another incarnation recovers.
func (r *simRun[U]) burst(phase int) {
	out, _ := r.runTask(phase, workBurst)
	for _, err := range out.errs {
		var we *idem.WaitError
		if errors.As(err, &we) {
			r.violate("burst: a caller of %d on %d connections waited out its bound: %v", simBurstCallers, simBurstConns, err)
		}
	}
	if out.crashed {
		r.recover(phase)
	}
}

// burstWork runs work simBurstCallers times at once and merges what they
// did; each caller's error is kept for burst's check.
func burstWork(ctx context.Context, work func(ctx context.Context) simOutcome) simOutcome {
	outs := make([]simOutcome, simBurstCallers)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Go(func() { outs[i] = work(ctx) })
	}
	wg.Wait()
	var out simOutcome
	for _, o := range outs {
		out.rep.Add(o.rep)
		out.rep.Job = o.rep.Job
		if o.err != nil {
			out.err = o.err
		}
		out.errs = append(out.errs, o.errs...)
	}
	return out
}

type burstFamily[U any] struct{ baseFamily[U] }

func (*burstFamily[U]) about() familyAbout {
	return familyAbout{name: "burst", long: 800 * time.Millisecond, guarantees: []int{2, 3, 5},
		what: "five callers at once on the same keys in one process whose pool has two connections (a " +
			"client retrying in a burst, a webhook redelivered): none may wait out its wait bound, " +
			"which a transaction asking its own pool for a second connection (a pool deadlock) would; " +
			"then the same, crashed at hits spread over the first phase and taken over"}
}

// plan: clean, then crashed at hits spread over the first phase.
func (*burstFamily[U]) plan(d *discovery[U]) []simScenario {
	plan := []simScenario{newScenario(famBurst)}
	for i := 1; i <= 3; i++ {
		sc := at(famBurst, i*d.firstPhase/4)
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}

// setup: each incarnation's pool has simBurstConns connections.
func (*burstFamily[U]) setup(r *simRun[U]) {
	if l, ok := r.db.(connLimiter); ok {
		l.limitConns(simBurstConns)
	}
}

func (*burstFamily[U]) overlapping(simScenario) bool { return true }

func (*burstFamily[U]) playPhase(r *simRun[U], phase int) { r.burst(phase) }
