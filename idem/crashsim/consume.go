package crashsim

// The consumer families' runner: a job with consume: runs as its
// generated consumer (Verbs.ConsumeFrom) over the simulation's broker
// (broker.go), which delivers a fixture of messages (consume_check.go) at
// least once. Each scenario plays on a fresh database; the families are
// values listed once (consume_family.go), and the loop names none.

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// famConsumer, as IDEMGEN_CRASHSIM_SCENARIO, plays every consumer family
// and nothing else.
const famConsumer = "consumer"

// famConsume is the consumer families' common prefix, and the name of the
// one without a fault, whose run is the discovery run.
const famConsume = "consume"

// simConsumeBatch is the consumer's batch in the simulation: small, so the
// fixture takes several fetches and a crash falls between them too.
const simConsumeBatch = 2

// simConsumeBound bounds one scenario's convergence.
const simConsumeBound = 10 * time.Second

// consumeScenario is one consumer scenario: its family and where it acts
// (a hit, or a message).
type consumeScenario struct {
	family string
	at     int
}

func (s consumeScenario) String() string {
	if s.at < 0 {
		return s.family
	}
	return fmt.Sprintf("%s@%d", s.family, s.at)
}

// consumeRun is the state of one consumer scenario.
type consumeRun[U any] struct {
	t      testing.TB
	job    *Job[U]
	db     simDB
	sc     consumeScenario
	fam    consumer[U]
	prov   *Provider
	broker *simBroker
	units  []U // the fixture's units; a message carries one by index

	mu      sync.Mutex
	clock   time.Time
	hits    int
	trace   []simHit // every hit, in order: the discovery run's plans the crashes
	crashAt int
	crashes int
	// called and recorded are the effect keys each incarnation called the
	// provider for and recorded; window, the keys a consumer died between
	// the two for: the one place a repeat is allowed.
	called, recorded map[int]map[string]bool
	window           map[string]bool
	// abandoned holds the keys a live consumer performed and could not
	// record (a record that waited out its bound, under load): the claim
	// stays until its lease runs out, when the key is called again
	// (waitOutBackoffs moves the clock past it). A new claim of the key
	// ends it.
	abandoned  map[string]bool
	violations []string
	incs       int
	dead       map[int]bool
	// batch is the consumers' batch (a family may change it).
	batch    int
	ackCheck sync.Mutex
	// logs holds what the consumers logged at warning and above, for a
	// violation's message.
	logs simLogTail
	// pausedNow counts the consumers a family holds in their call now
	// (slotWait).
	pausedNow atomic.Int32
}

func (r *consumeRun[U]) now() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clock
}

func (r *consumeRun[U]) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

func (r *consumeRun[U]) isDead(inc int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dead[inc]
}

// runConsumer plays the consumer families for a job whose units arrive
// from a broker.
func runConsumer[U any](t *testing.T, env Env, job *Job[U]) {
	_, msgs, err := consumeFixture(job)
	if err != nil {
		t.Errorf("crashsim %s: the consumer fixture: %v", job.Name, err)
		return
	}
	discovery := newConsumeRun(t, job, env.fresh(t), consumeScenario{famConsume, -1})
	if v := discovery.play(); len(v) > 0 {
		t.Errorf("crashsim %s %s: the consumer's discovery run broke invariants:\n  %s\n1 of 1 scenarios broke invariants (families: %s)",
			job.Name, env.name(), strings.Join(v, "\n  "), famConsume)
		return
	}
	discovery.db.close()
	var good []int
	for i, m := range msgs {
		if m.kind == msgGood {
			good = append(good, i)
		}
	}
	only := os.Getenv("IDEMGEN_CRASHSIM_SCENARIO")
	if only == famConsumer {
		only = ""
	}
	failed := 0
	broken := map[string]bool{}
	var scenarios []consumeScenario
	d := consumeDiscovery{trace: discovery.trace, good: good, full: os.Getenv("IDEMGEN_CRASHSIM_FULL") != "",
		inTx: func(h simHit) bool { return simInTx(job, h) }}
	for _, f := range consumerFamilies[U]() {
		plan := f.plan(d)
		if testing.Short() {
			plan = f.sample(plan)
		}
		scenarios = append(scenarios, plan...)
	}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		played int
	)
	verbose := simVerbose()

	for _, sc := range scenarios {
		if only != "" && only != sc.String() && only != "family:"+sc.family {
			continue
		}
		played++
		wg.Add(1)
		simSlots <- struct{}{} // as many at once as the other families play
		go func() {
			defer func() { <-simSlots; wg.Done() }()
			began := time.Now()
			r := newConsumeRun(t, job, env.fresh(t), sc)
			v := r.play()
			r.db.close()
			if verbose {
				t.Logf("%s: %d violations in %s", sc, len(v), time.Since(began).Round(time.Millisecond))
			}
			if len(v) == 0 {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			failed++
			broken[sc.family] = true
			if failed <= 5 {
				t.Errorf("crashsim %s %s: scenario %q broke invariants:\n  %s\nreplay: IDEMGEN_CRASHSIM_SCENARIO=%q go test -run '%s' .",
					job.Name, env.name(), sc, strings.Join(v, "\n  "), sc.String(), t.Name())
			}
		}()
	}
	wg.Wait()
	if failed > 0 {
		t.Errorf("crashsim %s %s: %d of %d consumer scenarios broke invariants (families: %s)", job.Name, env.name(), failed, played,
			strings.Join(slices.Sorted(maps.Keys(broken)), ", "))
		return
	}
	t.Logf("crashsim %s %s: %d consumer scenarios (%d hits in the discovery run), all invariants held", job.Name, env.name(), played, discovery.hits)
}

func newConsumeRun[U any](t testing.TB, job *Job[U], db simDB, sc consumeScenario) *consumeRun[U] {
	units, msgs, err := consumeFixture(job)
	if err != nil {
		t.Fatalf("crashsim %s: the consumer fixture: %v", job.Name, err)
	}
	r := &consumeRun[U]{t: t, job: job, db: db, sc: sc, prov: newSimProvider(), broker: newSimBroker(msgs), units: units,
		clock: Base, crashAt: -1, dead: map[int]bool{}, batch: simConsumeBatch,
		called: map[int]map[string]bool{}, recorded: map[int]map[string]bool{}, window: map[string]bool{}, abandoned: map[string]bool{}}
	r.prov.now = r.now
	r.prov.onCall = r.noteCall
	r.broker.dead = r.isDead
	r.broker.onAck = r.checkAck
	r.fam = consumerNamed[U](sc.family)
	r.fam.setup(r)
	return r
}

// consumeInc is one consumer incarnation.
type consumeInc struct {
	id      int
	cancel  context.CancelFunc
	done    chan error
	crashed chan struct{}
	kill    func()
	close   func()
}

// hook is an incarnation's crash hook: it counts hits, notes the calls
// made and recorded, dies at the scenario's crash hit, and lets the
// family act at the hit.
func (r *consumeRun[U]) hook(inc int, crashed chan struct{}) idemtest.CrashHook {
	return func(ctx context.Context, p idemtest.CrashPoint, detail string) error {
		if r.isDead(inc) {
			select {} // the process is gone
		}
		changes := r.broker.changes()
		r.mu.Lock()
		n := r.hits
		r.hits++
		r.trace = append(r.trace, simHit{p: p, detail: detail, inc: inc, broker: changes})
		switch p {
		case idemtest.PointEffectClaimed:
			delete(r.abandoned, detail)
		case idemtest.PointEffectRecorded:
			mark(r.recorded, inc, detail)
		}
		crash := n == r.crashAt
		if crash {
			r.dead[inc] = true
			r.crashes++
			r.noteWindow(inc)
		}
		r.mu.Unlock()
		if crash {
			crashed <- struct{}{}
			select {} // park for good: nothing unwinds
		}
		r.fam.atHit(r, inc, p, detail)
		return nil
	}
}

// noteCall notes a call as it reaches the provider, by the incarnation
// whose context it carries; a dead incarnation's call parks there, as its
// hits do, for a dead process calls no one. Noting the call there, not at
// the hit after it, counts the call another goroutine of an incarnation
// made while a crash hit was parking it: that goroutine's hit after the
// call never comes, and its call is still in the window (spec-space seed
// 38, spec 3, under load: "provider called 2 times ... no consumer died
// between its call and its record").
func (r *consumeRun[U]) noteCall(ctx context.Context, key string) {
	inc := simIncOf(ctx)
	r.mu.Lock()
	dead := r.dead[inc]
	if !dead {
		mark(r.called, inc, key)
	}
	r.mu.Unlock()
	if dead {
		select {} // the process is gone
	}
}

func mark(m map[int]map[string]bool, inc int, key string) {
	if m[inc] == nil {
		m[inc] = map[string]bool{}
	}
	m[inc][key] = true
}

// noteWindow notes the keys a dying incarnation called the provider for
// and had not recorded (under r.mu).
func (r *consumeRun[U]) noteWindow(inc int) {
	for k := range r.called[inc] {
		if !r.recorded[inc][k] {
			r.window[k] = true
		}
	}
}

// start runs a new consumer incarnation until its context ends.
func (r *consumeRun[U]) start(extra ...idembroker.Option) *consumeInc {
	r.mu.Lock()
	r.incs++
	id := r.incs
	r.mu.Unlock()
	inc := &consumeInc{id: id, done: make(chan error, 1), crashed: make(chan struct{}, 1)}
	hook := r.hook(id, inc.crashed)
	st, kill, closeInc := r.db.incarnation(r.t, hook)
	inc.kill, inc.close = kill, closeInc
	log := r.logs.logger()
	opts := []idem.Option{idem.WithClock(r.now), idemtest.WithLeaseClock(r.now), idem.WithLogger(log),
		idem.WithEffectConcurrency(1), idem.WithWriteAhead(false), idemtest.WithCrashHook(hook), idem.WithOwner(simOwner(id)),
		r.job.withEdit(consumeLimits[U]), idemtest.WithSlotWait(r.slotWait), idem.WithObserver(simCallEnds[U]{r: r})}
	verbs, err := r.job.NewJob(st, nil, r.prov, opts...)
	if err != nil {
		r.t.Fatalf("new job: %v", err)
	}
	if verbs.ConsumeFrom == nil {
		r.t.Fatalf("crashsim %s: the job says it consumes (Job.Broker %q) but its verbs have no ConsumeFrom", r.job.Name, r.job.Broker)
	}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), simIncKey{}, id))
	inc.cancel = cancel
	go func() {
		inc.done <- verbs.ConsumeFrom(ctx, r.broker.source(id), append([]idembroker.Option{idembroker.WithBatch(r.batch),
			idembroker.WithDrainEvery(simConsumeDrainEvery), idembroker.WithLogger(log)}, extra...)...)
	}()
	return inc
}

// simConsumeDrainEvery is how often a consumer performs owed effects in
// the simulation (real time; leases run on the simulation's clock).
const simConsumeDrainEvery = 10 * time.Millisecond

// slotWait is a consumer's idemtest.WithSlotWait, as the other families'
// (simSlotWait): a wait for a call slot under the effect's concurrency
// gives up after simSlotPatience of real time (a quarter of it while a
// family holds a consumer in its call), as "no room", and the effect is
// drained again. The engine's own bound is half the lease, in real time
// while the simulated clock stands still: with a concurrency, a slot a
// consumer held when it died or while its call was in flight kept the
// next consumer waiting minutes (spec-space seed 38, specs 14 and 15:
// concurrency 1 on a consumer's effect), past the scenario's bound.
func (r *consumeRun[U]) slotWait(ctx context.Context, _ string, waited, poll time.Duration) bool {
	return simSlotWait(ctx, waited, poll, r.pausedNow.Load() > 0)
}

// consumeLimits takes the rates and circuits out: the simulation's clock
// stands still (limits.go).
func consumeLimits[U any](j *idemrt.Job[U]) {
	for i := range j.Effects {
		j.Effects[i].Rate = idemrt.Rate{}
		j.Effects[i].Circuit = idemrt.Circuit{}
	}
}

// simCallEnds sees how each consumer's calls end: a call that ended
// failed after the provider was called and before its record (the record
// waited out its bound) leaves its claim abandoned until the lease runs
// out, and its key may be called again, as after a death between the two.
type simCallEnds[U any] struct {
	simObserver
	r *consumeRun[U]
}

func (o simCallEnds[U]) CallEnd(ctx context.Context, _ string, er idem.EffectResult, _ time.Duration) {
	if er.Outcome != idem.EffectFailed {
		return
	}
	r, inc := o.r, simIncOf(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.called[inc][er.Key] && !r.recorded[inc][er.Key] {
		r.abandoned[er.Key] = true
		r.window[er.Key] = true
	}
}

// die ends a crashed incarnation the way a dying process ends: its
// sessions killed, what it held delivered again.
func (r *consumeRun[U]) die(inc *consumeInc) {
	r.mu.Lock()
	r.dead[inc.id] = true
	r.noteWindow(inc.id)
	r.mu.Unlock()
	inc.kill()
	inc.cancel()
	r.broker.requeue(inc.id)
}

// stop ends a live incarnation gracefully and waits for it, bounded.
func (r *consumeRun[U]) stop(inc *consumeInc) {
	inc.cancel()
	select {
	case err := <-inc.done:
		if err != nil {
			r.violate("consumer %d returned %v on a graceful stop", inc.id, err)
		}
		inc.close()
	case <-inc.crashed:
		r.die(inc)
	case <-time.After(10 * time.Second):
		r.violate("consumer %d did not return within 10s of its context ending", inc.id)
		r.die(inc)
	}
}

// afterLease moves the simulation's clock past every lease: what a dead
// consumer held may be taken over.
func (r *consumeRun[U]) afterLease() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock = r.clock.Add(r.job.Lease + time.Minute)
}

// converge runs inc until the broker has settled every message and the
// ledger owes nothing, or inc dies; it reports whether inc died.
func (r *consumeRun[U]) converge(inc *consumeInc, deadline time.Time) (died bool) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-inc.crashed:
			r.die(inc)
			return true
		case err := <-inc.done:
			r.violate("consumer %d returned before its context ended: %v", inc.id, err)
			inc.close()
			return true
		case <-tick.C:
		}
		if r.broker.settled() && !r.owes() {
			return false
		}
		if r.broker.settled() {
			r.waitOutBackoffs()
		}
		if time.Now().After(deadline) {
			r.violate("not converged within %s%s; the broker: %s%s", simConsumeBound, r.owed(), r.describe(), r.logs.tail())
			return false
		}
	}
}

// waitOutBackoffs moves the simulation's clock to the latest time an owed
// effect waits for (a retry's backoff, a slot that had no room), when no
// effect is claimed: every message settled, the consumers have nothing to
// do but wait, as a real one would, for the time to pass (spec-space seed
// 38, spec 14: effects with concurrency 1 given back "no room, called
// again in 1s" while another consumer's call held the slot, and the clock
// never moved). A claimed effect's lease is not moved past, unless its
// claim was abandoned: its consumer performed it and could not record it
// (simCallEnds), and nothing but the lease's end lets it be called again
// (spec-space seed 38, spec 3, under load: "effect performed but not
// recorded", and the clock never moved). The clock moves past such a
// lease once.
func (r *consumeRun[U]) waitOutBackoffs() {
	rows, err := r.db.observer().Auto().Ledger(context.Background())
	if err != nil {
		return
	}
	now := r.now()
	next := now
	r.mu.Lock()
	abandoned := maps.Clone(r.abandoned)
	r.mu.Unlock()
	passed := map[string]bool{}
	for _, e := range rows {
		switch {
		case e.State == idem.StatePending && e.LeaseOwner != "" && abandoned[e.Key]:
			passed[e.Key] = true
			if until := now.Add(r.job.Lease + time.Second); until.After(next) {
				next = until // its lease (the longest), which began by now, has run out
			}
		case e.State == idem.StatePending && e.LeaseOwner != "":
			return // claimed: a live call's lease must not run out under it
		case e.State == idem.StatePending && e.NextAttemptAt.After(next):
			next = e.NextAttemptAt
		}
	}
	r.mu.Lock()
	if r.clock.Before(next) {
		r.clock = next
	}
	for k := range passed {
		delete(r.abandoned, k)
	}
	r.mu.Unlock()
}

// owes reports whether the ledger holds an effect not done or parked
// (or cannot be read).
func (r *consumeRun[U]) owes() bool {
	rows, err := r.owedRows()
	return err != nil || len(rows) > 0
}

// owedRows is the ledger's rows not done or parked.
func (r *consumeRun[U]) owedRows() ([]idem.LedgerEntry, error) {
	rows, err := r.db.observer().Auto().Ledger(context.Background())
	return slices.DeleteFunc(rows, func(e idem.LedgerEntry) bool {
		return e.State == idem.StateDone || e.State == idem.StateParked
	}), err
}

// owed says what the ledger still owes, for a violation's message: ""
// when it owes nothing.
func (r *consumeRun[U]) owed() string {
	rows, err := r.owedRows()
	if err != nil {
		return "; the ledger: " + err.Error()
	}
	if len(rows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("; the ledger still owes")
	for _, e := range rows {
		fmt.Fprintf(&b, " [%s %s, %d attempts, lease owner %q, next attempt %s, clock %s, last error %q]", e.Key, e.State, e.Attempts,
			e.LeaseOwner, e.NextAttemptAt.Format(time.RFC3339), r.now().Format(time.RFC3339), e.LastError)
	}
	return b.String()
}

func (r *consumeRun[U]) describe() string {
	var b strings.Builder
	for _, m := range r.broker.snapshot() {
		fmt.Fprintf(&b, "[%s kind %d state %d delivered %d acks %d retries %d deads %d] ", m.msg.ID, m.kind, m.state, m.delivered, m.acks, m.retries, m.deads)
	}
	return b.String()
}

// play runs the scenario, as its family plays it, and returns its
// violations.
func (r *consumeRun[U]) play() []string {
	r.fam.play(r, time.Now().Add(simConsumeBound))
	r.checkEnd()
	return r.violations
}

// runToTheEnd runs consumers, one after another as each dies, until the
// broker settled every message and the ledger owes nothing; then stops
// the last one.
func (r *consumeRun[U]) runToTheEnd(inc *consumeInc, deadline time.Time) {
	for r.converge(inc, deadline) {
		r.afterLease()
		inc = r.start()
	}
	r.stop(inc)
}

// firstRoundSettled reports whether every message was settled once.
func (r *consumeRun[U]) firstRoundSettled() bool {
	for _, m := range r.broker.snapshot() {
		if m.acks+m.deads+m.retries == 0 {
			return false
		}
	}
	return true
}

// simLogTail keeps the last lines a scenario's consumers logged at
// warning and above.
type simLogTail struct {
	mu    sync.Mutex
	lines []string
}

const simLogTailLines = 12

func (l *simLogTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimRight(string(p), "\n"))
	if len(l.lines) > simLogTailLines {
		l.lines = l.lines[len(l.lines)-simLogTailLines:]
	}
	return len(p), nil
}

func (l *simLogTail) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// tail is the lines kept, for a violation's message ("" when none).
func (l *simLogTail) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == 0 {
		return ""
	}
	return "; the consumers' last warnings:\n    " + strings.Join(l.lines, "\n    ")
}
