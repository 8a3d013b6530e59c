package idemriver

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/idem"
)

// A unit worker writes the jobs it works at the same time in groups, as
// PostgreSQL commits concurrent transactions together. A job that arrives
// while maxGroups groups are being written waits, and the next group takes
// every job waiting then (up to maxGroup). A group keeps WorkUnit's
// contract for each of its jobs: one transaction writes the units, reserves
// their effects and completes their River jobs, then the effects are
// performed (one Perform for the group, while the next group is written)
// before the jobs' Work calls return. A job that finds the worker idle is a
// group of one, worked by WorkUnit itself. A group that cannot be written
// whole (a unit at fault, a job no longer running) is rolled back and each
// of its jobs is worked alone, so a failure stays its own job's.
const (
	maxGroups = 4   // groups written at once, each on a connection of its own
	maxGroup  = 256 // jobs in one group
)

// unitWorker is the River worker of a job of handed-in units.
type unitWorker[U any, A river.JobArgs] struct {
	river.WorkerDefaults[A]
	pool   *pgxpool.Pool
	engine *idem.Engine[U]
	unitOf func(A) U

	mu      sync.Mutex
	waiting []*groupJob[U, A] // jobs waiting for a group
	leaders int               // groups being written
}

// groupJob is one River job's Work call in a group.
type groupJob[U any, A river.JobArgs] struct {
	ctx  context.Context // the job's own: its River client is in it
	job  *river.Job[A]
	u    U
	turn chan turn // what its group made of it
}

// turn is a job's outcome in a group: lead the next group, work alone,
// or return err.
type turn struct {
	lead, alone bool
	err         error
}

func (w *unitWorker[U, A]) Work(ctx context.Context, job *river.Job[A]) error {
	me := &groupJob[U, A]{ctx: ctx, job: job, u: w.unitOf(job.Args), turn: make(chan turn, 1)}
	w.mu.Lock()
	lead := w.leaders < maxGroups
	if lead {
		w.leaders++
	} else {
		w.waiting = append(w.waiting, me)
	}
	w.mu.Unlock()
	t := turn{lead: true}
	if !lead {
		// Not on ctx: a group that took this job may have completed it,
		// and says so here.
		t = <-me.turn
	}
	if t.lead {
		t = w.lead(ctx, me)
	}
	if t.alone {
		return WorkUnit(ctx, w.pool, w.engine, job, me.u)
	}
	return t.err
}

// lead writes a group of me and the jobs waiting, hands the lead on to the
// next waiting job (or gives it up), performs the group's effects, tells
// each job its outcome and returns me's.
func (w *unitWorker[U, A]) lead(ctx context.Context, me *groupJob[U, A]) turn {
	runtime.Gosched() // let the jobs River hands out together arrive first
	w.mu.Lock()
	n := min(len(w.waiting), maxGroup-1)
	group := append([]*groupJob[U, A]{me}, w.waiting[:n]...)
	w.waiting = append([]*groupJob[U, A](nil), w.waiting[n:]...)
	w.mu.Unlock()

	var outcome turn
	var committed []U
	if len(group) == 1 {
		// Under the lead, so that the jobs arriving meanwhile gather.
		outcome.err = WorkUnit(ctx, w.pool, w.engine, me.job, me.u)
	} else {
		outcome, committed = w.writeGroup(ctx, group)
	}

	w.mu.Lock()
	if len(w.waiting) > 0 {
		next := w.waiting[0]
		w.waiting = w.waiting[1:]
		w.mu.Unlock()
		next.turn <- turn{lead: true}
	} else {
		w.leaders--
		w.mu.Unlock()
	}

	if len(committed) > 0 {
		// The River jobs are complete: nothing here may fail one. An
		// effect that does not end done stays owed for the drain.
		if rep, err := w.engine.Perform(ctx, committed); err != nil {
			w.engine.Logger().Warn("idemgen: units written; an effect did not end done and is left to the drain",
				slog.String("job", w.engine.Job().Name), slog.Int("river_jobs", len(group)), slog.Any("report", rep), slog.Any("err", err))
		}
	}
	for _, j := range group[1:] {
		j.turn <- outcome
	}
	return outcome
}

// writeGroup writes the group's units, reserves their effects and
// completes their River jobs in one transaction, on the leader's ctx. It
// returns the units whose effects are to be performed now: all of them
// once committed, none if a crash point stopped it after the commit.
func (w *unitWorker[U, A]) writeGroup(ctx context.Context, group []*groupJob[U, A]) (turn, []U) {
	e := w.engine
	log := e.Logger().With(slog.String("job", e.Job().Name), slog.Int("river_jobs", len(group)))
	units := make([]U, len(group))
	for i, j := range group {
		units[i] = j.u
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return turn{alone: true}, nil
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // a no-op after the commit
	if _, err := e.ProcessPgTx(ctx, tx, units); err != nil {
		log.Debug("idemgen: a group of River jobs was not written; each is worked alone", slog.Any("err", err))
		return turn{alone: true}, nil
	}
	if err := completeGroup(ctx, tx, group); err != nil {
		log.Debug("idemgen: a group of River jobs could not be completed; each is worked alone", slog.Any("err", err))
		return turn{alone: true}, nil
	}
	for _, u := range units {
		if err := e.Hit(ctx, idem.PointUnitBeforeCommit, e.Job().KeyOf(u)); err != nil {
			return turn{err: err}, nil
		}
	}
	if err := tx.Commit(ctx); err != nil {
		// Whether it committed is unknown: River retries each job, which
		// finds its unit written (deduped) or not.
		return turn{err: fmt.Errorf("job %q: commit a group of %d River jobs: %w", e.Job().Name, len(group), err)}, nil
	}
	for _, u := range units {
		if err := e.Hit(ctx, idem.PointUnitAfterCommit, e.Job().KeyOf(u)); err != nil {
			return turn{}, nil
		}
	}
	return turn{}, units
}

// completeGroup completes the group's River jobs in tx in one statement,
// the one River's JobCompleteTx runs for a single job, through the driver
// and pilot it uses. River marks Client.Driver and Client.Pilot as an
// unstable API: this package's tests run against the River in go.mod, and
// if the statement fails the group's jobs are worked alone, each completed
// by JobCompleteTx.
func completeGroup[U any, A river.JobArgs](ctx context.Context, tx pgx.Tx, group []*groupJob[U, A]) error {
	client := river.ClientFromContext[pgx.Tx](ctx)
	n := len(group)
	p := &riverdriver.JobSetStateIfRunningManyParams{
		ID: make([]int64, n), Attempt: make([]*int, n), ErrData: make([][]byte, n), FinalizedAt: make([]*time.Time, n),
		MetadataDoMerge: make([]bool, n), MetadataUpdates: make([][]byte, n), ScheduledAt: make([]*time.Time, n),
		Schema: client.Schema(), State: make([]rivertype.JobState, n),
	}
	now := time.Now().UTC()
	for i, j := range group {
		c := riverdriver.JobSetStateCompleted(j.job.ID, now, nil)
		p.ID[i], p.FinalizedAt[i], p.State[i] = c.ID, c.FinalizedAt, c.State
	}
	rows, err := client.Pilot().JobSetStateIfRunningMany(ctx, client.Driver().UnwrapExecutor(tx), p)
	if err != nil {
		return err
	}
	if len(rows) != n {
		return fmt.Errorf("River answered %d jobs for %d", len(rows), n)
	}
	for _, r := range rows {
		if r.State != rivertype.JobStateCompleted {
			return fmt.Errorf("River job %d is %s, not running", r.ID, r.State)
		}
	}
	return nil
}
