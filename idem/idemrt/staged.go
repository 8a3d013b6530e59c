package idemrt

// Staged writes (stage: true): a whole page or window published in one
// transaction with its progress save, and the culprit search that finds
// the unit which held a failed staged batch back.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// applyStaged writes a whole window or page in one transaction, together
// with the progress save, so readers never see half of it; the effects are
// performed after the commit. One failing unit fails the batch, which is
// retried whole on the next run: stage trades failure isolation for atomic
// publication. A handed-in unit whose key came before with another payload
// is no failure: it writes nothing, is answered as a mismatch, and the rest
// of the batch publishes (retrying could never change that answer).
func (e *Engine[U]) applyStaged(ctx context.Context, units []U, rep *runState, collect bool, save func(q Querier) error) (_ applied, err error) {
	if err := ctx.Err(); err != nil {
		return applied{}, err
	}
	if obs := e.opt.observer; obs != nil {
		ctx = obs.BatchStart(ctx, e.def.Name, len(units))
		defer func() { obs.BatchEnd(ctx, e.def.Name, err) }()
	}
	items := e.prepare(units, rep)
	live := slices.DeleteFunc(slices.Clone(items), func(it *item[U]) bool { return it.done })
	if err := e.hit(ctx, hooks.PointBatchBegin, ""); err != nil {
		return applied{}, err
	}
	err = e.st.InTx(ctx, func(q Querier) error {
		for chunk := range slices.Chunk(live, e.opt.batchSize) {
			// A mismatch is that unit's answer, not a failure: it wrote
			// nothing, and the rest of the batch publishes.
			if err := e.writeBatch(ctx, q, chunk, false); err != nil {
				return err
			}
		}
		if save != nil {
			if err := save(q); err != nil {
				return err
			}
		}
		return e.hit(ctx, hooks.PointUnitBeforeCommit, "")
	})
	if err == nil {
		err = e.hit(ctx, hooks.PointUnitAfterCommit, "")
	}
	if err != nil {
		var fault *unitFault[U]
		if !errors.As(err, &fault) && ctx.Err() == nil && !errors.Is(err, ErrBusy) {
			fault = e.culprit(ctx, live)
		}
		err = fmt.Errorf("job %q: staged batch of %d units not published: %w", e.def.Name, len(units), err)
		for _, it := range live {
			o := OutcomeFailed
			switch {
			case fault != nil && it == fault.it:
				o = e.failedOutcome(ctx, it.u, it.key, err, e.unitLog(it))
			case it.outcome == OutcomeParked:
				o = OutcomeParked // skipped before the batch failed: still parked
			}
			e.failItem(it, o, err, rep)
		}
	} else {
		for _, it := range live {
			e.settle(it, rep)
		}
		e.performOwed(ctx, items, rep)
	}
	res := failedIn(items, nil)
	for _, it := range items {
		e.unitEnded(ctx, rep, it.result, collect)
	}
	if err != nil {
		res.failed = len(units)
	}
	return res, nil
}

// streamStaged publishes a staged watermark window: every page is written
// as it is fetched, all in one transaction with the progress save, so
// readers never see half of the window and the run holds one page at a
// time (the rest waits in the database, written but not committed). One
// failing unit fails the window, which the next run retries whole. The
// effects the window owes are performed after the commit, from the ledger.
func (e *Engine[U]) streamStaged(ctx context.Context, w Window, save bool,
	fetch func(ctx context.Context, w Window, page string) ([]U, string, error), rep *runState) error {
	var pend runState    // the window's counts, added to rep once it commits
	var seen int         // units fetched
	var first []*item[U] // the first of them, to report a window that failed
	err := e.st.InTx(ctx, func(q Querier) error {
		page := ""
		for n := 0; n < e.opt.maxPages; n++ {
			if err := e.hit(ctx, hooks.PointBatchStart, page); err != nil {
				return err
			}
			units, next, err := fetch(ctx, w, page)
			if err != nil {
				return fmt.Errorf("fetch window %s..%s: %w", w.Since.Format(time.RFC3339), w.Until.Format(time.RFC3339), err)
			}
			seen += len(units)
			items := e.prepare(units, &pend)
			first = append(first, items[:min(len(items), maxFailures-len(first))]...)
			live := slices.DeleteFunc(slices.Clone(items), func(it *item[U]) bool { return it.done })
			if err := e.hit(ctx, hooks.PointBatchBegin, ""); err != nil {
				return err
			}
			for chunk := range slices.Chunk(live, e.opt.batchSize) {
				if err := e.writeBatch(ctx, q, chunk, false); err != nil {
					return err // a mismatch is an answer, not an error: see applyStaged
				}
			}
			for _, it := range live {
				e.settle(it, &pend)
			}
			for _, it := range items {
				e.unitEnded(ctx, &pend, it.result, false)
			}
			if next == "" || next == page {
				break
			}
			page = next
		}
		if save {
			if err := e.saveMark(ctx, q, w.Until); err != nil {
				return err
			}
		}
		return e.hit(ctx, hooks.PointUnitBeforeCommit, "")
	})
	if err == nil {
		err = e.hit(ctx, hooks.PointUnitAfterCommit, "")
	}
	if err != nil {
		var fault *unitFault[U]
		errors.As(err, &fault)
		err = fmt.Errorf("job %q: staged window of %d units not published: %w", e.def.Name, seen, err)
		if seen == 0 {
			// No unit to carry the failure (a BEGIN that waited out its
			// bound, a first fetch that failed): it is the run's error.
			return err
		}
		if fault == nil && ctx.Err() == nil && !errors.Is(err, ErrBusy) {
			fault = e.windowCulprit(ctx, w, fetch)
		}
		rest := seen - len(first) // units past the first maxFailures: counted, not listed
		if fault != nil && !slices.ContainsFunc(first, func(it *item[U]) bool { return it.key == fault.it.key }) {
			o := e.failedOutcome(ctx, fault.it.u, fault.it.key, fault.err, e.unitLog(fault.it))
			e.failUnit(fault.it.key, o, unitError(e.def.Name, fault.it.key, o, err), rep, e.unitLog(fault.it))
			rest--
		}
		for _, it := range first {
			o := OutcomeFailed
			switch {
			case fault != nil && it.key == fault.it.key:
				o = e.failedOutcome(ctx, it.u, it.key, fault.err, e.unitLog(it))
			case it.outcome == OutcomeParked:
				o = OutcomeParked // skipped before the window failed: still parked
			}
			e.failUnit(it.key, o, unitError(e.def.Name, it.key, o, err), rep, e.unitLog(it))
		}
		for range rest {
			rep.countUnit(OutcomeFailed)
			rep.failed.count++
		}
		return nil
	}
	rep.add(&pend)
	return e.drain(ctx, decodeUnit[U], rep)
}

// errRollback ends a transaction that only tries writes.
var errRollback = errors.New("idem: tried, rolled back")

// culprit finds the unit of items whose write fails, halving them in
// transactions that are rolled back: a failed set-based statement names no
// unit, and a staged batch must record the unit that held it back (so that
// max_attempts parks it, not the whole batch for ever). Nil: items write.
func (e *Engine[U]) culprit(ctx context.Context, items []*item[U]) *unitFault[U] {
	try := func(part []*item[U]) error {
		err := e.st.InTx(ctx, func(q Querier) error {
			if err := e.writeBatch(ctx, q, part, false); err != nil {
				return err
			}
			return errRollback
		})
		if errors.Is(err, errRollback) {
			return nil
		}
		return err
	}
	err := try(items)
	for err != nil && len(items) > 1 {
		var fault *unitFault[U]
		if errors.As(err, &fault) {
			return fault
		}
		half := len(items) / 2
		if err = try(items[:half]); err != nil {
			items = items[:half]
		} else {
			items = items[half:]
			err = try(items)
		}
	}
	if err == nil || len(items) == 0 {
		return nil
	}
	var fault *unitFault[U]
	if errors.As(err, &fault) {
		return fault
	}
	return &unitFault[U]{items[0], err}
}

// windowCulprit fetches a staged window again, page by page, and finds the
// unit whose write fails, holding one page at a time.
func (e *Engine[U]) windowCulprit(ctx context.Context, w Window, fetch func(ctx context.Context, w Window, page string) ([]U, string, error)) *unitFault[U] {
	page := ""
	for n := 0; n < e.opt.maxPages; n++ {
		units, next, err := fetch(ctx, w, page)
		if err != nil {
			return nil
		}
		var discard runState
		items := slices.DeleteFunc(e.prepare(units, &discard), func(it *item[U]) bool { return it.done })
		if f := e.culprit(ctx, items); f != nil {
			return f
		}
		if next == "" || next == page {
			return nil
		}
		page = next
	}
	return nil
}
