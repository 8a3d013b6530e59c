package crashsim

// The consumer families. Each is a value of consumer[U], listed once in
// consumerFamilies, with the state its scenario keeps; the runner
// (consume.go) asks the scenario's family, never its name. Their rows of
// docs/guarantees.md's consumer table are their about(), which a test
// keeps one fact with the docs.

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// consumer is one consumer family.
type consumer[U any] interface {
	// about is the family's row of docs/guarantees.md's consumer table.
	about() familyAbout
	// plan is the family's scenarios over the discovery run; sample, what
	// the -short sample keeps of them.
	plan(d consumeDiscovery) []consumeScenario
	sample(all []consumeScenario) []consumeScenario
	// setup plants the scenario's faults on a new run (the broker's, the
	// hit to crash at, the family's own state).
	setup(r *consumeRun[U])
	// atHit runs at every hit of every consumer, after the crash check.
	atHit(r *consumeRun[U], inc int, p idemtest.CrashPoint, detail string)
	// play runs the consumers until the scenario converges.
	play(r *consumeRun[U], deadline time.Time)
}

// consumeDiscovery is what a consumer family plans over: the hits of the
// fault-free run, the fixture's messages that carry a unit as sent, and
// whether every crash site is asked for (IDEMGEN_CRASHSIM_FULL).
type consumeDiscovery struct {
	trace []simHit
	good  []int
	full  bool
	// inTx reports whether the consumer holds a write transaction open at a hit.
	inTx func(simHit) bool
}

// consumerFamilies is every consumer family, in the order of the table.
func consumerFamilies[U any]() []consumer[U] {
	return []consumer[U]{
		&consumeCleanFamily[U]{}, &consumeCrashFamily[U]{}, &consumeAckLossFamily[U]{},
		&consumeReorderFamily[U]{}, &consumeHeldFamily[U]{takeover: false}, &consumeHeldFamily[U]{takeover: true},
	}
}

// consumerNamed is a new value of the consumer family named name.
func consumerNamed[U any](name string) consumer[U] {
	for _, f := range consumerFamilies[U]() {
		if f.about().name == name {
			return f
		}
	}
	return &consumeCleanFamily[U]{}
}

// consumerTable is docs/guarantees.md's consumer table, from the list.
func consumerTable() string {
	var abouts []familyAbout
	for _, f := range consumerFamilies[struct{}]() {
		abouts = append(abouts, f.about())
	}
	return aboutTable(abouts)
}

// aboutTable is a markdown table of families' rows.
func aboutTable(abouts []familyAbout) string {
	var b strings.Builder
	b.WriteString("| family | what happens | guarantees |\n| --- | --- | --- |\n")
	for _, a := range abouts {
		g := strings.Trim(fmt.Sprint(a.guarantees), "[]")
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", a.name, a.what, g)
	}
	return b.String()
}

// baseConsumer is every hook's default: one scenario, no fault, consumers
// run to the end one after another.
type baseConsumer[U any] struct{}

func (baseConsumer[U]) sample(all []consumeScenario) []consumeScenario         { return all }
func (baseConsumer[U]) setup(*consumeRun[U])                                   {}
func (baseConsumer[U]) atHit(*consumeRun[U], int, idemtest.CrashPoint, string) {}
func (baseConsumer[U]) play(r *consumeRun[U], deadline time.Time)              { r.runToTheEnd(r.start(), deadline) }
func onePlan(name string) []consumeScenario                                    { return []consumeScenario{{name, -1}} }

// consumeCleanFamily: no fault.
type consumeCleanFamily[U any] struct{ baseConsumer[U] }

func (*consumeCleanFamily[U]) about() familyAbout {
	return familyAbout{name: famConsume, guarantees: []int{1, 2, 7, 8},
		what: "no fault: every message settled once, each good unit applied and its effects performed once, each poison message parked once and settled dead, delivered once"}
}
func (*consumeCleanFamily[U]) plan(consumeDiscovery) []consumeScenario { return onePlan(famConsume) }

// consumeCrashFamily: the consumer dies at a hit.
type consumeCrashFamily[U any] struct{ baseConsumer[U] }

func (*consumeCrashFamily[U]) about() familyAbout {
	return familyAbout{name: "consume-crash", guarantees: []int{1, 2, 3, 8},
		what: "the consumer dies at every named point and durable SQL boundary of its first run that leaves a state of its own, the broker's included (its sessions killed, what it held delivered again), and a new consumer converges"}
}

// plan crashes at the crash family's sites: every named point and the
// boundaries that leave new state, once per state the crash leaves, the
// broker's included (distinctCrashSites).
func (f *consumeCrashFamily[U]) plan(d consumeDiscovery) []consumeScenario {
	var out []consumeScenario
	for _, k := range distinctCrashSites(d.trace, d.full, d.inTx) {
		out = append(out, consumeScenario{f.about().name, k})
	}
	return out
}

// sample keeps every third hit.
func (*consumeCrashFamily[U]) sample(all []consumeScenario) []consumeScenario {
	return slices.DeleteFunc(slices.Clone(all), func(sc consumeScenario) bool { return sc.at%3 != 0 })
}

func (*consumeCrashFamily[U]) setup(r *consumeRun[U]) { r.crashAt = r.sc.at }

// consumeAckLossFamily: the broker loses one message's first ack.
type consumeAckLossFamily[U any] struct{ baseConsumer[U] }

func (*consumeAckLossFamily[U]) about() familyAbout {
	return familyAbout{name: "consume-ackloss", guarantees: []int{2, 4},
		what: "the broker loses the acknowledgement of each good message in turn: delivered again after the commit, deduped, no second call"}
}

func (f *consumeAckLossFamily[U]) plan(d consumeDiscovery) []consumeScenario {
	var out []consumeScenario
	for _, i := range d.good {
		out = append(out, consumeScenario{f.about().name, i})
	}
	return out
}

func (*consumeAckLossFamily[U]) setup(r *consumeRun[U]) { r.broker.loseAck[r.sc.at] = true }

// consumeReorderFamily: every first ack lost, then delivered last first.
type consumeReorderFamily[U any] struct{ baseConsumer[U] }

func (*consumeReorderFamily[U]) about() familyAbout {
	return familyAbout{name: "consume-reorder", guarantees: []int{2, 4, 7},
		what: "every acknowledgement of the first run lost, and the messages delivered again last first"}
}
func (f *consumeReorderFamily[U]) plan(consumeDiscovery) []consumeScenario {
	return onePlan(f.about().name)
}

func (*consumeReorderFamily[U]) setup(r *consumeRun[U]) {
	for i := range r.broker.msgs {
		r.broker.loseAck[i] = true
	}
}

func (*consumeReorderFamily[U]) play(r *consumeRun[U], deadline time.Time) {
	inc := r.start()
	for !r.firstRoundSettled() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	r.broker.reverse()
	r.runToTheEnd(inc, deadline)
}

// consumeHeldFamily: consumer A is held before its call of unit 1's first
// effect while the broker delivers that message again, to consumer B.
// Inflight: A is let go and calls once. Takeover: A dies before the call,
// and B's drain performs the effect once the lease ran out. Batches are of
// one message, so that A holds nothing else, and only a drain can perform
// the held effect once B acknowledged the message with it owed.
type consumeHeldFamily[U any] struct {
	baseConsumer[U]
	takeover bool
	key      string // the effect key whose call is held
	msg      int    // the message that carries its unit
	reached  chan int
	release  chan struct{}
	once     sync.Once
}

func (f *consumeHeldFamily[U]) about() familyAbout {
	if f.takeover {
		return familyAbout{name: "consume-takeover", guarantees: []int{2, 5},
			what: "the same, and the first consumer dies before its call: the second acknowledged the message with the effect owed, and its own drain performs the effect once the lease ran out"}
	}
	return familyAbout{name: "consume-inflight", guarantees: []int{2, 5},
		what: "a message delivered to a second consumer while the first is calling its effect's provider: the second leaves the effect to the first (one call)"}
}

func (f *consumeHeldFamily[U]) plan(consumeDiscovery) []consumeScenario {
	return onePlan(f.about().name)
}

func (f *consumeHeldFamily[U]) setup(r *consumeRun[U]) {
	if len(r.job.Effects) == 0 {
		return // nothing to hold: plays as the clean family
	}
	f.key = oracleKey(r.job.Effects[0].Key, baseVersions(r.job).vars(0), r.units[0])
	f.msg = 0
	f.reached, f.release = make(chan int, 1), make(chan struct{})
	r.batch = 1
}

func (f *consumeHeldFamily[U]) atHit(r *consumeRun[U], inc int, p idemtest.CrashPoint, detail string) {
	if f.reached == nil || p != idemtest.PointEffectBeforeCall || detail != f.key {
		return
	}
	first := false
	f.once.Do(func() { first = true })
	if !first {
		return
	}
	r.pausedNow.Add(1)
	f.reached <- inc
	<-f.release
	r.pausedNow.Add(-1)
	if r.isDead(inc) {
		select {} // it died while held
	}
}

func (f *consumeHeldFamily[U]) play(r *consumeRun[U], deadline time.Time) {
	// A drains nothing: its own drain could reach the held call first (an
	// effect left owed when a slot under the effect's concurrency had no
	// room), and A would go on consuming, holding another message while
	// B waits for the broker to settle (spec-space seed 38, spec 14).
	a := r.start(idembroker.WithDrainEvery(time.Hour))
	if f.reached == nil {
		r.runToTheEnd(a, deadline)
		return
	}
	select {
	case <-f.reached:
	case <-time.After(simConsumeBound):
		r.violate("consumer %d never reached its call of %s", a.id, f.key)
		r.stop(a)
		return
	}
	r.broker.redeliver(f.msg)
	b := r.start()
	// B meets the live lease; it settles every message, the held one too
	// (acknowledged with its effect owed, or given back).
	for time.Now().Before(deadline) && !r.broker.settled() {
		time.Sleep(time.Millisecond)
	}
	if f.takeover {
		r.die(a)
		close(f.release)
		r.afterLease()
	} else {
		close(f.release)
	}
	for r.converge(b, deadline) {
		r.afterLease()
		b = r.start()
	}
	if !f.takeover {
		r.stop(a)
	}
	r.stop(b)
}
