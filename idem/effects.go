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
	"time"
)

// call is one effect key to perform, or whose ledger outcome to report.
type call[U any] struct {
	fx      Effect[U]
	key     string
	u       U
	unitKey string
	res     EffectResult
	known   bool // res is what the ledger says: nothing to perform
	// leaseUntil is when this worker's claim on the key runs out.
	leaseUntil time.Time
	cp         *completion // the call succeeded; recorded ends it
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

// runCalls performs distinct keys: one claim per effect for all of them,
// then the provider calls, at most the effect concurrency at once. A worker
// hands each result to the recorder and takes the next call; results are
// written in groups (one at a time when calls run one at a time, so each
// is recorded before the next call).
func (e *Engine[U]) runCalls(ctx context.Context, run []*call[U]) {
	if len(run) == 0 {
		return
	}
	claimed := e.claimAll(ctx, run)
	group := 1
	if e.opt.effectConcurrency > 1 {
		group = max(e.opt.batchSize/4, e.opt.effectConcurrency)
	}
	rec := &recorder{group: group, write: func(ctx context.Context, keys []string, results [][]byte) (done map[string]bool, err error) {
		// One transaction: one commit on SQLite, whatever the group's size.
		err = e.st.InTx(ctx, func(q Querier) (err error) {
			done, err = q.CompleteMany(ctx, keys, results, e.opt.owner, e.opt.now())
			return err
		})
		return done, err
	}}
	do := func(c *call[U]) {
		log := e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", c.unitKey))
		c.res, c.cp = e.perform(ctx, c.fx, c.key, c.u, c.leaseUntil, rec, log)
	}
	if e.opt.effectConcurrency <= 1 || len(claimed) <= 1 {
		for _, c := range claimed {
			do(c)
			rec.flush(ctx)
			if c.cp != nil {
				c.res = e.recorded(c.fx, c.key, c.cp)
			}
		}
		return
	}
	slots := make(chan struct{}, e.opt.effectConcurrency)
	var wg sync.WaitGroup
	for _, c := range claimed {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			do(c)
		})
	}
	wg.Wait()
	rec.flush(ctx)
	for _, c := range claimed {
		if c.cp != nil {
			c.res = e.recorded(c.fx, c.key, c.cp)
		}
	}
}

// claimAll takes the leases of run's keys, one statement per effect (each
// has its own lease), on the database's clock. A key not claimed is
// reported as the ledger has it: done, parked, or leased by another worker.
func (e *Engine[U]) claimAll(ctx context.Context, run []*call[U]) []*call[U] {
	var claimed []*call[U]
	now, clockErr := e.leaseNow(ctx)
	for _, fx := range e.def.Effects {
		var keys []string
		for _, c := range run {
			if c.fx.Name == fx.Name {
				keys = append(keys, c.key)
			}
		}
		if len(keys) == 0 {
			continue
		}
		until := now.Add(fx.Lease)
		got, err := map[string]bool(nil), clockErr
		if err == nil {
			err = e.st.InTx(ctx, func(q Querier) (err error) {
				got, err = q.ClaimMany(ctx, keys, e.opt.owner, now, until)
				return err
			})
		}
		for _, c := range run {
			switch {
			case c.fx.Name != fx.Name:
			case err != nil:
				c.res = EffectResult{Effect: fx.Name, Key: c.key, Outcome: EffectFailed,
					Err: fmt.Errorf("effect %q key %q: %w: claim: %w", fx.Name, c.key, ErrEffectFailed, err)}
				e.opt.log.Warn("idemgen: effect claim failed", slog.String("job", e.def.Name), slog.String("effect_key", c.key), slog.Any("err", err))
			case got[c.key]:
				c.leaseUntil = until
				claimed = append(claimed, c)
			default:
				c.res = e.ledgerOutcome(ctx, fx, c.key)
			}
		}
	}
	return claimed
}

// recorder writes done effects in groups of up to group, fenced by this
// worker's leases: a full group is written by the worker that filled it,
// the rest by flush.
type recorder struct {
	group   int
	write   func(ctx context.Context, keys []string, results [][]byte) (map[string]bool, error)
	mu      sync.Mutex
	pending []*completion
}

// completion is one performed effect on its way to the ledger.
type completion struct {
	key    string
	result []byte
	ok     bool // recorded; false: another worker took the lease over
	err    error
	done   chan struct{}
	// what recorded needs to end the call
	ctx   context.Context
	start time.Time
	log   *slog.Logger
}

func (r *recorder) submit(ctx context.Context, key string, result []byte) *completion {
	c := &completion{key: key, result: result, done: make(chan struct{})}
	r.mu.Lock()
	r.pending = append(r.pending, c)
	var full []*completion
	if len(r.pending) >= r.group {
		full, r.pending = r.pending, nil
	}
	r.mu.Unlock()
	if full != nil {
		r.writeGroup(ctx, full)
	}
	return c
}

// flush writes what is pending.
func (r *recorder) flush(ctx context.Context) {
	r.mu.Lock()
	rest := r.pending
	r.pending = nil
	r.mu.Unlock()
	if len(rest) > 0 {
		r.writeGroup(ctx, rest)
	}
}

func (r *recorder) writeGroup(ctx context.Context, group []*completion) {
	keys := make([]string, len(group))
	results := make([][]byte, len(group))
	for i, g := range group {
		keys[i], results[i] = g.key, g.result
	}
	ok, err := r.write(context.WithoutCancel(ctx), keys, results)
	for _, g := range group {
		g.ok, g.err = ok[g.key], err
		close(g.done)
	}
}
