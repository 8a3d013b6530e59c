package idemrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// backlogOps are the calls whose Report carries the job's Backlog.
var backlogOps = map[string]bool{"run": true, "backfill": true, "drain": true}

// runState is one call of the engine while it goes on: its report, and what
// only the engine needs (never handed to the caller).
type runState struct {
	Report

	// tried holds the effect keys this call already attempted, with their
	// results: a failed effect waits for the next run instead of burning
	// attempts twice, and a repeat of the key in the call gets the result.
	tried map[string]EffectResult

	// failed collects what the call returns as its *FailuresError.
	failed failures

	// inFlight is the batch whose effect calls (endBatch), or whose
	// transaction (writeAhead), is still going on, the newest of them
	// when several are written ahead; nil when none is.
	inFlight *inFlight
}

// inFlight is a batch's effect calls, or its transaction, going on in the
// background.
type inFlight struct {
	keys map[string]bool // the effect keys being performed, or the unit keys being written
	join func()          // waits for the batch, counts it, ends its units
	// before is the batch written ahead before this one, still in flight
	// (writeAhead keeps up to writeAheadDepth); nil otherwise.
	before *inFlight
}

// awaitInFlight waits for the batches in flight, if any, oldest first.
func (r *runState) awaitInFlight() { r.keepInFlight(0) }

// keepInFlight waits for the oldest batches in flight, in order, until at
// most n are left.
func (r *runState) keepInFlight(n int) {
	var chain []*inFlight // newest first
	for f := r.inFlight; f != nil; f = f.before {
		chain = append(chain, f)
	}
	if len(chain) <= n {
		return
	}
	if n == 0 {
		r.inFlight = nil
	} else {
		chain[n-1].before = nil
	}
	for i := len(chain) - 1; i >= n; i-- {
		chain[i].before = nil
		chain[i].join()
	}
}

// add adds the counts, units and failures of o, a batch counted apart
// (written ahead), to r.
func (r *runState) add(o *runState) {
	r.Report.Add(o.Report)
	for _, f := range o.failed.list {
		r.failed.add(f)
	}
	r.failed.count += o.failed.count - len(o.failed.list)
	r.failed.busy = append(r.failed.busy, o.failed.busy...)
}

// run wraps one scheduled run or call: report, logging, run-start point.
// A call that ran to its end returns a *FailuresError when some unit or
// effect did not end applied or deduped (busy effects count for Process).
func (e *Engine[U]) run(ctx context.Context, op string, busyFails bool, body func(ctx context.Context, rep *runState) error) (Report, error) {
	rep := runState{Report: Report{Job: e.def.Name}}
	ctx = withWaitBound(ctx, e.opt.waitBound)
	obs := e.opt.observer
	if obs != nil {
		ctx = obs.RunStart(ctx, e.def.Name, op)
	}
	err := e.hit(ctx, hooks.PointRunStart, "")
	if err == nil {
		err = body(ctx, &rep)
	}
	rep.awaitInFlight()
	if err == nil {
		err = rep.failed.err(e.def.Name, busyFails)
	} else if ferr := rep.failed.err(e.def.Name, busyFails); ferr != nil {
		// The run stopped at err (its database gone, say) after units or
		// effects had already failed, most likely for the same cause: say
		// both, the step it stopped at first. Only err is wrapped.
		err = fmt.Errorf("%w (before that, %v)", err, ferr)
	}
	// The slots whose release failed during the run: its calls are over.
	for _, l := range e.limits {
		l.freeAgain(context.WithoutCancel(ctx), e.st.Auto())
	}
	if fe := (*FailuresError)(nil); backlogOps[op] && (err == nil || errors.As(err, &fe)) {
		if b, berr := e.backlog(ctx); berr != nil {
			e.opt.log.WarnContext(ctx, "idemgen: the report has no backlog", slog.Any("err", berr))
		} else {
			rep.Backlog = &b
		}
	}
	e.finish(ctx, &rep, err)
	if obs != nil {
		obs.RunEnd(ctx, rep.Report, err)
	}
	return rep.Report, err
}

func decodeUnit[U any](b []byte) (U, error) {
	var u U
	err := json.Unmarshal(b, &u)
	return u, err
}

// drain performs every reservation of this job that is still pending and not
// leased: effects owed by earlier runs that crashed or failed.
func (e *Engine[U]) drain(ctx context.Context, decode func([]byte) (U, error), rep *runState) error {
	byName := map[string]Effect[U]{}
	for _, fx := range e.def.Effects {
		byName[fx.Name] = fx
	}
	after := ""
	for {
		now, err := e.leaseNow(ctx, nil)
		if err != nil {
			return fmt.Errorf("job %q: list pending effects: %w", e.def.Name, err)
		}
		rows, err := e.st.Auto().Pending(ctx, e.def.Name, now, after, int32(e.opt.batchSize))
		if err != nil {
			return fmt.Errorf("job %q: list pending effects: %w", e.def.Name, err)
		}
		if len(rows) == 0 {
			return nil
		}
		var calls []*call[U]
		for _, row := range rows {
			after = row.Key
			fx, ok := byName[row.Effect]
			log := e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", row.UnitKey))
			if !ok {
				log.Warn("idemgen: pending effect is no longer in the spec; left as is", slog.String("effect", row.Effect))
				continue
			}
			u, err := decode(row.Payload)
			if err != nil {
				log.Error("idemgen: pending effect payload unreadable", slog.Any("err", err))
				continue
			}
			calls = append(calls, &call[U]{fx: fx, key: row.Key, u: u, unitKey: row.UnitKey})
		}
		e.performAll(ctx, calls, rep)
	}
}

// runWindow fetches and applies one window page by page. With save, the
// watermark advances afterwards, and never past a failed unit.
func (e *Engine[U]) runWindow(ctx context.Context, w Window, save bool,
	fetch func(ctx context.Context, w Window, page string) ([]U, string, error),
	markOf func(U) time.Time, rep *runState) error {
	if e.def.Stage {
		return e.streamStaged(ctx, w, save, fetch, rep)
	}
	page := ""
	var res applied
	for n := 0; n < e.opt.maxPages; n++ {
		if err := e.hit(ctx, hooks.PointBatchStart, page); err != nil {
			return err
		}
		units, next, err := fetch(ctx, w, page)
		if err != nil {
			return fmt.Errorf("job %q: fetch window %s..%s: %w", e.def.Name, w.Since.Format(time.RFC3339), w.Until.Format(time.RFC3339), err)
		}
		if err := e.apply(ctx, units, rep, false, markOf, &res); err != nil {
			return err
		}
		if next == "" || next == page {
			break
		}
		page = next
	}
	rep.awaitInFlight() // every batch of the window has ended
	if !save {
		return nil
	}
	mark := w.Until
	if oldestFailed := res.oldestFailed; !oldestFailed.IsZero() && oldestFailed.Before(mark) {
		// Hold the mark at the oldest failure so the next window fetches it again.
		mark = oldestFailed
	}
	return e.saveMark(ctx, e.st.Auto(), mark)
}

func (e *Engine[U]) saveMark(ctx context.Context, q Querier, mark time.Time) error {
	if err := e.hit(ctx, hooks.PointProgressBefore, ""); err != nil {
		return err
	}
	if err := q.SaveWatermark(ctx, e.def.Name, mark, e.def.Version, e.opt.now()); err != nil {
		return fmt.Errorf("job %q: save watermark: %w", e.def.Name, err)
	}
	return e.hit(ctx, hooks.PointProgressAfter, "")
}

// nextWindow is the window a scheduled watermark run fetches.
func (e *Engine[U]) nextWindow(ctx context.Context, overlap time.Duration) (Window, error) {
	p, err := e.st.Auto().Progress(ctx, e.def.Name)
	if err != nil {
		return Window{}, fmt.Errorf("job %q: read progress: %w", e.def.Name, err)
	}
	since := e.opt.start
	if p.HasMark {
		since = p.Watermark.Add(-overlap)
	}
	return Window{Since: since, Until: e.opt.now()}, nil
}

// runCursor applies pages from the stored cursor on; the cursor advances
// after each whole page, and stops at a page with a failed unit.
func (e *Engine[U]) runCursor(ctx context.Context, fetch func(ctx context.Context, cursor string) ([]U, string, error), rep *runState) error {
	p, err := e.st.Auto().Progress(ctx, e.def.Name)
	if err != nil {
		return fmt.Errorf("job %q: read progress: %w", e.def.Name, err)
	}
	cur, pos := p.Cursor, p.Position
	for n := 0; n < e.opt.maxPages; n++ {
		if err := e.hit(ctx, hooks.PointBatchStart, cur); err != nil {
			return err
		}
		units, next, err := fetch(ctx, cur)
		if err != nil {
			return fmt.Errorf("job %q: fetch page after cursor %q: %w", e.def.Name, cur, err)
		}
		advance := next != "" && next != cur
		saveCursor := func(q Querier) error {
			if err := e.hit(ctx, hooks.PointProgressBefore, next); err != nil {
				return err
			}
			// position orders cursors: a slower overlapping run cannot move it back.
			if err := q.SaveCursor(ctx, e.def.Name, next, pos+1, e.def.Version, e.opt.now()); err != nil {
				return fmt.Errorf("job %q: save cursor: %w", e.def.Name, err)
			}
			return e.hit(ctx, hooks.PointProgressAfter, next)
		}
		var res applied
		if e.def.Stage {
			var save func(q Querier) error
			if advance {
				save = saveCursor
			}
			res, err = e.applyStaged(ctx, units, rep, false, save)
		} else {
			err = e.apply(ctx, units, rep, false, nil, &res)
			rep.awaitInFlight() // the cursor moves past whole pages only
			if err == nil && res.failed == 0 && advance {
				err = saveCursor(e.st.Auto())
			}
		}
		if err != nil || res.failed > 0 || !advance {
			return err
		}
		cur, pos = next, pos+1
		if len(units) == 0 {
			return nil
		}
	}
	return nil
}

// finish logs the report once per run.
func (e *Engine[U]) finish(ctx context.Context, rep *runState, err error) {
	if fe := (*FailuresError)(nil); errors.As(err, &fe) {
		e.opt.log.WarnContext(ctx, "idemgen: run done with failures", slog.Any("report", *rep), slog.Any("err", err))
		return
	}
	if err != nil {
		e.opt.log.ErrorContext(ctx, "idemgen: run stopped", slog.Any("report", *rep), slog.Any("err", err))
		return
	}
	e.opt.log.InfoContext(ctx, "idemgen: run done", slog.Any("report", *rep))
}
