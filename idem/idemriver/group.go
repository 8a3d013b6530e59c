package idemriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// A unit worker writes the River jobs it works at the same time in groups.
// Each Work call joins the worker's queue and waits, on its own job's ctx,
// for its own outcome; up to maxGroups goroutines take every job queued
// (up to maxGroup at a time), write their units and reserve their effects
// in one transaction, leased to this worker already (ProcessPgTxLeased),
// commit, perform the group's effects in one PerformLeased with no claim,
// and hand each Work call its own unit's outcome. River jobs are never
// completed in that transaction: Work returns nil and River's completer
// completes them in its own batches (see the package doc for a crash in
// between). A group whose write fails is rolled back; its jobs' units that
// no retry can write (mismatch, empty key, parked) get their own outcome,
// and the rest are written again, as a group once more if nothing else
// failed, else each alone, so a failure is only its own job's.
const (
	maxGroups = 2    // groups written and performed at once, each on a connection of its own
	maxGroup  = 1000 // River jobs in one group
	// groupTimeout bounds a group's work when a job in it has no deadline
	// (River's JobTimeout -1); otherwise the group runs until the latest
	// deadline of its jobs, and groupGrace more.
	groupTimeout = time.Minute
	groupGrace   = time.Second
	// releaseTimeout bounds giving back a group's leases when it stops
	// after its commit.
	releaseTimeout = 5 * time.Second
	// A group waits while River's jobs still arrive, up to gatherFor.
	gatherPause = 200 * time.Microsecond
	gatherFor   = 2 * time.Millisecond
)

// unitWorker is the River worker of a job of handed-in units.
type unitWorker[U any, A river.JobArgs] struct {
	river.WorkerDefaults[A]
	pool   *pgxpool.Pool
	engine *idemrt.Engine[U]
	unitOf func(A) U

	mu      sync.Mutex
	waiting []*member[U] // Work calls no group has taken yet
	groups  int          // group goroutines running
}

// member is one Work call: one River job and its unit.
type member[U any] struct {
	ctx   context.Context // the job's own; a group's ctx keeps its values
	id    int64           // the River job's
	u     U
	since time.Time
	group *group      // the group that took it; nil while waiting (under the worker's mu)
	out   chan error  // its outcome, sent once
	left  atomic.Bool // its Work call returned on its ctx before an outcome
	res   error       // its outcome, set by its group
	set   bool        // res is set
}

// group is a group's ctx, and what a member waiting on it can say about
// where it is.
type group struct {
	size   int
	first  int64 // the River job id of its first member
	taken  time.Time
	stageN atomic.Int32
	ctx    context.Context
	cancel context.CancelFunc // once every member has left, nobody waits for the group
	live   atomic.Int32       // members still waiting for it
}

const (
	stageWriting int32 = iota
	stageWritingAlone
	stagePerforming
)

func (g *group) stage() string {
	switch g.stageN.Load() {
	case stageWritingAlone:
		return "writing its units one at a time after the group's write failed"
	case stagePerforming:
		return "performing the group's effects"
	}
	return "writing the group's units"
}

func (w *unitWorker[U, A]) Work(ctx context.Context, job *river.Job[A]) error {
	m := &member[U]{ctx: ctx, id: job.ID, u: w.unitOf(job.Args), since: time.Now(), out: make(chan error, 1)}
	w.mu.Lock()
	w.waiting = append(w.waiting, m)
	start := w.groups < maxGroups
	if start {
		w.groups++
	}
	w.mu.Unlock()
	if start {
		go w.runGroups()
	}
	select {
	case err := <-m.out:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-m.out: // its outcome came with the end of its ctx
		return err
	default:
	}
	return w.leave(ctx, m)
}

// leave ends a Work call whose ctx ended before its outcome came, with an
// error saying where its job was stuck; River retries the job, and the
// retry finds its unit written or not. A job no group took yet is taken
// out of the queue.
func (w *unitWorker[U, A]) leave(ctx context.Context, m *member[U]) error {
	m.left.Store(true)
	e := w.engine
	key := e.Job().KeyOf(m.u)
	w.mu.Lock()
	g := m.group
	queued := len(w.waiting)
	if g == nil {
		w.waiting = slices.DeleteFunc(w.waiting, func(o *member[U]) bool { return o == m })
	}
	w.mu.Unlock()
	if g != nil && g.live.Add(-1) == 0 {
		g.cancel() // what it wrote, if it committed, the jobs' retries find
	}
	waited := time.Since(m.since).Round(time.Millisecond)
	if g == nil {
		return fmt.Errorf("job %q key %q: River job %d waited %v for a group to take it (%d groups busy, %d jobs queued): %w",
			e.Job().Name, key, m.id, waited, maxGroups, queued, context.Cause(ctx))
	}
	return fmt.Errorf("job %q key %q: River job %d waited %v for its group of %d (first River job %d, taken %v ago), stuck %s: %w",
		e.Job().Name, key, m.id, waited, g.size, g.first, time.Since(g.taken).Round(time.Millisecond), g.stage(), context.Cause(ctx))
}

// runGroups takes every job queued as a group and works it, until none is
// queued.
func (w *unitWorker[U, A]) runGroups() {
	for {
		w.gather()
		w.mu.Lock()
		n := min(len(w.waiting), maxGroup)
		if n == 0 {
			w.groups--
			w.mu.Unlock()
			return
		}
		ms := slices.Clone(w.waiting[:n])
		w.waiting = slices.Delete(w.waiting, 0, n)
		g := &group{size: n, first: ms[0].id, taken: time.Now()}
		g.ctx, g.cancel = groupContext(ms)
		g.live.Store(int32(n))
		for _, m := range ms {
			m.group = g
		}
		w.mu.Unlock()
		w.workGroup(ms, g)
	}
}

// gather lets the jobs River hands out together (one fetch starts them
// all at once) join the queue before a group takes it: it waits while the
// queue grows, gatherPause at a time, at most gatherFor in all.
func (w *unitWorker[U, A]) gather() {
	runtime.Gosched()
	queued := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.waiting)
	}
	n := queued()
	for waited := time.Duration(0); waited < gatherFor && n < maxGroup; waited += gatherPause {
		time.Sleep(gatherPause)
		m := queued()
		if m == n {
			return
		}
		n = m
	}
}

// groupContext is the ctx a group works on: the values of its first job's
// ctx, none of its cancellation (one job cancelled, or timed out, must not
// fail the others), and the latest deadline of its jobs (or groupTimeout
// if one has none) and groupGrace more, so that each job's own ctx ends
// first and its Work call says where it was stuck; it is cancelled once
// every job of the group has left (leave). A Work call waits for its
// outcome on its own ctx.
func groupContext[U any](ms []*member[U]) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, m := range ms {
		d, ok := m.ctx.Deadline()
		if !ok {
			latest = time.Now().Add(groupTimeout)
			break
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.WithoutCancel(ms[0].ctx), latest.Add(groupGrace))
}

// workGroup writes the group, performs what its committed units owe, and
// hands every member its outcome.
func (w *unitWorker[U, A]) workGroup(ms []*member[U], g *group) {
	ctx := g.ctx
	defer g.cancel()
	live := slices.DeleteFunc(slices.Clone(ms), func(m *member[U]) bool {
		if m.left.Load() {
			m.settle(errors.New("left before its group took it")) // nobody reads it
			return true
		}
		return false
	})
	committed, leases := writeUnits(ctx, w.pool, w.engine, live, g, 0)
	if len(committed) > 0 {
		g.stageN.Store(stagePerforming)
		perform(ctx, w.engine, committed, leases)
	}
	for _, m := range ms {
		if !m.set {
			// Every path of writeUnits settles its members; this is a
			// guard, never a success.
			m.settle(fmt.Errorf("job %q: River job %d: its group of %d ended without an outcome for it", w.engine.Job().Name, m.id, g.size))
		}
		m.out <- m.res
	}
}

func (m *member[U]) settle(err error) {
	m.res, m.set = err, true
}

// perform performs the effects the committed units owe, under the leases
// their transactions took. The units are written and their River jobs
// will complete: nothing here may fail one. An effect that does not end
// done stays owed, for the periodic drain.
func perform[U any](ctx context.Context, e *idemrt.Engine[U], committed []*member[U], leases idemrt.Leases) {
	units := make([]U, len(committed))
	for i, m := range committed {
		units[i] = m.u
	}
	if ctx.Err() != nil {
		// Every job of the group left (River's JobTimeout) before a call
		// started: the retries find the effects at once.
		giveBack(ctx, e, leases)
		return
	}
	if rep, err := e.PerformLeased(ctx, units, leases); err != nil {
		e.Logger().Warn("idemgen: units written; an effect did not end done and is left to the drain",
			slog.String("job", e.Job().Name), slog.Int("river_jobs", len(units)), slog.Any("report", rep), slog.Any("err", err))
	}
}

// giveBack gives back the leases of a committed group that performs
// nothing after all (idemrt.Engine.ReleaseLeases), within releaseTimeout
// whatever ctx; if it cannot, the effects wait for the leases to end.
func giveBack[U any](ctx context.Context, e *idemrt.Engine[U], leases idemrt.Leases) {
	release, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if err := e.ReleaseLeases(release, leases); err != nil {
		e.Logger().Warn("idemgen: a group stopped after its commit; its effects wait for their leases to end",
			slog.String("job", e.Job().Name), slog.Any("err", err))
	}
}

// writeUnits writes the members' units and reserves their effects in one
// transaction and commits it. It settles every member it does not return:
// it returns (with their outcome nil) those whose unit is written and
// committed, the ones whose effects are to be performed now. A failed group
// is rolled back; a member whose unit no retry can write gets its own
// outcome (unitFailed), and the others are written again: as a group once
// more (tries < 1) when every failure was of that kind, else each alone, so
// that whatever failed is its own job's outcome only. A member is returned
// only from a transaction that committed with its unit written or deduped;
// the leases returned are what those transactions reserved leased to this
// worker (idemrt.Engine.ProcessPgTxLeased).
func writeUnits[U any](ctx context.Context, pool *pgxpool.Pool, e *idemrt.Engine[U], ms []*member[U], g *group, tries int) ([]*member[U], idemrt.Leases) {
	if len(ms) == 0 {
		return nil, nil
	}
	def := e.Job()
	units := make([]U, len(ms))
	for i, m := range ms {
		units[i] = m.u
	}
	fail := func(err error) ([]*member[U], idemrt.Leases) {
		for _, m := range ms {
			m.settle(err)
		}
		return nil, nil
	}
	where := func() string {
		if len(ms) == 1 {
			return fmt.Sprintf("job %q key %q: River job %d", def.Name, def.KeyOf(ms[0].u), ms[0].id)
		}
		return fmt.Sprintf("job %q: a group of %d River jobs (first %d)", def.Name, len(ms), ms[0].id)
	}
	// Bounded: a connection and every lock within the job's wait bound.
	tx, err := idemrt.PgBegin(ctx, pool)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", where(), err))
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after the commit
	rep, leases, err := e.ProcessPgTxLeased(ctx, tx, units)
	if err == nil {
		for _, u := range units {
			if err := hooks.Of(e).Hit(ctx, hooks.PointUnitBeforeCommit, def.KeyOf(u)); err != nil {
				return fail(err) // nothing is written: River retries
			}
		}
		if err := tx.Commit(ctx); err != nil {
			// Whether it committed is unknown: River retries each job,
			// which finds its unit written or not.
			return fail(fmt.Errorf("%s: commit: %w", where(), err))
		}
		for _, u := range units {
			if err := hooks.Of(e).Hit(ctx, hooks.PointUnitAfterCommit, def.KeyOf(u)); err != nil {
				// Written, but this worker stops here: River retries each
				// job, whose retry finds its unit written and performs
				// what it owes, once the leases are given back (or, if
				// that fails too, once they end).
				giveBack(ctx, e, leases)
				return fail(err)
			}
		}
		for _, m := range ms {
			m.settle(nil)
		}
		return ms, leases
	}
	_ = tx.Rollback(context.WithoutCancel(ctx))
	log := e.Logger().With(slog.String("job", def.Name))
	var fe *idem.FailuresError
	if len(ms) == 1 || !errors.As(err, &fe) || len(rep.Units) != len(ms) || ctx.Err() != nil {
		// One job, or a call that stopped (context, database): each
		// member's own answer, as one job alone would get it.
		for _, m := range ms {
			m.settle(unitFailed(ctx, e, m.u, err, log.With(slog.String("key", def.KeyOf(m.u)), slog.Int64("river_job", m.id))))
		}
		return nil, nil
	}
	log.Debug("idemgen: a group of River jobs was rolled back; each job's unit gets its own outcome",
		slog.Int("river_jobs", len(ms)), slog.Int64("first_river_job", ms[0].id), slog.Any("err", err))
	var again []*member[U]
	alone := tries >= 1
	for i, m := range ms {
		ur := rep.Units[i]
		switch {
		case ur.Err == nil:
			again = append(again, m)
		case errors.Is(ur.Err, idem.ErrPayloadMismatch), errors.Is(ur.Err, idem.ErrEmptyKey), errors.Is(ur.Err, idem.ErrParked):
			// Its own, whatever the others: cancelled.
			one := &idem.FailuresError{Job: def.Name, Count: 1, Failures: []idem.Failure{{Key: ur.Key, Err: ur.Err}}}
			m.settle(unitFailed(ctx, e, m.u, one, log.With(slog.String("key", ur.Key), slog.Int64("river_job", m.id))))
		default:
			// A write that failed, or that failed with another unit's:
			// which is not known, so each is written alone.
			alone = true
			again = append(again, m)
		}
	}
	if !alone {
		return writeUnits(ctx, pool, e, again, g, tries+1)
	}
	g.stageN.Store(stageWritingAlone)
	log.Debug("idemgen: a group of River jobs was not written; each is written alone", slog.Int("river_jobs", len(again)), slog.Any("err", err))
	var out []*member[U]
	outLeases := idemrt.Leases{}
	for _, m := range again {
		written, l := writeUnits(ctx, pool, e, []*member[U]{m}, g, tries+1)
		out = append(out, written...)
		maps.Copy(outLeases, l)
	}
	return out, outLeases
}

// WorkUnit is the body of a unit worker for one River job alone: it writes
// u, job's unit, and reserves its effects in one transaction, commits, and
// performs the effects. It does not complete the River job: River does
// when it returns nil.
func WorkUnit[U any, A river.JobArgs](ctx context.Context, pool *pgxpool.Pool, e *idemrt.Engine[U], job *river.Job[A], u U) error {
	m := &member[U]{ctx: ctx, id: job.ID, u: u, since: time.Now()}
	g := &group{size: 1, first: job.ID, taken: m.since}
	if committed, leases := writeUnits(ctx, pool, e, []*member[U]{m}, g, 0); len(committed) > 0 {
		perform(ctx, e, committed, leases)
	}
	return m.res
}
