package idem

// Effects of a batch are performed after it commits: each owed key once
// per call, up to the effect concurrency (WithEffectConcurrency) at a time,
// each recorded in the ledger as it finishes. Leases, fences, attempts and
// parking are per key, as perform has them.

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
)

// call is one effect key to perform, or whose ledger outcome to report.
type call[U any] struct {
	fx      Effect[U]
	key     string
	u       U
	unitKey string
	res     EffectResult
	known   bool // res is what the ledger says: nothing to perform
}

// performOwed performs what the batch's written units owe, and reports
// every effect of theirs as the ledger has it: one read of the ledger for
// the batch finds each effect key done (deduped, with its kept result),
// parked, pending (performed now) or absent (not owed).
func (e *Engine[U]) performOwed(ctx context.Context, items []*item[U], rep *Report) {
	var calls []*call[U]
	var of []*item[U]
	for _, it := range items {
		switch it.result.Outcome {
		case OutcomeFailed, OutcomeMismatch, OutcomeParked:
			continue
		}
		for _, fx := range e.def.Effects {
			calls = append(calls, &call[U]{fx: fx, key: fx.KeyOf(it.u), u: it.u, unitKey: it.key})
			of = append(of, it)
		}
	}
	if len(calls) == 0 {
		return
	}
	keys := make([]string, len(calls))
	for i, c := range calls {
		keys[i] = c.key
	}
	rows, err := e.st.Auto().Effects(ctx, keys)
	for _, c := range calls {
		row, found := rows[c.key]
		switch {
		case err != nil:
			c.res = EffectResult{Effect: c.fx.Name, Key: c.key, Outcome: EffectFailed,
				Err: fmt.Errorf("effect %q key %q: %w: read ledger: %w", c.fx.Name, c.key, ErrEffectFailed, err)}
		case !found:
			c.known = true // not owed
		case row.State != StatePending:
			c.res = ledgerResult(c.fx, c.key, row)
		}
		c.known = c.known || c.res.Outcome != ""
	}
	e.performAll(ctx, calls, rep)
	for i, c := range calls {
		if c.res.Outcome != "" {
			of[i].result.Effects = append(of[i].result.Effects, c.res)
		}
	}
}

// performAll performs calls and counts them in rep, in order. A key the
// call (the Run or Process) already tried is not tried again: a repeat
// reports the kept result of a done effect, and nothing for one that did
// not end done, which waits for the next run.
func (e *Engine[U]) performAll(ctx context.Context, calls []*call[U], rep *Report) {
	first := make(map[string]*call[U], len(calls))
	var run []*call[U]
	for _, c := range calls {
		if _, ok := rep.tried[c.key]; ok {
			continue
		}
		if _, ok := first[c.key]; !ok {
			first[c.key] = c
			if !c.known {
				run = append(run, c)
			}
		}
	}
	e.runCalls(ctx, run)
	for _, c := range calls {
		if first[c.key] != c {
			prev := rep.tried[c.key]
			if prev.Outcome != EffectDone && prev.Outcome != EffectDeduped {
				continue
			}
			c.res = EffectResult{Effect: c.fx.Name, Key: c.key, Outcome: EffectDeduped, Result: prev.Result}
		} else {
			e.remember(rep, c.res)
		}
		if c.res.Outcome != "" {
			e.effectEnded(ctx, rep, c.res)
		}
	}
}

// runCalls performs distinct keys, at most the effect concurrency at once.
func (e *Engine[U]) runCalls(ctx context.Context, run []*call[U]) {
	do := func(c *call[U]) {
		log := e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", c.unitKey))
		c.res = e.perform(ctx, c.fx, c.key, c.u, log)
	}
	if e.opt.effectConcurrency <= 1 || len(run) <= 1 {
		for _, c := range run {
			do(c)
		}
		return
	}
	slots := make(chan struct{}, e.opt.effectConcurrency)
	var wg sync.WaitGroup
	for _, c := range run {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			do(c)
		})
	}
	wg.Wait()
}
