package crashsim

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
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
// ends.

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
	// arm: the next incarnation's pool is held as its work begins; held
	// is then the hold (release, and when it began).
	arm  atomic.Bool
	held atomic.Pointer[simPoolHold]
}

// simPoolHold is a pool whose every connection is taken.
type simPoolHold struct {
	began   time.Time
	n       int
	err     error
	release func()
}

func (*poolFamily[U]) about() familyAbout {
	return familyAbout{name: famPoolHeld, long: 500 * time.Millisecond, guarantees: []int{5, 8},
		what: "worker A's process has a pool of two connections, and both are held by others while A " +
			"runs its first phase under a wait bound of 150 ms: A ends within its bound (and 2 s of " +
			"slack) with the bounded-wait error (`idem.WaitError`, busy), never a hang until a " +
			"connection comes back, and counts no failed attempt and parks nothing; then the " +
			"connections go back and the run converges"}
}

func (*poolFamily[U]) plan(*discovery[U]) []simScenario {
	return []simScenario{newScenario(famPoolHeld)}
}

// setup: each incarnation's pool has simPoolConns connections.
func (*poolFamily[U]) setup(r *simRun[U]) {
	if l, ok := r.db.(connLimiter); ok {
		l.limitConns(simPoolConns)
	}
}

// runContext holds the armed incarnation's whole pool before its work
// begins.
func (f *poolFamily[U]) runContext(r *simRun[U], ctx context.Context, _ *simInc) context.Context {
	if !f.arm.CompareAndSwap(true, false) {
		return ctx
	}
	h := &simPoolHold{release: func() {}}
	if holder, ok := r.db.(poolHolder); ok {
		h.n, h.release, h.err = holder.holdPool(ctx)
	} else {
		h.err = errors.New("the scenario's database cannot hold its pool")
	}
	h.began = time.Now()
	f.held.Store(h)
	return ctx
}

// playPhase: phase 0 first runs with the pool held, then as usual.
func (f *poolFamily[U]) playPhase(r *simRun[U], phase int) {
	if phase == 0 {
		f.playHeld(r, phase)
	}
	r.runPhase(phase, phasePlay{})
}

// playHeld runs A on a pool others hold, and judges how its wait ended.
func (f *poolFamily[U]) playHeld(r *simRun[U], phase int) {
	f.arm.Store(true)
	task := r.start(phase, workHeld, nil)
	var out simOutcome
	ended := false
	// A's bound runs from the hold (runContext), not from the task's
	// start: under load an incarnation took seconds to come up, the hold
	// came after this wait had given up, and nothing released it (the
	// pool's Close then waited for its connections until the watchdog).
	h := f.awaitHold()
	if h != nil {
		select {
		case out = <-task.done:
			ended = true
		case <-time.After(time.Until(h.began.Add(simHeldWaitBound + simPoolSlack))):
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
		r.violate("%s: worker A, its pool's %d connections held, had not ended after %s; its wait bound is %s: a wait for a connection without its bound",
			famPoolHeld, h.n, took.Round(time.Millisecond), simHeldWaitBound)
	}
	var we *idem.WaitError
	waited := false
	for _, err := range out.errs {
		if errors.As(err, &we) && strings.Contains(we.What, "connection") {
			waited = true
		}
	}
	if !waited {
		r.violate("%s: worker A, its pool's %d connections held, ended with %v; want a wait for a connection that ran out of its bound (idem.WaitError)", famPoolHeld, h.n, out.errs)
	}
	r.checkOnlyWaited(out, famPoolHeld+": worker A", "its pool's connections were held", "a connection")
	r.checkNoFailureRecords(phase, famPoolHeld, "worker A only waited for a connection")
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
		if now.After(deadline) && f.arm.CompareAndSwap(true, false) || now.After(deadline.Add(simHeldRecordBound)) {
			return nil
		}
		time.Sleep(5 * time.Millisecond)
	}
}

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
