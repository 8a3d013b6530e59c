package crashsim

// The consumer families: a job with consume: runs as its generated
// consumer (Verbs.ConsumeFrom) over the simulation's broker (broker.go), which
// delivers a fixture of messages at least once: units, a copy of one, a
// body that does not decode, a unit with an empty key field and a copy of
// a unit with another payload. Each family plays it on a fresh database:
//
//	family            what happens                                           guarantees
//	consume           no fault: every message settled once, each good        1 2 7 8
//	                  unit applied and its effects performed once, each
//	                  poison message parked once and settled dead
//	consume-crash     the consumer dies at every hit of the first run; the   1 2 3 8
//	                  broker delivers again what it held; a new consumer
//	                  converges: every unit applied once, nothing acked
//	                  before its unit committed
//	consume-ackloss   the broker loses the ack of each good message in turn  2 4
//	                  (delivered again after the commit): deduped, no
//	                  second provider call
//	consume-reorder   every ack of the first run lost, and the messages      2 4 7
//	                  delivered again last first
//	consume-inflight  a message is delivered to a second consumer while the  2 5
//	                  first is calling its effect's provider: one call
//	consume-takeover  the same, and the first consumer dies before its call: 2 5
//	                  the second acknowledged the message (the effect owed),
//	                  and performs the effect itself once the lease ran out
//
// The end checks hold in every family: every message acked or dead; a
// dead message was one that can never succeed, and it is parked (the
// parked table holds it); a good message acked; the destination holds one
// row per key, of the payload that was acknowledged; each effect of each
// applied unit performed once by the provider (called twice only when a
// consumer died between the call and its record); no message acknowledged
// before its unit's transaction committed. A settlement that a consumer's
// goroutine sends after another of its goroutines died is refused, as a
// dead process sends none.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// famConsumer, as IDEMGEN_CRASHSIM_SCENARIO, plays every consumer family
// and nothing else.
const famConsumer = "consumer"

const (
	famConsume         = "consume"
	famConsumeCrash    = "consume-crash"
	famConsumeAckLoss  = "consume-ackloss"
	famConsumeReorder  = "consume-reorder"
	famConsumeInflight = "consume-inflight"
	famConsumeTakeover = "consume-takeover"
)

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
	prov   *Provider
	broker *simBroker
	units  []U // the fixture's units; a message carries one by index

	mu      sync.Mutex
	clock   time.Time
	hits    int
	crashAt int
	crashes int
	// called and recorded are the effect keys each incarnation called the
	// provider for and recorded; window, the keys a consumer died between
	// the two for: the one place a repeat is allowed.
	called, recorded map[int]map[string]bool
	window           map[string]bool
	violations       []string
	incs             int
	dead             map[int]bool
	// hold pauses the first consumer before its provider call of the held
	// unit's first effect (inflight, takeover).
	hold *consumeHold
	// batch is the consumers' batch: one message in the held families, so
	// that the held consumer holds nothing else, and only a drain can
	// perform the held effect once the message was acknowledged.
	batch    int
	ackCheck sync.Mutex
}

// consumeHold is the inflight and takeover families' pause.
type consumeHold struct {
	key     string // the effect key whose call is held
	msg     int    // the message that carries its unit
	reached chan int
	release chan struct{}
	once    sync.Once
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

// consumeFixture builds the messages: units 1 to 3, a copy of unit 1, a
// body that does not decode, unit 4 with its key field empty (when a key
// field is a string) and unit 2 with another payload (when its revision
// changes a field).
func consumeFixture[U any](job *Job[U]) ([]U, []*simMsg, error) {
	units := []U{job.Unit(1, 0), job.Unit(2, 0), job.Unit(3, 0)}
	var msgs []*simMsg
	add := func(kind simMsgKind, unit int, u *U, body []byte) error {
		m := &simMsg{kind: kind, unit: unit}
		m.msg.ID = fmt.Sprintf("sim/%d", len(msgs)+1)
		if u != nil {
			var err error
			if body, m.msg.Headers, err = encodeSimMessage(job, *u); err != nil {
				return err
			}
		}
		m.msg.Body = body
		msgs = append(msgs, m)
		return nil
	}
	for i := range units {
		if err := add(msgGood, i, &units[i], nil); err != nil {
			return nil, nil, err
		}
		if i == 0 {
			if err := add(msgGood, 0, &units[0], nil); err != nil {
				return nil, nil, err
			}
		}
	}
	if err := add(msgUndecoded, -1, nil, []byte(`{"not json`)); err != nil {
		return nil, nil, err
	}
	if f, ok := emptyableKeyField(job); ok {
		u := job.Unit(4, 0)
		body, headers, err := encodeSimMessage(job, u)
		if err != nil {
			return nil, nil, err
		}
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, nil, err
		}
		obj[f] = ""
		if _, ok := headers[job.Headers[f]]; ok {
			headers[job.Headers[f]] = ""
		}
		body, _ = json.Marshal(obj)
		msgs = append(msgs, &simMsg{kind: msgEmptyKey, unit: -1, msg: idembroker.Message{ID: fmt.Sprintf("sim/%d", len(msgs)+1), Body: body, Headers: headers}})
	}
	changed := job.Unit(2, 1)
	a, _ := json.Marshal(units[1])
	b, _ := json.Marshal(changed)
	if job.keyOf(changed) == job.keyOf(units[1]) && string(a) != string(b) {
		units = append(units, changed)
		if err := add(msgChangedKey, len(units)-1, &units[len(units)-1], nil); err != nil {
			return nil, nil, err
		}
	}
	return units, msgs, nil
}

// emptyableKeyField returns a string field of the unit key, which a
// message can leave empty.
func emptyableKeyField[U any](job *Job[U]) (string, bool) {
	for _, f := range job.Fields {
		if f.InKey && f.Type == "string" && !f.Nullable {
			return f.Name, true
		}
	}
	return "", false
}

// encodeSimMessage encodes u as a producer would: the JSON body by field
// name, and each field the spec reads from a header also in that header.
func encodeSimMessage[U any](job *Job[U], u U) ([]byte, map[string]string, error) {
	body, err := json.Marshal(u)
	if err != nil {
		return nil, nil, err
	}
	if len(job.Headers) == 0 {
		return body, nil, nil
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return nil, nil, err
	}
	headers := map[string]string{}
	for field, header := range job.Headers {
		raw, ok := obj[field]
		if !ok || string(raw) == "null" {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			headers[header] = s
		} else {
			headers[header] = string(raw)
		}
		delete(obj, field)
	}
	body, err = json.Marshal(obj)
	return body, headers, err
}

// consumeScenarios lists the families' scenarios; crash points come from a
// discovery run's hits. -short keeps every third crash.
func consumeScenarios(hits int, good []int, short bool) []consumeScenario {
	out := []consumeScenario{{famConsume, -1}, {famConsumeReorder, -1}, {famConsumeInflight, -1}, {famConsumeTakeover, -1}}
	for k := range hits {
		if !short || k%3 == 0 {
			out = append(out, consumeScenario{famConsumeCrash, k})
		}
	}
	for _, i := range good {
		out = append(out, consumeScenario{famConsumeAckLoss, i})
	}
	return out
}

// runConsumer plays the consumer families for a job whose units arrive
// from a broker.
func runConsumer[U any](t *testing.T, env Env, job *Job[U]) {
	_, msgs, err := consumeFixture(job)
	if err != nil {
		t.Fatalf("crashsim %s: the consumer fixture: %v", job.Name, err)
	}
	discovery := newConsumeRun(t, job, env.fresh(t), consumeScenario{famConsume, -1})
	if v := discovery.play(); len(v) > 0 {
		t.Fatalf("crashsim %s %s: the consumer's discovery run broke invariants:\n  %s\n1 of 1 scenarios broke invariants (families: %s)",
			job.Name, env.name(), strings.Join(v, "\n  "), famConsume)
	}
	discovery.db.close()
	var good []int
	for i, m := range msgs {
		if m.kind == msgGood {
			good = append(good, i)
		}
	}
	only := os.Getenv("IDEMGEN_CRASHSIM_SCENARIO")
	failed := 0
	broken := map[string]bool{}
	scenarios := consumeScenarios(discovery.hits, good, testing.Short())
	for _, sc := range scenarios {
		if only != "" && only != famConsumer && only != sc.String() && only != "family:"+sc.family {
			continue
		}
		r := newConsumeRun(t, job, env.fresh(t), sc)
		v := r.play()
		r.db.close()
		if len(v) > 0 {
			failed++
			broken[sc.family] = true
			if failed <= 5 {
				t.Errorf("crashsim %s %s: scenario %q broke invariants:\n  %s\nreplay: IDEMGEN_CRASHSIM_SCENARIO=%q go test -run '%s' .",
					job.Name, env.name(), sc, strings.Join(v, "\n  "), sc.String(), t.Name())
			}
		}
	}
	if failed > 0 {
		t.Errorf("crashsim %s %s: %d of %d consumer scenarios broke invariants (families: %s)", job.Name, env.name(), failed, len(scenarios),
			strings.Join(slices.Sorted(maps.Keys(broken)), ", "))
		return
	}
	t.Logf("crashsim %s %s: %d consumer scenarios (%d hits in the discovery run), all invariants held", job.Name, env.name(), len(scenarios), discovery.hits)
}

func newConsumeRun[U any](t testing.TB, job *Job[U], db simDB, sc consumeScenario) *consumeRun[U] {
	units, msgs, err := consumeFixture(job)
	if err != nil {
		t.Fatalf("crashsim %s: the consumer fixture: %v", job.Name, err)
	}
	r := &consumeRun[U]{t: t, job: job, db: db, sc: sc, prov: newSimProvider(), broker: newSimBroker(msgs), units: units,
		clock: Base, crashAt: -1, dead: map[int]bool{}, batch: simConsumeBatch,
		called: map[int]map[string]bool{}, recorded: map[int]map[string]bool{}, window: map[string]bool{}}
	r.prov.now = r.now
	r.broker.dead = r.isDead
	r.broker.onAck = r.checkAck
	switch sc.family {
	case famConsumeCrash:
		r.crashAt = sc.at
	case famConsumeAckLoss:
		r.broker.loseAck[sc.at] = true
	case famConsumeReorder:
		for i := range msgs {
			r.broker.loseAck[i] = true
		}
	case famConsumeInflight, famConsumeTakeover:
		if len(job.Effects) > 0 {
			r.hold = &consumeHold{key: oracleKey(job.Effects[0].Key, baseVersions(job).vars(0), units[0]), msg: 0,
				reached: make(chan int, 1), release: make(chan struct{})}
			r.batch = 1
		}
	}
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

// hook is an incarnation's crash hook: it counts hits, dies at the
// scenario's crash hit, and holds the inflight families' call.
func (r *consumeRun[U]) hook(inc int, crashed chan struct{}) idemrt.CrashHook {
	return func(ctx context.Context, p idemrt.CrashPoint, detail string) error {
		if r.isDead(inc) {
			select {} // the process is gone
		}
		r.mu.Lock()
		n := r.hits
		r.hits++
		switch p {
		case idemrt.PointEffectAfterCall:
			mark(r.called, inc, detail)
		case idemrt.PointEffectRecorded:
			mark(r.recorded, inc, detail)
		}
		crash := n == r.crashAt
		if crash {
			r.dead[inc] = true
			r.crashes++
			r.noteWindow(inc)
		}
		hold := r.hold
		r.mu.Unlock()
		if crash {
			crashed <- struct{}{}
			select {} // park for good: nothing unwinds
		}
		if hold != nil && p == idemrt.PointEffectBeforeCall && detail == hold.key {
			first := false
			hold.once.Do(func() { first = true })
			if first {
				hold.reached <- inc
				<-hold.release
				if r.isDead(inc) {
					select {}
				}
			}
		}
		return nil
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
func (r *consumeRun[U]) start() *consumeInc {
	r.mu.Lock()
	r.incs++
	id := r.incs
	r.mu.Unlock()
	inc := &consumeInc{id: id, done: make(chan error, 1), crashed: make(chan struct{}, 1)}
	hook := r.hook(id, inc.crashed)
	st, kill, closeInc := r.db.incarnation(r.t, hook)
	inc.kill, inc.close = kill, closeInc
	opts := []idem.Option{idem.WithClock(r.now), idemrt.WithLeaseClock(r.now), idem.WithLogger(simLogger),
		idem.WithEffectConcurrency(1), idem.WithWriteAhead(false), idemrt.WithCrashHook(hook), idem.WithOwner(simOwner(id)),
		idemrt.WithJobEdit(consumeLimits[U])}
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
		inc.done <- verbs.ConsumeFrom(ctx, r.broker.source(id), idembroker.WithBatch(r.batch),
			idembroker.WithDrainEvery(simConsumeDrainEvery), idembroker.WithLogger(simLogger))
	}()
	return inc
}

// simConsumeDrainEvery is how often a consumer performs owed effects in
// the simulation (real time; leases run on the simulation's clock).
const simConsumeDrainEvery = 10 * time.Millisecond

// consumeLimits takes the rates and circuits out: the simulation's clock
// stands still (limits.go).
func consumeLimits[U any](j *idemrt.Job[U]) {
	for i := range j.Effects {
		j.Effects[i].Rate = idemrt.Rate{}
		j.Effects[i].Circuit = idemrt.Circuit{}
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
		if time.Now().After(deadline) {
			owes := ""
			if r.owes() {
				owes = "; the ledger still owes effects"
			}
			r.violate("not converged within %s%s: %s", simConsumeBound, owes, r.describe())
			return false
		}
	}
}

// owes reports whether the ledger holds an effect not done or parked.
func (r *consumeRun[U]) owes() bool {
	rows, err := r.db.observer().Auto().Ledger(context.Background())
	if err != nil {
		return true
	}
	for _, e := range rows {
		if e.State != idem.StateDone && e.State != idem.StateParked {
			return true
		}
	}
	return false
}

func (r *consumeRun[U]) describe() string {
	var b strings.Builder
	for _, m := range r.broker.snapshot() {
		fmt.Fprintf(&b, "[%s kind %d state %d delivered %d acks %d retries %d deads %d] ", m.msg.ID, m.kind, m.state, m.delivered, m.acks, m.retries, m.deads)
	}
	return b.String()
}

// play runs the scenario and returns its violations.
func (r *consumeRun[U]) play() []string {
	deadline := time.Now().Add(simConsumeBound)
	inc := r.start()
	if r.sc.family == famConsumeReorder {
		// The first run's acks are all lost; the broker then delivers
		// them again last first.
		for !r.firstRoundAcked() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		r.broker.reverse()
	}
	if r.hold != nil {
		r.playHeld(inc, deadline)
	} else {
		for r.converge(inc, deadline) {
			r.afterLease()
			inc = r.start()
		}
		r.stop(inc)
	}
	r.checkEnd()
	return r.violations
}

// firstRoundAcked reports whether every message was settled once.
func (r *consumeRun[U]) firstRoundAcked() bool {
	for _, m := range r.broker.snapshot() {
		if m.acks+m.deads+m.retries == 0 {
			return false
		}
	}
	return true
}

// playHeld: consumer A is held before its call of unit 1's first effect;
// the broker delivers that message again, to consumer B, which must not
// call (the effect is leased to A) and may acknowledge it, the effect
// owed. Inflight: A is let go and calls once. Takeover: A dies before the
// call; once its lease ran out, B performs the effect itself.
func (r *consumeRun[U]) playHeld(a *consumeInc, deadline time.Time) {
	select {
	case <-r.hold.reached:
	case <-time.After(simConsumeBound):
		r.violate("consumer %d never reached its call of %s", a.id, r.hold.key)
		r.stop(a)
		return
	}
	r.broker.redeliver(r.hold.msg)
	b := r.start()
	// B meets the live lease; it settles every message, the held one too
	// (acknowledged with its effect owed, or given back).
	for time.Now().Before(deadline) && !r.broker.settled() {
		time.Sleep(time.Millisecond)
	}
	if r.sc.family == famConsumeTakeover {
		r.die(a)
		close(r.hold.release)
		r.afterLease()
	} else {
		close(r.hold.release)
	}
	for r.converge(b, deadline) {
		r.afterLease()
		b = r.start()
	}
	if r.sc.family == famConsumeInflight {
		r.stop(a)
	}
	r.stop(b)
}

// checkAck: a message is acknowledged only once its unit's transaction
// committed: its row is in the destination, or its effects are in the
// ledger.
func (r *consumeRun[U]) checkAck(m *simMsg) {
	if m.kind != msgGood && m.kind != msgChangedKey {
		return
	}
	r.ackCheck.Lock()
	defer r.ackCheck.Unlock()
	u := r.units[m.unit]
	key := r.job.keyOf(u)
	ctx := context.Background()
	obs := r.db.observer()
	if r.job.HasDest && r.job.Rows != nil {
		rows, err := r.job.Rows(ctx, obs)
		if err != nil {
			r.violate("ack of %s: read the destination: %v", m.msg.ID, err)
			return
		}
		if !slices.ContainsFunc(rows, func(row U) bool { return r.job.keyOf(row) == key }) {
			r.violate("message %s (unit %s) acknowledged before its unit's row committed", m.msg.ID, key)
		}
		return
	}
	if len(r.job.Effects) == 0 {
		return
	}
	fxKey := oracleKey(r.job.Effects[0].Key, baseVersions(r.job).vars(0), u)
	if _, found, err := obs.Auto().Effect(ctx, fxKey); err == nil && !found {
		r.violate("message %s (unit %s) acknowledged before its effect %s was reserved", m.msg.ID, key, fxKey)
	}
}

// checkEnd holds the end checks of every consumer family.
func (r *consumeRun[U]) checkEnd() {
	ctx := context.Background()
	msgs := r.broker.snapshot()
	r.mu.Lock()
	crashes := r.crashes
	r.mu.Unlock()
	// The payload each key was acknowledged with: exactly one.
	winner := map[string]int{}
	for _, m := range msgs {
		switch {
		case m.state != msgAcked && m.state != msgDead:
			r.violate("message %s never settled (delivered %d times)", m.msg.ID, m.delivered)
		case m.kind == msgUndecoded || m.kind == msgEmptyKey:
			if m.state != msgDead {
				r.violate("message %s can never succeed but was acknowledged", m.msg.ID)
			}
			if m.deads != 1 {
				r.violate("message %s settled dead %d times, want once", m.msg.ID, m.deads)
			}
			if m.delivered > 1+crashes {
				r.violate("message %s that can never succeed was delivered %d times: it loops", m.msg.ID, m.delivered)
			}
		case m.state == msgAcked:
			key := r.job.keyOf(r.units[m.unit])
			if w, ok := winner[key]; ok && w != m.unit {
				r.violate("key %s acknowledged with two payloads (messages of units %d and %d)", key, w, m.unit)
			}
			winner[key] = m.unit
		}
	}
	for _, m := range msgs {
		if m.state == msgDead && m.kind != msgUndecoded && m.kind != msgEmptyKey {
			key := r.job.keyOf(r.units[m.unit])
			if w, ok := winner[key]; !ok || w == m.unit {
				r.violate("message %s (unit %s) settled dead, but its payload is the one its key holds", m.msg.ID, key)
			}
		}
	}
	// Parked: one row per message that can never succeed.
	parked, err := r.db.observer().Auto().UnitFailures(ctx)
	if err != nil {
		r.violate("read parked units: %v", err)
	}
	dead := 0
	for _, m := range msgs {
		if m.state == msgDead {
			dead++
		}
	}
	if got := countParked(parked, r.job.Name); got != dead {
		r.violate("%d parked rows for %d dead messages, want one each: %v", got, dead, parkedKeys(parked))
	}
	r.checkRows(ctx, winner)
	r.checkCalls(winner, crashes)
}

func countParked(rows []idem.ParkedUnit, job string) int {
	n := 0
	for _, p := range rows {
		if p.Job == job && p.State == idem.UnitStateParked {
			n++
		}
	}
	return n
}

func parkedKeys(rows []idem.ParkedUnit) []string {
	var out []string
	for _, p := range rows {
		out = append(out, p.Key+"("+p.State+")")
	}
	return out
}

// checkRows: one row per applied key, holding the acknowledged payload.
func (r *consumeRun[U]) checkRows(ctx context.Context, winner map[string]int) {
	if !r.job.HasDest || r.job.Rows == nil {
		return
	}
	rows, err := r.job.Rows(ctx, r.db.observer())
	if err != nil {
		r.violate("read the destination: %v", err)
		return
	}
	seen := map[string]bool{}
	for _, row := range rows {
		key := r.job.keyOf(row)
		if seen[key] {
			r.violate("two rows for key %s", key)
		}
		seen[key] = true
		w, ok := winner[key]
		if !ok {
			r.violate("a row for key %s, which no message was acknowledged for", key)
			continue
		}
		want, _ := json.Marshal(r.units[w])
		got, _ := json.Marshal(row)
		if !sameJSONUnit(want, got) {
			r.violate("row %s holds %s, want the acknowledged %s", key, got, want)
		}
	}
	for key := range winner {
		if !seen[key] {
			r.violate("key %s acknowledged but no row holds it", key)
		}
	}
}

// sameJSONUnit compares two units' JSON, times by instant.
func sameJSONUnit(a, b []byte) bool {
	var x, y map[string]any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	for k, v := range x {
		if s, ok := v.(string); ok {
			if t1, err := time.Parse(time.RFC3339Nano, s); err == nil {
				if s2, ok := y[k].(string); ok {
					if t2, err := time.Parse(time.RFC3339Nano, s2); err == nil && t1.Equal(t2) {
						continue
					}
				}
			}
		}
		if fmt.Sprint(v) != fmt.Sprint(y[k]) {
			return false
		}
	}
	return len(x) == len(y)
}

// checkCalls: each effect of each acknowledged unit applied once by the
// provider, and no other key applied; a key called twice only when a
// consumer died between a call and its record.
func (r *consumeRun[U]) checkCalls(winner map[string]int, crashes int) {
	want := map[string]bool{}
	for _, w := range winner {
		for i, fx := range r.job.Effects {
			if fx.When != idemrt.WhenAlways && !r.job.HasDest {
				continue
			}
			want[oracleKey(fx.Key, baseVersions(r.job).vars(i), r.units[w])] = true
		}
	}
	r.prov.mu.Lock()
	applied := maps.Clone(r.prov.applied)
	calls := maps.Clone(r.prov.calls)
	r.prov.mu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if applied[k] != 1 {
			r.violate("effect %s applied %d times, want once", k, applied[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(calls)) {
		if !want[k] {
			r.violate("provider called for %s, which no acknowledged unit decides", k)
			continue
		}
		if calls[k] > 1 && !r.diedAfterCall(k) {
			r.violate("provider called %d times for %s, want once (no consumer died between its call and its record)", calls[k], k)
		}
	}
}

// diedAfterCall reports whether a consumer died after calling the
// provider for key and before recording the call.
func (r *consumeRun[U]) diedAfterCall(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.window[key]
}
