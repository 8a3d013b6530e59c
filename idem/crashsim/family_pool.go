package crashsim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The pool-held family: worker A's process has a pool of simPoolConns
// connections, and something else in that process (a request handler, a
// stuck transaction) holds every one of them while A runs its first
// phase under the held family's short wait bound. A's first wait for a
// connection must end within its bound (plus slack for a loaded machine)
// as the bounded-wait error (idem.WaitError, which is busy), counting no
// failed attempt and parking nothing, never a hang until a connection
// comes back. Then the connections go back, the phase runs, and the run
// converges as every run does. A wait on the pool that is not bounded (a
// connection taken without the wait bound) hangs here until the hold
// ends. Its variants: at-claim holds the pool from A's second claim of an
// effect; slow-open holds nothing, but every connection A opens takes
// longer than its bound to open.

const famPoolHeld = "pool-held"

// simPoolConns is the held pool's size; simPoolSlack is what A may take
// past its wait bound; simPoolHang bounds the family's own wait for A.
const (
	simPoolConns = 2
	simPoolSlack = 2 * time.Second
	simPoolHang  = 30 * time.Second
)

type poolFamily[U any] struct {
	baseFamily[U]
	// arm, when set, begins the next incarnation's hold as its work
	// begins; held is then the hold (release, and when it began).
	arm  atomic.Pointer[func(context.Context) *simPoolHold]
	held atomic.Pointer[simPoolHold]
}

// simPoolHold is what keeps A from its connections: a pool whose every
// connection is taken, or opens that outlast A's bound.
type simPoolHold struct {
	began   time.Time
	how     string // in the violations' words: "its pool's 2 connections held"
	err     error
	release func()
}

// holdAll takes every connection of the newest incarnation's pool.
func holdAll[U any](r *simRun[U], ctx context.Context) *simPoolHold {
	h := &simPoolHold{release: func() {}}
	n := 0
	if holder, ok := r.db.(poolHolder); ok {
		n, h.release, h.err = holder.holdPool(ctx)
	} else {
		h.err = errors.New("the scenario's database cannot hold its pool")
	}
	h.how = fmt.Sprintf("its pool's %d connections held", n)
	h.began = time.Now()
	return h
}

func (*poolFamily[U]) about() familyAbout {
	return familyAbout{name: famPoolHeld, long: 500 * time.Millisecond, guarantees: []int{5, 8},
		what: "worker A's process has a pool of two connections, and both are held by others while A " +
			"runs its first phase under a wait bound of 150 ms: A ends within its bound (and 2 s of " +
			"slack) with the bounded-wait error (`idem.WaitError`, busy), never a hang until a " +
			"connection comes back, and counts no failed attempt and parks nothing; then the " +
			"connections go back and the run converges. Its `at-claim` variant holds the pool from " +
			"A's second claim of an effect with a circuit (else a concurrency), whose first statement " +
			"then reads the effect's gate (its call slot): each failed effect of A is judged, busy or " +
			"nothing, and only that call waits for a connection: once one has waited out its bound, " +
			"the batch's later calls are not made (each would wait two bounds). " +
			"Its `slow-open` variant holds nothing, but every connection A opens takes longer than its bound " +
			"to open (the bound runs out inside the open, where the embedded SQLite answers \"interrupted\"): " +
			"A's wait ends the same way"}
}

// sample: every variant, in -short too (a second each at most).
func (*poolFamily[U]) sample(all []simScenario) []simScenario { return all }

// The variants of pool-held: the hold begins at A's second claim of an
// effect with limits (at-claim); every connection A opens outlasts its
// bound (slow-open).
const (
	simPoolAtClaim  = "at-claim"
	simPoolSlowOpen = "slow-open"
)

// plan: the pool held from A's start; A's opens slow from its start
// (simPoolSlowOpen); and, when the effect poolTarget names is claimed
// twice in the first phase, the pool held from A's second claim of it
// (simPoolAtClaim).
func (*poolFamily[U]) plan(d *discovery[U]) []simScenario {
	slow := newScenario(famPoolHeld)
	slow.variant = simPoolSlowOpen
	out := []simScenario{newScenario(famPoolHeld), slow}
	target := poolTarget(d.job)
	claims := 0
	for _, h := range d.trace[:d.firstPhase] {
		if h.p == idemtest.PointEffectClaimed && target != "" && d.effectOf[h.detail] == target {
			claims++
		}
	}
	if claims >= 2 {
		sc := newScenario(famPoolHeld)
		sc.variant = simPoolAtClaim
		out = append(out, sc)
	}
	return out
}

// poolTarget is the effect whose second claim the at-claim hold begins
// at: one with a circuit and no concurrency, else one with a concurrency
// ("": none). At its second claim the engine has added the effect's limit
// rows already, and its first statement after the claim reads them: the
// gate, a statement outside a transaction that ends through the row it
// returns (SQLiteAuto.QueryRowContext), which the start's hold never
// reaches; or, under a concurrency, a call slot's.
func poolTarget[U any](j *Job[U]) string {
	for _, fx := range j.Effects {
		if fx.Circuit.Failures > 0 && fx.Concurrency == 0 {
			return fx.Name
		}
	}
	for _, fx := range j.Effects {
		if fx.Concurrency > 0 {
			return fx.Name
		}
	}
	return ""
}

// limit: the at-claim variant keeps the spec's circuit (which no fault of
// this family opens), so that every call of the effect reads its gate.
func (*poolFamily[U]) limit(r *simRun[U], fx *idemrt.Effect[U], spec idemrt.Effect[U]) {
	if r.sc.variant == simPoolAtClaim {
		fx.Circuit = spec.Circuit
	}
}

// secondClaim pauses A at its second claim of the target effect.
func (f *poolFamily[U]) secondClaim(r *simRun[U]) func(n int, h simHit) bool {
	target := poolTarget(r.job)
	effectOf := map[string]string{}
	for _, u := range r.phases[0] {
		for i, fx := range r.job.Effects {
			effectOf[oracleKey(fx.Key, baseVersions(r.job).vars(i), u)] = fx.Name
		}
	}
	var claims atomic.Int32
	return func(_ int, h simHit) bool {
		return h.p == idemtest.PointEffectClaimed && effectOf[h.detail] == target && claims.Add(1) == 2
	}
}

// setup: each incarnation's pool has simPoolConns connections.
func (*poolFamily[U]) setup(r *simRun[U]) {
	if l, ok := r.db.(connLimiter); ok {
		l.limitConns(simPoolConns)
	}
}

// runContext begins the armed incarnation's hold before its work begins.
func (f *poolFamily[U]) runContext(_ *simRun[U], ctx context.Context, _ *simInc) context.Context {
	if begin := f.arm.Swap(nil); begin != nil {
		f.held.Store((*begin)(ctx))
	}
	return ctx
}

// playPhase: phase 0 first runs with A kept from its connections (its
// pool held from its start or from its second claim of the target
// effect, or its opens slow), then as usual.
func (f *poolFamily[U]) playPhase(r *simRun[U], phase int) {
	switch {
	case phase == 0 && r.sc.variant == simPoolAtClaim:
		f.playAtClaim(r, phase)
	case phase == 0 && r.sc.variant == simPoolSlowOpen:
		f.playSlowOpen(r, phase)
	case phase == 0:
		f.playHeld(r, phase)
	}
	r.runPhase(phase, phasePlay{})
}

// playAtClaim runs A, under the short wait bound, to its second claim of
// the target effect, and holds its pool there. A that ends before it
// holds nothing: a violation, unless one of its waits ended busy first,
// which a loaded machine may make of a wait of 150 ms (the goldens' whole
// run, refund_hook on PostgreSQL: a wait before the second claim answered
// busy, and the effect was never claimed again); the phase then runs as
// usual, and the scenario tests nothing more than that.
func (f *poolFamily[U]) playAtClaim(r *simRun[U], phase int) {
	task := r.start(phase, workHeld, f.secondClaim(r))
	out, paused := task.wait()
	switch {
	case paused:
		f.holdAtClaim(r, phase, task)
	case out.crashed:
		r.violate("%s %s: worker A died, though nothing here kills it", famPoolHeld, simPoolAtClaim)
	case r.checkOnlyWaited(out, famPoolHeld+" "+simPoolAtClaim+": worker A, before its second claim", "its waits ran under the short bound", "the database") > 0:
		r.record(out, task.inc.id)
		r.t.Logf("%s %s: worker A ended busy before its second claim of %s (a loaded machine): nothing was held", famPoolHeld, simPoolAtClaim, poolTarget(r.job))
	default:
		r.record(out, task.inc.id)
		r.violate("%s %s: worker A never claimed %s a second time: the family tests nothing", famPoolHeld, simPoolAtClaim, poolTarget(r.job))
	}
}

// holdAtClaim holds A's pool while A stands paused right after a claim,
// then lets A go on, and judges how its waits ended.
func (f *poolFamily[U]) holdAtClaim(r *simRun[U], phase int, a *simTask) {
	h := holdAll(r, context.Background())
	f.held.Store(h)
	a.inc.resume <- struct{}{} // not finish: its close of the incarnation would wait for the held pool
	f.judgeHeld(r, phase, a, h, simPoolHang)
}

// simPoolAtClaimAllowed is how long A may take, its pool held from a
// claim: the call it was claiming waits for its gate or slot, then for its
// release; the batch's later calls are not made (the engine gives them up
// once one call has waited out its bound for a connection); a later batch's
// write and the run's end wait once each; and the slack.
const simPoolAtClaimAllowed = simPoolSlack + 6*simHeldWaitBound

// playHeld runs A on a pool others hold, and judges how its wait ended.
func (f *poolFamily[U]) playHeld(r *simRun[U], phase int) {
	begin := func(ctx context.Context) *simPoolHold { return holdAll(r, ctx) }
	f.arm.Store(&begin)
	task := r.start(phase, workHeld, nil)
	// A's bound runs from the hold (runContext), not from the task's
	// start: under load an incarnation took seconds to come up, the hold
	// came after this wait had given up, and nothing released it (the
	// pool's Close then waited for its connections until the watchdog).
	f.judgeHeld(r, phase, task, f.awaitHold(), simHeldWaitBound+simPoolSlack)
}

// playSlowOpen runs A, under the short wait bound, on an incarnation
// whose every connection takes longer than the bound to open: the open
// waits until its context ends, and the driver then answers as it does
// when a bound runs out inside an open (the embedded SQLite:
// "interrupted"). A's wait must end as the held pool's does. The opens
// are slow from A's incarnation on (the database reads it as each
// begins); A's time runs from its work's start, as the held pool's.
func (f *poolFamily[U]) playSlowOpen(r *simRun[U], phase int) {
	opener, ok := r.db.(slowOpener)
	if !ok {
		r.violate("%s %s: the scenario's database cannot slow its opens", famPoolHeld, simPoolSlowOpen)
		return
	}
	release := opener.slowOpens()
	begin := func(context.Context) *simPoolHold {
		return &simPoolHold{began: time.Now(), how: "every connection it opens taking longer than its bound to open", release: release}
	}
	f.arm.Store(&begin)
	task := r.start(phase, workHeld, nil)
	h := f.awaitHold()
	if h == nil {
		release()
	}
	f.judgeHeld(r, phase, task, h, simHeldWaitBound+simPoolSlack)
}

// judgeHeld: A, its pool held since h began (nil: never), ends within
// its wait bound and the slack, with a bounded wait for a
// connection, only busy, counting no attempt; then the pool comes back.
// A's incarnation is closed once the pool is back: closing a PostgreSQL
// pool waits for its connections.
//
// A ends within hold of the hold's start, the pool still held: a wait
// without a bound lasts until the pool comes back. A held from a claim
// has many effects still to fail, each waiting its bounds: it may hold the
// pool longer, and its time is judged after (simPoolAtClaimAllowed).
func (f *poolFamily[U]) judgeHeld(r *simRun[U], phase int, task *simTask, h *simPoolHold, hold time.Duration) {
	var out simOutcome
	ended := false
	if h != nil {
		select {
		case out = <-task.done:
			ended = true
		case <-time.After(time.Until(h.began.Add(hold))):
		}
	}
	took := time.Duration(0)
	if h != nil {
		took = time.Since(h.began)
		h.release() // a wait without a bound ends now
	}
	if !ended {
		select {
		case out = <-task.done:
		case <-time.After(simPoolHang):
			r.violate("%s: worker A did not end in %s after its pool's connections came back", famPoolHeld, simPoolHang)
			return
		}
	}
	task.closeInc()
	r.worldMoved()
	r.record(out, task.inc.id)
	switch {
	case h == nil:
		r.violate("%s: worker A's pool was never held: the family tests nothing", famPoolHeld)
		return
	case h.err != nil:
		r.violate("%s: hold worker A's pool: %v", famPoolHeld, h.err)
		return
	case !ended:
		r.violate("%s: worker A, %s, had not ended after %s; its wait bound is %s: a wait for a connection without its bound",
			famPoolHeld, h.how, took.Round(time.Millisecond), simHeldWaitBound)
	case r.sc.variant == simPoolAtClaim && took > simPoolAtClaimAllowed:
		r.violate("%s %s: worker A, %s, took %s to end with %d failed effects; its wait bound is %s, %s allowed: a wait past its bound",
			famPoolHeld, simPoolAtClaim, h.how, took.Round(time.Millisecond), len(out.effects), simHeldWaitBound, simPoolAtClaimAllowed)
	}
	// Once a call has waited out its bound for a connection, its batch's
	// later calls are not made: each would wait its own bounds on the same
	// pool. A's calls, one at a time, all meet the hold in the batch it
	// began in, and no later batch of A's gets a connection to claim with.
	if n := r.connWaitsSince(task.inc.id, h.began); r.sc.variant == simPoolAtClaim && n > 1 {
		r.violate("%s %s: %d of worker A's calls each waited out its bound for a connection, %s: once one has, its batch's later calls must not wait on the same pool again (two bounds a call: with the default bound, a minute an effect)",
			famPoolHeld, simPoolAtClaim, n, h.how)
	}
	if !slices.ContainsFunc(out.errs, waitedForConnection) {
		r.violate("%s: worker A, %s, ended with %v; want a wait for a connection that ran out of its bound (idem.WaitError)", famPoolHeld, h.how, out.errs)
	}
	r.checkOnlyWaited(out, famPoolHeld+": worker A", h.how, "a connection")
	r.checkNoFailureRecords(phase, famPoolHeld, "worker A only waited for a connection")
}

// waitedForConnection reports whether err tells of a wait for a pool
// connection that ran out of its bound (an idem.WaitError).
func waitedForConnection(err error) bool {
	var we *idem.WaitError
	return errors.As(err, &we) && strings.Contains(we.What, "connection")
}

// awaitHold returns the hold A's incarnation takes in runContext, before
// its work. None within simHeldRecordBound: the arm is taken back, so no
// later hold comes that nobody would release; if runContext took it just
// before, its hold (bounded by simHeldRecordBound too) is waited for.
func (f *poolFamily[U]) awaitHold() *simPoolHold {
	deadline := time.Now().Add(simHeldRecordBound)
	for {
		if h := f.held.Load(); h != nil {
			return h
		}
		now := time.Now()
		if now.After(deadline) && f.arm.Swap(nil) != nil || now.After(deadline.Add(simHeldRecordBound)) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// simSlowOpen makes the connections an incarnation opens slower than any
// wait bound: each open waits until its own context ends, or until the
// family lets it go (release), then goes on on that context.
type simSlowOpen struct{ released chan struct{} }

// wait is the slow part of an open; simPoolHang bounds it whatever the
// open's context is (pgxpool opens on one an acquire's bound does not end).
func (s *simSlowOpen) wait(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.released:
	case <-time.After(simPoolHang):
	}
}

// startSlowOpens sets slow opens at *at for the incarnations begun from now
// on, until release.
func startSlowOpens(at *atomic.Pointer[simSlowOpen]) (release func()) {
	s := &simSlowOpen{released: make(chan struct{})}
	at.Store(s)
	var once sync.Once
	return func() {
		once.Do(func() {
			at.CompareAndSwap(s, nil)
			close(s.released)
		})
	}
}

// slowOpener is a scenario database whose incarnations' new connections
// can be made to open slowly (simSlowOpen).
type slowOpener interface{ slowOpens() (release func()) }

// poolHolder is a scenario database that can take every connection of
// its newest incarnation's pool.
type poolHolder interface {
	holdPool(ctx context.Context) (n int, release func(), err error)
}

func (d *simSQLiteDB) holdPool(ctx context.Context) (int, func(), error) {
	db := d.last.Load()
	if db == nil || d.conns <= 0 {
		return 0, func() {}, errors.New("no incarnation with a bounded pool")
	}
	ctx, cancel := context.WithTimeout(ctx, simHeldRecordBound)
	defer cancel()
	var conns []*sql.Conn
	release := func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	for range d.conns {
		c, err := db.Conn(ctx)
		if err != nil {
			release()
			return 0, func() {}, fmt.Errorf("take a connection: %w", err)
		}
		conns = append(conns, c)
	}
	return len(conns), release, nil
}

func (d *simPostgresDB) holdPool(ctx context.Context) (int, func(), error) {
	pool := d.last.Load()
	if pool == nil {
		return 0, func() {}, errors.New("no incarnation")
	}
	ctx, cancel := context.WithTimeout(ctx, simHeldRecordBound)
	defer cancel()
	var conns []*pgxpool.Conn
	release := func() {
		for _, c := range conns {
			c.Release()
		}
	}
	for range pool.Config().MaxConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			release()
			return 0, func() {}, fmt.Errorf("take a connection: %w", err)
		}
		conns = append(conns, c)
	}
	return len(conns), release, nil
}
