// Package idemriver runs generated jobs on River (github.com/riverqueue/river)
// over PostgreSQL. Generated packages call it only for jobs whose spec says
// river:, so a service that does not opt in links no River.
//
// The contract with River:
//
//   - A handed-in unit is one River job. The worker writes the units of the
//     River jobs it works at the same time, and reserves their effects, in
//     one transaction (group.go), commits, performs their effects, and only
//     then returns nil for each job; River's completer completes the jobs in
//     its own batches, outside that transaction (only River's stable API is
//     used). A crash before the commit leaves nothing written and the River
//     jobs running, to be rescued and retried. A crash after it, before River
//     completes the jobs, leaves them running too: River rescues and
//     redelivers them, and the redelivery finds each unit written (the same
//     payload: nothing is written again) and its effects done, or owed and
//     performed once, with the same key. That redelivery, which writes
//     nothing, is the price of not completing River jobs in our
//     transaction. What fails while the effects are performed stays owed in
//     the ledger; the periodic drain performs it, with the same key.
//   - Each job's outcome is its own unit's: a group whose write fails is
//     rolled back and its units written again, as a group or each alone, so
//     a unit that cannot be written fails or cancels its own job only, and
//     no job succeeds whose unit was not written. A Work call waits for its
//     group on its own job's ctx; when that ends first, it returns an error
//     saying where the job was stuck, and River retries it.
//   - River's retries are the ledger's attempts: a failed write is recorded as
//     an attempt of the unit (idem's parked units), the error returned so
//     River retries it; at the unit's max_attempts (also River's MaxAttempts)
//     the unit is parked and the River job cancelled. A payload mismatch, an
//     empty key and a parked unit are cancelled at once: no retry fixes them.
//   - Periodic jobs (Run for watermark and cursor jobs, Drain for every job)
//     hold a PostgreSQL advisory lock for their duration, so at most one runs
//     at a time across the fleet; a duplicate finds the lock taken and ends.
//     Their failures are left to the ledger and the next period, not to
//     River's retries.
package idemriver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Client is a River client over pgx, as the generated helpers take it.
type Client = river.Client[pgx.Tx]

// unitFailed turns a unit that was not written into River's answer.
func unitFailed[U any](ctx context.Context, e *idemrt.Engine[U], u U, err error, log *slog.Logger) error {
	var fe *idem.FailuresError
	switch {
	case !errors.As(err, &fe):
		return err // the call stopped (context, database): River retries
	case errors.Is(err, idem.ErrPayloadMismatch), errors.Is(err, idem.ErrEmptyKey), errors.Is(err, idem.ErrParked):
		log.Error("idemgen: River job cancelled: no retry can write this unit", slog.Any("err", err))
		return river.JobCancel(err)
	}
	if e.RecordUnitFailure(ctx, u, err) == idem.OutcomeParked {
		log.Error("idemgen: unit parked after max attempts; River job cancelled", slog.Any("err", err))
		return river.JobCancel(err)
	}
	return err
}

// InsertTx enqueues one River job per unit inside tx, the caller's
// transaction, so the units are queued exactly when the caller's own rows
// commit. The River job is unique by the unit's idempotency key while it is
// queued, running or completed: a copy of the same unit is skipped, and a
// copy with a different payload is refused with idem.ErrPayloadMismatch, as
// Process would. A unit whose key renders empty is refused (idem.ErrEmptyKey).
func InsertTx[U any, A river.JobArgs](ctx context.Context, client *Client, tx pgx.Tx, e *idemrt.Engine[U], units []U,
	args func(U) A, unitOf func(A) U) error {
	def := e.Job()
	for _, u := range units {
		key := def.KeyOf(u)
		if def.CheckKey != nil {
			if err := def.CheckKey(u); err != nil {
				return fmt.Errorf("job %q key %q: %w", def.Name, key, err)
			}
		}
		res, err := client.InsertTx(ctx, tx, args(u), nil)
		if err != nil {
			return fmt.Errorf("job %q key %q: enqueue: %w", def.Name, key, err)
		}
		if !res.UniqueSkippedAsDuplicate {
			continue
		}
		if err := checkQueued(def, res.Job, unitOf, func(string) (U, bool) { return u, true }); err != nil {
			return err
		}
	}
	return nil
}

// InsertManyTx enqueues the units as InsertTx does, with the same
// uniqueness, in one River InsertManyTx call (one statement) inside tx.
// Every key is checked before anything is enqueued: an empty key is refused
// (idem.ErrEmptyKey), and a key given twice in units is enqueued once, its
// copies skipped if they hold the same payload and refused with
// idem.ErrPayloadMismatch if not. A unit whose key River already holds is
// skipped, or refused with idem.ErrPayloadMismatch for a different payload;
// that refusal comes after the statement, so roll tx back on any error.
func InsertManyTx[U any, A river.JobArgs](ctx context.Context, client *Client, tx pgx.Tx, e *idemrt.Engine[U], units []U,
	args func(U) A, unitOf func(A) U) error {
	def := e.Job()
	first := make(map[string]int, len(units)) // key → index of its first unit
	params := make([]river.InsertManyParams, 0, len(units))
	for i, u := range units {
		key := def.KeyOf(u)
		if def.CheckKey != nil {
			if err := def.CheckKey(u); err != nil {
				return fmt.Errorf("job %q key %q: %w", def.Name, key, err)
			}
		}
		if j, ok := first[key]; ok {
			// River's statement cannot take one unique key twice; a copy
			// is settled here, against the copy that goes in.
			same, err := samePayload(def, units[j], u)
			if err != nil {
				return fmt.Errorf("job %q key %q: %w", def.Name, key, err)
			}
			if !same {
				return fmt.Errorf("job %q key %q: %w (units %d and %d of one call differ)", def.Name, key, idem.ErrPayloadMismatch, j, i)
			}
			continue
		}
		first[key] = i
		params = append(params, river.InsertManyParams{Args: args(u)})
	}
	if len(params) == 0 {
		return nil
	}
	res, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("job %q: enqueue %d units: %w", def.Name, len(params), err)
	}
	if len(res) != len(params) {
		return fmt.Errorf("job %q: River answered %d results for %d units", def.Name, len(res), len(params))
	}
	// River does not say which result is which unit's, so a skipped job
	// is matched to its unit by the key of the unit it holds.
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			continue
		}
		if err := checkQueued(def, r.Job, unitOf, func(key string) (U, bool) {
			i, ok := first[key]
			if !ok {
				var zero U
				return zero, false
			}
			return units[i], true
		}); err != nil {
			return err
		}
	}
	return nil
}

// checkQueued reads the unit a River job already held under a key and
// refuses the unit given for that key (unitFor) if their payloads differ.
func checkQueued[U any, A river.JobArgs](def *idemrt.Job[U], job *rivertype.JobRow, unitOf func(A) U, unitFor func(key string) (U, bool)) error {
	var queued A
	if err := json.Unmarshal(job.EncodedArgs, &queued); err != nil {
		return fmt.Errorf("job %q: read queued River job %d: %w", def.Name, job.ID, err)
	}
	held := unitOf(queued)
	key := def.KeyOf(held)
	u, ok := unitFor(key)
	if !ok {
		return fmt.Errorf("job %q key %q: River answered job %d, which holds none of the units", def.Name, key, job.ID)
	}
	same, err := samePayload(def, held, u)
	if err != nil {
		return fmt.Errorf("job %q key %q: %w", def.Name, key, err)
	}
	if !same {
		return fmt.Errorf("job %q key %q: %w (River job %d holds the first)", def.Name, key, idem.ErrPayloadMismatch, job.ID)
	}
	return nil
}

// samePayload compares two units of one key by value, as Process does.
func samePayload[U any](def *idemrt.Job[U], a, b U) (bool, error) {
	ja, errA := json.Marshal(def.Canonical(a))
	jb, errB := json.Marshal(def.Canonical(b))
	if err := errors.Join(errA, errB); err != nil {
		return false, fmt.Errorf("encode unit: %w", err)
	}
	return bytes.Equal(ja, jb), nil
}

// Exclusive runs fn while holding a session advisory lock named by name
// (and the connection's schema), so at most one such call runs at a time
// across every worker on the database; when another holds it, it returns
// at once without running fn. The lock is held by a pooled connection, so a
// worker that dies drops it with its session.
//
// A *idem.FailuresError from fn is logged and not returned: the ledger
// retries those units and effects on the next period, and River retrying the
// periodic job on top would only add runs.
func Exclusive(ctx context.Context, pool *pgxpool.Pool, name string, log *slog.Logger, fn func(ctx context.Context) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("%s: acquire: %w", name, err)
	}
	defer conn.Release()
	const lockKey = "hashtextextended(current_schema() || '.' || $1, 0)"
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock("+lockKey+")", name).Scan(&locked); err != nil {
		return fmt.Errorf("%s: advisory lock: %w", name, err)
	}
	if !locked {
		log.Debug("idemgen: periodic job skipped: another worker runs it", slog.String("river_kind", name))
		return nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock("+lockKey+")", name); err != nil {
			// Never hand a connection that may still hold the lock back to the pool.
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	err = fn(ctx)
	var fe *idem.FailuresError
	if errors.As(err, &fe) {
		log.Warn("idemgen: periodic job left failures to the ledger and the next period", slog.String("river_kind", name), slog.Any("err", err))
		return nil
	}
	return err
}

// PoolOf returns the pgx pool under a generated package's PostgreSQL store.
func PoolOf(st idem.Store) (*pgxpool.Pool, error) {
	if p, ok := st.(interface{ Pool() *pgxpool.Pool }); ok {
		return p.Pool(), nil
	}
	return nil, errors.New("River needs a PostgreSQL store (NewPostgresStore)")
}

// UnitWorker returns the River worker that processes the unit unitOf finds
// in each job's args, together with the jobs it works at the same time
// (group.go).
func UnitWorker[U any, A river.JobArgs](e *idemrt.Engine[U], unitOf func(A) U) (river.Worker[A], error) {
	pool, err := PoolOf(e.Store())
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", e.Job().Name, err)
	}
	return &unitWorker[U, A]{pool: pool, engine: e, unitOf: unitOf}, nil
}

// periodicWorker is the River worker of a periodic Run or Drain.
type periodicWorker[A river.JobArgs] struct {
	river.WorkerDefaults[A]
	pool *pgxpool.Pool
	log  *slog.Logger
	call func(context.Context) (idem.Report, error)
}

func (w *periodicWorker[A]) Work(ctx context.Context, job *river.Job[A]) error {
	return Exclusive(ctx, w.pool, job.Kind, w.log, func(ctx context.Context) error {
		_, err := w.call(ctx)
		return err
	})
}

// PeriodicWorker returns the River worker that calls call (a job's Run or
// Drain) under Exclusive, at most one at a time across the fleet.
func PeriodicWorker[U any, A river.JobArgs](e *idemrt.Engine[U], call func(context.Context) (idem.Report, error)) (river.Worker[A], error) {
	pool, err := PoolOf(e.Store())
	if err != nil {
		return nil, fmt.Errorf("job %q: %w", e.Job().Name, err)
	}
	return &periodicWorker[A]{pool: pool, log: e.Logger(), call: call}, nil
}

// AddUnitWorker adds UnitWorker(e, unitOf) to workers: the registration a
// generated package's `AddRiverWorkers` makes for each job of handed-in
// units.
func AddUnitWorker[U any, A river.JobArgs](workers *river.Workers, e *idemrt.Engine[U], unitOf func(A) U) error {
	w, err := UnitWorker(e, unitOf)
	return addWorker(workers, e, w, err)
}

// AddPeriodicWorker adds PeriodicWorker(e, call) to workers: the
// registration a generated package's `AddRiverWorkers` makes for each
// job's periodic Run and Drain.
func AddPeriodicWorker[U any, A river.JobArgs](workers *river.Workers, e *idemrt.Engine[U], call func(context.Context) (idem.Report, error)) error {
	w, err := PeriodicWorker[U, A](e, call)
	return addWorker(workers, e, w, err)
}

// addWorker adds w to workers unless making it failed (err, which names
// the job already); River's refusal (a kind added twice) names it too.
func addWorker[U any, A river.JobArgs](workers *river.Workers, e *idemrt.Engine[U], w river.Worker[A], err error) error {
	if err != nil {
		return err
	}
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return fmt.Errorf("job %q: %w", e.Job().Name, err)
	}
	return nil
}

// Periodic returns the periodic River job that enqueues args every every,
// and once when a leader starts, so a fleet that restarts often still runs it.
func Periodic(every time.Duration, args river.JobArgs) *river.PeriodicJob {
	return river.NewPeriodicJob(river.PeriodicInterval(every),
		func() (river.JobArgs, *river.InsertOpts) { return args, nil },
		&river.PeriodicJobOpts{ID: args.Kind(), RunOnStart: true})
}

// DefaultDrainEvery is how often the periodic drain runs when the caller
// does not say.
const DefaultDrainEvery = time.Minute
