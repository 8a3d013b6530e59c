package idemrt

// Effects of a batch are performed after it commits: each owed key once
// per call, up to the effect concurrency (WithEffectConcurrency) at a time,
// each recorded in the ledger as it finishes. Leases, fences, attempts and
// parking are per key, as perform has them.

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
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

// owedCalls are effect calls on their way through a batch or a drain:
// read from the ledger, claimed, called, then counted (tally).
type owedCalls[U any] struct {
	calls []*call[U]
	of    []*item[U] // the unit of each call, for a batch; nil for a drain
	// first is the call that performs or reports each key; a key the call
	// already tried, or that the batch in flight holds, has none.
	first   map[string]*call[U]
	run     []*call[U] // first calls to perform
	claimed []*call[U] // those whose lease this worker took
}

// performOwed performs what the batch's written units owe, and reports
// every effect of theirs as the ledger has it.
func (e *Engine[U]) performOwed(ctx context.Context, items []*item[U], rep *runState) {
	rep.awaitInFlight()
	o := e.claimOwed(ctx, items, rep.tried, nil)
	e.callAll(ctx, o.claimed, e.slots)
	e.tally(ctx, o, rep)
}

// claimOwed builds the calls the batch's written units owe and takes
// their leases: one read of the ledger for the batch finds each effect key
// done (deduped, with its kept result), parked, pending (performed now) or
// absent (not owed); keys in tried or busy are left to the report.
func (e *Engine[U]) claimOwed(ctx context.Context, items []*item[U], tried map[string]EffectResult, busy map[string]bool) *owedCalls[U] {
	o := &owedCalls[U]{}
	for _, it := range items {
		switch it.result.Outcome {
		case OutcomeFailed, OutcomeMismatch, OutcomeParked:
			continue
		}
		for _, fx := range e.def.Effects {
			// A key the batch's reservation leased to this worker in its
			// committed transaction (reserve) is pending and held: nothing
			// to read or claim. The rest were in the ledger before.
			key := fx.KeyOf(it.u)
			o.calls = append(o.calls, &call[U]{fx: fx, key: key, u: it.u, unitKey: it.key, leaseUntil: it.leased[key]})
			o.of = append(o.of, it)
		}
	}
	if len(o.calls) == 0 {
		return o
	}
	keys := make([]string, 0, len(o.calls))
	for _, c := range o.calls {
		if c.leaseUntil.IsZero() {
			keys = append(keys, c.key)
		}
	}
	// One read: one statement on PostgreSQL; on SQLite a transaction that
	// prepares the per-key read once and takes no write lock.
	var rows map[string]LedgerRow
	var err error
	if len(keys) > 0 {
		err = e.inStatement(ctx, func(q Querier) (err error) {
			rows, err = q.Effects(ctx, keys)
			return err
		}, e.inReadTx)
	}
	for _, c := range o.calls {
		row, found := rows[c.key]
		switch {
		case !c.leaseUntil.IsZero(): // leased by its reservation
		case err != nil:
			c.res = EffectResult{Effect: c.fx.Name, Key: c.key, Outcome: EffectFailed,
				Err: fmt.Errorf("effect %q key %q: %w: read ledger: %w", c.fx.Name, c.key, ErrEffectFailed, err)}
		case !found:
			c.known = true // not owed
		case row.State != StatePending:
			c.res = ledgerResult(c.fx, c.key, row, time.Time{}) // done or failed: no time needed
		}
		c.known = c.known || c.res.Outcome != ""
	}
	e.selectRun(o, tried, busy)
	o.claimed = e.claimAll(ctx, o.run)
	return o
}

// selectRun picks the call of each key that performs or reports it.
func (e *Engine[U]) selectRun(o *owedCalls[U], tried map[string]EffectResult, busy map[string]bool) {
	o.first = make(map[string]*call[U], len(o.calls))
	for _, c := range o.calls {
		if _, ok := tried[c.key]; ok || busy[c.key] {
			continue
		}
		if _, ok := o.first[c.key]; !ok {
			o.first[c.key] = c
			if !c.known {
				o.run = append(o.run, c)
			}
		}
	}
}

// runKeys are the keys of the calls o performs.
func (o *owedCalls[U]) runKeys() map[string]bool {
	keys := make(map[string]bool, len(o.run))
	for _, c := range o.run {
		keys[c.key] = true
	}
	return keys
}

// performAll performs calls and counts them in rep, in order.
func (e *Engine[U]) performAll(ctx context.Context, calls []*call[U], rep *runState) {
	rep.awaitInFlight()
	o := &owedCalls[U]{calls: calls}
	e.selectRun(o, rep.tried, nil)
	o.claimed = e.claimAll(ctx, o.run)
	e.callAll(ctx, o.claimed, e.slots)
	e.tally(ctx, o, rep)
}

// tally counts o's calls in rep, in order, and gives each unit its
// effects' results. A key the call (the Run or Process) already tried is
// not tried again: a repeat reports the kept result of a done effect, and
// nothing for one that did not end done, which waits for the next run.
func (e *Engine[U]) tally(ctx context.Context, o *owedCalls[U], rep *runState) {
	for i, c := range o.calls {
		counted := true
		if o.first[c.key] != c {
			prev := rep.tried[c.key]
			if counted = prev.Outcome == EffectDone || prev.Outcome == EffectDeduped; counted {
				c.res = EffectResult{Effect: c.fx.Name, Key: c.key, Outcome: EffectDeduped, Result: prev.Result}
			}
		} else {
			e.remember(rep, c.res)
		}
		if c.res.Outcome == "" {
			continue
		}
		if counted {
			e.effectEnded(ctx, rep, c.res)
		}
		if o.of != nil {
			o.of[i].result.Effects = append(o.of[i].result.Effects, c.res)
		}
	}
}

// acquire takes one of slots, or gives up when ctx ends: a call not given
// one then starts no provider call (perform sees ctx ended).
func acquire(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// callAll performs claimed calls, at most the effect concurrency at once:
// each call holds one of slots, which every call of the engine shares. With more
// than one at a time, a worker hands each result to the recorder and takes
// the next call; the recorder writes results in groups behind them. One
// at a time, each result is written before the next call.
func (e *Engine[U]) callAll(ctx context.Context, claimed []*call[U], slots chan struct{}) {
	if len(claimed) == 0 {
		return
	}
	write := func(ctx context.Context, keys []string, results [][]byte) (done map[string]bool, err error) {
		// One transaction: one commit on SQLite, whatever the group's
		// size; one statement on PostgreSQL.
		err = e.inStatement(ctx, func(q Querier) (err error) {
			done, err = q.CompleteMany(ctx, keys, results, e.opt.owner, e.opt.now())
			return err
		}, e.st.InTx)
		return done, err
	}
	// Once a call has waited out its bound for a pool connection, the
	// calls not yet started are not made (notCalledPoolDry): each would
	// wait its own bounds on the same pool, two a call (its gate or slot,
	// then its release), a minute with the default bound, so a batch of
	// many effects kept its worker for hours.
	var dry atomic.Pointer[WaitError]
	do := func(c *call[U], rec *recorder) {
		log := e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", c.unitKey))
		if we := dry.Load(); we != nil {
			c.res = notCalledPoolDry(c.fx.Name, c.key, we, log)
			return
		}
		c.res, c.cp = e.perform(ctx, c.fx, c.key, c.u, c.leaseUntil, rec, log)
		if we := connectionWait(c.res.Err); we != nil {
			dry.CompareAndSwap(nil, we)
		}
	}
	if e.opt.effectConcurrency <= 1 || len(claimed) <= 1 {
		rec := &recorder{write: write}
		for _, c := range claimed {
			held := acquire(ctx, slots) // another batch's or call's calls may hold the rest
			do(c, rec)
			if held {
				<-slots
			}
			if c.cp != nil {
				c.res = e.recorded(c.fx, c.key, c.cp)
			}
		}
		return
	}
	rec := startRecorder(ctx, write, max(e.opt.batchSize, e.opt.effectConcurrency))
	var wg sync.WaitGroup
	for _, c := range claimed {
		held := acquire(ctx, slots)
		wg.Go(func() {
			if held {
				defer func() { <-slots }()
			}
			do(c, rec)
		})
	}
	wg.Wait()
	rec.close()
	for _, c := range claimed {
		if c.cp != nil {
			c.res = e.recorded(c.fx, c.key, c.cp)
		}
	}
}

// claimAll takes the leases of run's keys, one statement per effect (each
// has its own lease), on the database's clock. A key not claimed is
// reported as the ledger has it: done, parked, or leased by another worker.
// A call whose reservation leased its key to this worker (leaseUntil set,
// claimOwed) holds it already.
func (e *Engine[U]) claimAll(ctx context.Context, run []*call[U]) []*call[U] {
	var claimed []*call[U]
	var now time.Time
	var clockErr error
	if slices.ContainsFunc(run, func(c *call[U]) bool { return c.leaseUntil.IsZero() }) {
		now, clockErr = e.leaseNow(ctx, nil)
	}
	for _, fx := range e.def.Effects {
		var keys []string
		for _, c := range run {
			if c.fx.Name == fx.Name && c.leaseUntil.IsZero() {
				keys = append(keys, c.key)
			}
		}
		var got map[string]bool
		var err error
		var until time.Time
		if len(keys) > 0 {
			until, err = now.Add(fx.Lease), clockErr
			if err == nil {
				err = e.st.InTx(ctx, func(q Querier) (err error) {
					got, err = q.ClaimMany(ctx, keys, e.opt.owner, now, until)
					return err
				})
			}
		}
		for _, c := range run {
			switch {
			case c.fx.Name != fx.Name:
			case !c.leaseUntil.IsZero():
				claimed = append(claimed, c) // leased by its reservation
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

// recorder writes performed effects to the ledger, fenced by this
// worker's leases. Without a background writer (in is nil) each is written
// as it is submitted; with one, results are written in groups of up to
// group, and at least every recordEvery while any wait, so a slow provider's
// results do not wait for the whole batch.
type recorder struct {
	write func(ctx context.Context, keys []string, results [][]byte) (map[string]bool, error)
	group int
	in    chan *completion
	wrote chan struct{} // closed once the background writer has written all
}

// recordEvery bounds how long a performed effect waits to be recorded.
const recordEvery = 20 * time.Millisecond

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

// startRecorder starts a background writer; close waits for it.
func startRecorder(ctx context.Context, write func(context.Context, []string, [][]byte) (map[string]bool, error), group int) *recorder {
	r := &recorder{write: write, group: group, in: make(chan *completion, group), wrote: make(chan struct{})}
	go r.loop(ctx)
	return r
}

func (r *recorder) loop(ctx context.Context) {
	defer close(r.wrote)
	var pending []*completion
	tick := time.NewTimer(recordEvery)
	tick.Stop()
	flush := func() {
		if len(pending) > 0 {
			r.writeGroup(ctx, pending)
			pending = nil
		}
		tick.Stop()
	}
	for {
		select {
		case c, ok := <-r.in:
			if !ok {
				flush()
				return
			}
			pending = append(pending, c)
			if len(pending) == 1 {
				tick.Reset(recordEvery)
			}
			if len(pending) >= r.group {
				flush()
			}
		case <-tick.C:
			flush()
		}
	}
}

func (r *recorder) submit(ctx context.Context, key string, result []byte) *completion {
	c := &completion{key: key, result: result, done: make(chan struct{})}
	if r.in == nil {
		r.writeGroup(ctx, []*completion{c})
	} else {
		r.in <- c
	}
	return c
}

// close writes what is pending and stops the background writer.
func (r *recorder) close() {
	if r.in != nil {
		close(r.in)
		<-r.wrote
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

// StatementStore is a store that runs a transaction of one statement in
// one round trip, with the same guarantees as InTx (PostgreSQL: no BEGIN
// and no COMMIT of its own). SQLite's has none: its statements are one a
// key, and InTx's one commit is what groups them.
type StatementStore interface {
	InStatement(ctx context.Context, fn func(q Querier) error) error
}

// inStatement runs fn, which runs one statement on a StatementStore, as
// that statement's transaction; elsewhere in a transaction of inTx.
func (e *Engine[U]) inStatement(ctx context.Context, fn func(q Querier) error, inTx func(ctx context.Context, fn func(q Querier) error) error) error {
	if st, ok := e.st.(StatementStore); ok {
		return st.InStatement(ctx, fn)
	}
	return inTx(ctx, fn)
}

// readTxStore is a store whose transactions that only read differ from
// those that write: SQLite's InTx takes the write lock up front, InReadTx
// none. PostgreSQL's need not differ.
type readTxStore interface {
	InReadTx(ctx context.Context, fn func(q Querier) error) error
}

// inReadTx runs fn, which only reads, in one transaction.
func (e *Engine[U]) inReadTx(ctx context.Context, fn func(q Querier) error) error {
	if st, ok := e.st.(readTxStore); ok {
		return st.InReadTx(ctx, fn)
	}
	return e.st.InTx(ctx, fn)
}
