package idemrt

// Batches. A page of units is written in batches of at most the batch size
// (WithBatchSize), each in one transaction of a few statements per table:
// the parked-unit lookup, the handed-in key records, the destination write
// with its guards, the version-bump lookup and the effect reservations.
// On PostgreSQL each is one statement over arrays (a lone unit's
// destination write takes its own statement, see write); SQLite runs the
// single statements in the batch's transaction. The effects the batch decided are
// performed after it commits, concurrently (WithEffectConcurrency); a job
// without effects on PostgreSQL commits batches while the next one is
// fetched, prepared and written, up to five transactions at once
// (WithWriteAhead).
//
// Failures stay local: a unit found at fault (its own statement failed,
// or the crash hook failed it) is failed alone and the batch committed
// again without it; a statement that fails without naming a unit splits
// the batch in halves, down to the unit that fails.
//
// This file holds the batch loop, its commit and how its units end; the
// statements inside a batch's transaction are in batchwrite.go, and the
// staged writes (one transaction for a page or window) in staged.go.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// applied is what applying a batch tells the progress logic.
type applied struct {
	failed int
	// oldestFailed is the smallest watermark value among failed units.
	oldestFailed time.Time
}

func (a *applied) add(o applied) {
	a.failed += o.failed
	if !o.oldestFailed.IsZero() && (a.oldestFailed.IsZero() || o.oldestFailed.Before(a.oldestFailed)) {
		a.oldestFailed = o.oldestFailed
	}
}

// item is one unit on its way through a batch.
type item[U any] struct {
	u       U
	key     string
	payload []byte
	hash    []byte  // sha256 of payload
	outcome Outcome // what its write did, once the transaction commits
	fresh   bool    // a handed-in key seen for the first time: effects decide as inserted
	older   bool    // a handed-in replay new to the ledger that newer_wins kept out of the row: no effect
	err     error   // the unit's own failure, which does not fail the batch
	owes    []int   // indexes of the effects reserved for it
	// leased are the effect keys its reservations added leased to this
	// worker (reserve), with the lease's end: once the transaction
	// commits, they are performed without a claim.
	leased map[string]time.Time
	result UnitResult
	done   bool // result is final
}

// unitFault is a transaction's failure that one unit caused.
type unitFault[U any] struct {
	it  *item[U]
	err error
}

func (f *unitFault[U]) Error() string { return f.err.Error() }
func (f *unitFault[U]) Unwrap() error { return f.err }

// apply handles a page of units in batches, then the effects each batch
// decided; with collect, Report.Units gets every unit in order. What the
// progress logic needs is added to res once the batches have ended, which
// with write-ahead is after runState.awaitInFlight.
func (e *Engine[U]) apply(ctx context.Context, units []U, rep *runState, collect bool, markOf func(U) time.Time, res *applied) error {
	for len(units) > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := min(len(units), e.opt.batchSize)
		ctx := ctx
		if obs := e.opt.observer; obs != nil {
			// The batch's span ends with its units, after its effects.
			ctx = obs.BatchStart(ctx, e.def.Name, n)
		}
		// A batch written ahead counts in its own report until it ends.
		ahead, own := e.opt.writeAhead, rep
		if ahead {
			own = &runState{}
		}
		items := e.prepare(units[:n], own)
		// stop ends the batch before its transaction, at a crash point
		// that failed.
		stop := func(err error) error {
			if ahead {
				rep.add(own)
			}
			if obs := e.opt.observer; obs != nil {
				obs.BatchEnd(ctx, e.def.Name, err)
			}
			return err
		}
		if err := e.hit(ctx, hooks.PointBatchBegin, items[0].key); err != nil {
			return stop(err)
		}
		if ahead && writing(rep, items) {
			// A batch written ahead and still in flight writes one of
			// these keys: wait for them all, so a key's writes commit in
			// the order they were handed in.
			if err := e.hit(ctx, hooks.PointBatchAwait, items[0].key); err != nil {
				return stop(err)
			}
			rep.awaitInFlight()
		}
		if ahead {
			e.writeAhead(ctx, items, rep, own, collect, markOf, res)
		} else {
			e.commit(ctx, items, rep)
			res.add(failedIn(items, markOf))
			e.endBatch(ctx, items, rep, collect)
		}
		units = units[n:]
	}
	return nil
}

// failedIn is what the progress logic learns from a batch's failed units.
func failedIn[U any](items []*item[U], markOf func(U) time.Time) (res applied) {
	for _, it := range items {
		if o := it.result.Outcome; o == OutcomeFailed || o == OutcomeMismatch {
			res.failed++
			if markOf != nil {
				res.add(applied{oldestFailed: markOf(it.u)})
			}
		}
	}
	return res
}

// writeAhead commits a prepared batch on its own goroutine, counting into
// own, and returns once fewer than writeAheadDepth batches' transactions
// are open, this one included, so that the next makes at most that many:
// the oldest end first. A batch that shares a unit key with any batch in
// flight has waited for them all before (the caller), so a key's writes
// commit in order. Counting, progress and the units' ends happen
// here, on the caller's goroutine, one batch after another, in order
// (runState.keepInFlight).
func (e *Engine[U]) writeAhead(ctx context.Context, items []*item[U], rep *runState, own *runState, collect bool, markOf func(U) time.Time, res *applied) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.commit(ctx, items, own)
	}()
	keys := make(map[string]bool, len(items))
	for _, it := range items {
		keys[it.key] = true
	}
	rep.inFlight = &inFlight{before: rep.inFlight, keys: keys, join: func() {
		<-done
		rep.add(own)
		res.add(failedIn(items, markOf))
		for _, it := range items {
			e.unitEnded(ctx, rep, it.result, collect)
		}
		if obs := e.opt.observer; obs != nil {
			obs.BatchEnd(ctx, e.def.Name, nil)
		}
	}}
	// The next batch's transaction opens once this returns.
	rep.keepInFlight(e.opt.writeAheadDepth - 1)
}

// writing reports whether a batch written ahead and still in flight
// writes any of items' unit keys.
func writing[U any](rep *runState, items []*item[U]) bool {
	for f := rep.inFlight; f != nil; f = f.before {
		if slices.ContainsFunc(items, func(it *item[U]) bool { return f.keys[it.key] }) {
			return true
		}
	}
	return false
}

// endBatch performs what a committed batch owes and ends its units. With
// effects one at a time it does so before it returns. With more at once,
// the calls go on while the next batch is written and claimed, and the
// next batch's calls start as slots free up: the batch's units end once
// the next batch's calls have started, or when the call ends
// (runState.awaitInFlight). At most two batches' calls are in flight, within
// one bound, and only their goroutines touch them; counting is done here,
// a batch after the one before.
func (e *Engine[U]) endBatch(ctx context.Context, items []*item[U], rep *runState, collect bool) {
	end := func() {
		for _, it := range items {
			e.unitEnded(ctx, rep, it.result, collect)
		}
		if obs := e.opt.observer; obs != nil {
			obs.BatchEnd(ctx, e.def.Name, nil)
		}
	}
	if e.opt.effectConcurrency <= 1 {
		e.performOwed(ctx, items, rep)
		end()
		return
	}
	// Keys the batch in flight performs wait for it: they are counted
	// as repeats once it has ended, as one batch after another would.
	var busy map[string]bool
	if rep.inFlight != nil {
		busy = rep.inFlight.keys
	}
	o := e.claimOwed(ctx, items, rep.tried, busy)
	done := make(chan struct{})
	slots := e.slots
	go func() {
		defer close(done)
		e.callAll(ctx, o.claimed, slots)
	}()
	rep.awaitInFlight() // the batch before, whose last calls share the slots
	rep.inFlight = &inFlight{keys: o.runKeys(), join: func() {
		<-done
		e.tally(ctx, o, rep)
		end()
	}}
}

// prepare keys and encodes units; one whose key renders empty fails here,
// before any statement.
func (e *Engine[U]) prepare(units []U, rep *runState) []*item[U] {
	items := make([]*item[U], len(units))
	for i, u := range units {
		it := &item[U]{u: u, key: e.def.KeyOf(u)}
		items[i] = it
		err := error(nil)
		if e.def.CheckKey != nil {
			err = e.def.CheckKey(u)
		}
		// A job without effects or handed-in keys needs the payload only
		// for a key found in the parked table.
		if err == nil && (e.def.CheckSeen || len(e.def.Effects) > 0) {
			err = e.encode(it)
		}
		if err != nil {
			e.failItem(it, OutcomeFailed, err, rep)
		}
	}
	return items
}

// encode fills in the unit's payload and its hash, once.
func (e *Engine[U]) encode(it *item[U]) error {
	if it.payload != nil {
		return nil
	}
	p, err := e.payload(it.u)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(p)
	it.payload, it.hash = p, sum[:]
	return nil
}

// commit writes the items not yet ended in one transaction and ends them.
func (e *Engine[U]) commit(ctx context.Context, items []*item[U], rep *runState) {
	items = slices.DeleteFunc(slices.Clone(items), func(it *item[U]) bool { return it.done })
	if len(items) == 0 {
		return
	}
	err := e.st.InTx(ctx, func(q Querier) error { return e.writeBatch(ctx, q, items, true) })
	if err == nil {
		if err = e.hit(ctx, hooks.PointUnitAfterCommit, items[0].key); err != nil {
			// Committed, but this worker cannot know it: each unit
			// counts as failed, and the next run finds it written. It
			// may be written, so this is no attempt toward parking it.
			for _, it := range items {
				e.failItem(it, e.unknownOutcome(ctx, it.u, it.key, err, e.unitLog(it)), err, rep)
			}
			return
		}
		for _, it := range items {
			e.settle(it, rep)
		}
		return
	}
	var fault *unitFault[U]
	switch {
	case errors.As(err, &fault):
		e.failItem(fault.it, e.failedOutcome(ctx, fault.it.u, fault.it.key, fault.err, e.unitLog(fault.it)), fault.err, rep)
		e.commit(ctx, items, rep) // the others, without it
	case len(items) == 1 || ctx.Err() != nil || errors.Is(err, ErrBusy):
		// A wait past its bound is the database's state, not a unit's
		// fault: halving the batch would only wait again.
		for _, it := range items {
			e.failItem(it, e.failedOutcome(ctx, it.u, it.key, err, e.unitLog(it)), err, rep)
		}
	default:
		half := len(items) / 2
		e.commit(ctx, items[:half], rep)
		e.commit(ctx, items[half:], rep)
	}
}

func (e *Engine[U]) unitLog(it *item[U]) *slog.Logger {
	return e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", it.key))
}

// failItem ends a unit that was not written.
func (e *Engine[U]) failItem(it *item[U], o Outcome, cause error, rep *runState) {
	it.result = e.failUnit(it.key, o, unitError(e.def.Name, it.key, o, cause), rep, e.unitLog(it))
	it.done = true
}

// settle ends a unit whose batch committed.
func (e *Engine[U]) settle(it *item[U], rep *runState) {
	it.done = true
	switch {
	case it.outcome == OutcomeParked:
		it.result = e.skipParked(it.key, rep, e.unitLog(it))
	case it.err != nil:
		e.failItem(it, it.outcome, it.err, rep)
	default:
		it.result = UnitResult{Key: it.key, Outcome: it.outcome}
		rep.countUnit(it.outcome)
		// A logger per unit only when it would print: most units are healthy.
		if e.opt.log.Enabled(context.Background(), slog.LevelDebug) {
			e.unitLog(it).Debug("idemgen: unit applied", slog.String("outcome", string(it.outcome)))
		}
	}
}

func (e *Engine[U]) failUnit(key string, o Outcome, err error, rep *runState, log *slog.Logger) UnitResult {
	rep.countUnit(o)
	log.Warn("idemgen: unit failed", slog.String("outcome", string(o)), slog.Any("err", err))
	ur := UnitResult{Key: key, Outcome: o, Err: err}
	rep.unitFailed(ur)
	return ur
}

// unitError is the error of a unit that ended o: it names the job and the
// key and wraps the sentinel callers test with errors.Is, and the cause.
func unitError(job, key string, o Outcome, cause error) error {
	switch {
	case o == OutcomeMismatch, errors.Is(cause, ErrEmptyKey):
		return fmt.Errorf("job %q key %q: %w", job, key, cause)
	case o == OutcomeParked:
		return fmt.Errorf("job %q key %q: %w: %w", job, key, ErrParked, cause)
	}
	return fmt.Errorf("job %q key %q: %w: %w", job, key, ErrWriteFailed, cause)
}
