package idemrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Engine runs one job over one store.
type Engine[U any] struct {
	def *Job[U]
	st  Store
	opt options
	// slots bound the provider calls in flight across every call of the
	// engine at once (WithEffectConcurrency).
	slots chan struct{}
	// limits are the fleet-wide bounds of the effects that have any
	// (limits.go), by effect name; an effect steered by hand (steer.go)
	// joins them, under limitsMu.
	limitsMu sync.Mutex
	limits   map[string]*fleetLimit
	steer    steerCache
	// batchMetRows says the last batch write met a row already there
	// (an outcome other than inserted): the next skips PgInsertNew's try.
	batchMetRows atomic.Bool
}

// NewEngine is what every generated job constructor calls. It refuses
// options that mean nothing for the job's source, rather than ignore them.
func NewEngine[U any](def *Job[U], st Store, opts []Option) (*Engine[U], error) {
	var given options // what the caller set, before defaults
	for _, opt := range opts {
		opt(&given)
	}
	switch {
	case !given.start.IsZero() && def.MarkOf == nil:
		return nil, errors.New("WithStart sets where a watermark job's first window begins; this job has no watermark")
	case given.maxPages != 0 && def.CheckSeen:
		return nil, errors.New("WithMaxPages bounds the pages a run fetches; this job's units are handed in")
	}
	o := newOptions(opts)
	if edit, ok := o.hooks.JobEdit.(func(*Job[U])); ok {
		edit(def)
	}
	// Write-ahead is for a job without effects (one with effects overlaps
	// its calls with the next batch instead, endBatch), on a store that
	// writes concurrently.
	if cw, ok := st.(concurrentWriter); ok {
		o.writeAheadDepth = cw.ConcurrentWrites()
	}
	o.writeAhead = o.writeAhead && len(def.Effects) == 0 && o.writeAheadDepth >= 2
	o.waitBound = jobWaitBound(def, o.waitBound)
	e := &Engine[U]{def: def, st: st, opt: o, slots: make(chan struct{}, o.effectConcurrency), limits: newFleetLimits(def)}
	if o.observer != nil {
		o.observer.Watch(def.Name, e.backlog)
	}
	return e, nil
}

// RunWatermark is a scheduled watermark run: owed effects first, then the
// window since the stored mark minus overlap.
func (e *Engine[U]) RunWatermark(ctx context.Context, overlap time.Duration,
	fetch func(context.Context, Window, string) ([]U, string, error), markOf func(U) time.Time) (Report, error) {
	return e.run(ctx, "run", false, func(ctx context.Context, rep *runState) error {
		if err := e.drain(ctx, decodeUnit[U], rep); err != nil {
			return err
		}
		if err := e.retryUnits(ctx, rep); err != nil {
			return err
		}
		w, err := e.nextWindow(ctx, overlap)
		if err != nil {
			return err
		}
		return e.runWindow(ctx, w, true, fetch, markOf, rep)
	})
}

// backfill re-runs a past window through the same keys and ledger; it never moves progress.
func (e *Engine[U]) Backfill(ctx context.Context, w Window,
	fetch func(context.Context, Window, string) ([]U, string, error), markOf func(U) time.Time) (Report, error) {
	return e.run(ctx, "backfill", false, func(ctx context.Context, rep *runState) error {
		return e.runWindow(ctx, w, false, fetch, markOf, rep)
	})
}

// RunCursor is a scheduled cursor run: owed effects first, then pages from the stored cursor.
func (e *Engine[U]) RunCursor(ctx context.Context, fetch func(context.Context, string) ([]U, string, error)) (Report, error) {
	return e.run(ctx, "run", false, func(ctx context.Context, rep *runState) error {
		if err := e.drain(ctx, decodeUnit[U], rep); err != nil {
			return err
		}
		if err := e.retryUnits(ctx, rep); err != nil {
			return err
		}
		return e.runCursor(ctx, fetch, rep)
	})
}

// process applies handed-in units and reports each one.
func (e *Engine[U]) Process(ctx context.Context, units []U) (Report, error) {
	return e.run(ctx, "process", true, func(ctx context.Context, rep *runState) error {
		var err error
		if e.def.Stage {
			_, err = e.applyStaged(ctx, units, rep, true, nil)
		} else {
			err = e.apply(ctx, units, rep, true, nil, &applied{})
		}
		return err
	})
}

// Drain performs every owed effect of the job; for handed-in units
// (CheckSeen: source none, which has no Run) it then writes the units a
// person put back for retry.
func (e *Engine[U]) Drain(ctx context.Context) (Report, error) {
	return e.run(ctx, "drain", false, func(ctx context.Context, rep *runState) error {
		if err := e.drain(ctx, decodeUnit[U], rep); err != nil || !e.def.CheckSeen {
			return err
		}
		return e.retryUnits(ctx, rep)
	})
}

// Purge deletes done ledger rows older than each effect's retention, then,
// for handed-in units, the key records older than the job's longest
// retention whose ledger rows are all gone: a replay after that is
// processed as new. A job with an effect kept forever (no retention), or
// with no effects, keeps its key records.
//
// It deletes in batches of at most WithPurgeBatch rows (default 1000), each
// its own short statement, until a batch finds fewer, and paces them
// (WithPurgeShare: by default it waits three times as long as each batch
// took) so that jobs running beside it keep most of the database; it
// stops between batches when ctx is done, returning ctx's error and the rows deleted so
// far, so a purge can be cut short and run again. It returns the rows
// deleted in all. Run it on a timer (docs/operations.md) to purge
// continuously. Its statements wait for a connection or a lock no longer
// than the job's wait bound (WithWaitBound), as a run's do: a row a
// person's `ledger forget` holds makes the purge end busy, not wait.
func (e *Engine[U]) Purge(ctx context.Context) (int64, error) {
	ctx = withWaitBound(ctx, e.opt.waitBound)
	var total int64
	var longest time.Duration
	for _, fx := range e.def.Effects {
		if fx.Retention <= 0 {
			longest = -1
			continue
		}
		if longest >= 0 {
			longest = max(longest, fx.Retention)
		}
		before := e.opt.now().Add(-fx.Retention)
		n, err := purgeInBatches(ctx, e.opt.purgeBatch, e.opt.purgeShare, func(limit int32) (int64, error) {
			return e.st.Auto().Purge(ctx, e.def.Name, fx.Name, before, limit)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("job %q effect %q: purge: %w", e.def.Name, fx.Name, err)
		}
	}
	if e.def.CheckSeen && longest > 0 {
		before := e.opt.now().Add(-longest)
		n, err := purgeInBatches(ctx, e.opt.purgeBatch, e.opt.purgeShare, func(limit int32) (int64, error) {
			return e.st.Auto().PurgeSeen(ctx, e.def.Name, before, limit)
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("job %q: purge key records: %w", e.def.Name, err)
		}
	}
	return total, nil
}

// Job returns the definition the engine runs.
func (e *Engine[U]) Job() *Job[U] { return e.def }

// Store returns the store the engine runs over.
func (e *Engine[U]) Store() Store { return e.st }

func (e *Engine[U]) payload(u U) ([]byte, error) {
	b, err := json.Marshal(e.def.Canonical(u))
	if err != nil {
		return nil, fmt.Errorf("encode unit: %w", err)
	}
	return b, nil
}
