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

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
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
		if err := e.hit(ctx, PointBatchBegin, items[0].key); err != nil {
			return stop(err)
		}
		if ahead && writing(rep, items) {
			// A batch written ahead and still in flight writes one of
			// these keys: wait for them all, so a key's writes commit in
			// the order they were handed in.
			if err := e.hit(ctx, PointBatchAwait, items[0].key); err != nil {
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
		if err = e.hit(ctx, PointUnitAfterCommit, items[0].key); err != nil {
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

// writeBatch does a batch's database work inside its transaction. Units
// whose key repeats go in later rounds, so each statement sees a key once
// and the batch ends as if its units had been written one by one. With
// lease, the engine performs the batch's effects once it commits
// (commit, then endBatch): the reservations it adds are leased to this
// worker already (reserve).
func (e *Engine[U]) writeBatch(ctx context.Context, q Querier, items []*item[U], lease bool) error {
	for _, it := range items {
		it.outcome, it.fresh, it.err, it.owes, it.leased = "", false, nil, nil, nil // a retry starts afresh
		if err := e.hit(ctx, PointUnitStart, it.key); err != nil {
			return &unitFault[U]{it, err}
		}
	}
	for _, round := range rounds(items) {
		if err := e.writeRound(ctx, q, round, lease); err != nil {
			return err
		}
	}
	for _, it := range items {
		if err := e.hit(ctx, PointUnitBeforeCommit, it.key); err != nil {
			return &unitFault[U]{it, err}
		}
	}
	return nil
}

// rounds splits items so that no key repeats within a round: the n-th
// copy of a key goes in round n. Each round is in key order, so that
// overlapping runs lock rows in the same order.
func rounds[U any](items []*item[U]) [][]*item[U] {
	seen := make(map[string]int, len(items))
	var out [][]*item[U]
	for _, it := range items {
		n := seen[it.key]
		seen[it.key] = n + 1
		if n == len(out) {
			out = append(out, nil)
		}
		out[n] = append(out[n], it)
	}
	for _, r := range out {
		slices.SortStableFunc(r, func(a, b *item[U]) int { return strings.Compare(a.key, b.key) })
	}
	return out
}

// writeRound writes units with distinct keys: a few statements per table.
func (e *Engine[U]) writeRound(ctx context.Context, q Querier, round []*item[U], lease bool) error {
	now := e.opt.now()
	// A unit parked with this very payload is skipped; any other parked
	// row of the key goes when this write commits.
	parked, err := q.LookupUnitFailures(ctx, e.def.Name, keysOf(round))
	if err != nil {
		return fmt.Errorf("look up parked units: %w", err)
	}
	live := make([]*item[U], 0, len(round))
	for _, it := range round {
		if f, ok := parked[it.key]; ok {
			if f.State == UnitStateParked {
				if err := e.encode(it); err != nil {
					return &unitFault[U]{it, err}
				}
				if bytes.Equal(f.Hash, it.hash) {
					it.outcome = OutcomeParked
					continue
				}
			}
			if err := q.ClearUnitFailure(ctx, e.def.Name, it.key); err != nil {
				return &unitFault[U]{it, fmt.Errorf("clear parked unit: %w", err)}
			}
		}
		it.outcome = OutcomeAccepted
		live = append(live, it)
	}
	toWrite := live
	if e.def.CheckSeen && len(live) > 0 {
		hashes := make([][]byte, len(live))
		for i, it := range live {
			hashes[i] = it.hash
		}
		seen, err := q.See(ctx, e.def.Name, keysOf(live), hashes, e.def.Version, now)
		if err != nil {
			return fmt.Errorf("record keys: %w", err)
		}
		toWrite = make([]*item[U], 0, len(live))
		kept := live[:0]
		for _, it := range live {
			prev, ok := seen[it.key]
			switch {
			case !ok:
				it.fresh = true
				toWrite = append(toWrite, it)
			case !bytes.Equal(prev, it.hash):
				it.outcome, it.err = OutcomeMismatch, ErrPayloadMismatch
				continue
			default:
				it.outcome = OutcomeDeduped
			}
			kept = append(kept, it)
		}
		live = kept
	}
	if e.def.Write != nil && len(toWrite) > 0 {
		if err := e.write(ctx, q, toWrite); err != nil {
			return err
		}
		if err := e.settleReplays(ctx, q, toWrite); err != nil {
			return err
		}
		live = slices.DeleteFunc(live, func(it *item[U]) bool { return it.outcome == OutcomeMismatch })
	}
	if err := e.reserve(ctx, q, live, now, lease); err != nil {
		return err
	}
	// A failure here names no unit, as a failed set-based statement does.
	return e.hit(ctx, PointBatchWritten, "")
}

// settleReplays decides the handed-in keys new to the ledger whose write
// left the destination row as it was: the key was written before its
// records were purged past retention. An effect never acts on data the
// destination does not hold, so such a key acts as new (its effects decided
// as on an insert) only when the row holds the unit's very data. When it
// holds other data, an insert_once row makes the unit a mismatch (and the
// key record just made for it goes again: the key stays unknown, as it
// was), and a row that kept newer data (newer_wins) leaves the effects to
// decide on what the write did.
func (e *Engine[U]) settleReplays(ctx context.Context, q Querier, written []*item[U]) error {
	if e.def.Holds == nil {
		return nil
	}
	for _, it := range written {
		if !it.fresh || (it.outcome != OutcomeDeduped && it.outcome != OutcomeUnchanged) {
			continue
		}
		holds, err := e.def.Holds(ctx, q, it.u)
		if err != nil {
			return &unitFault[U]{it, fmt.Errorf("compare with the destination row: %w", err)}
		}
		if holds {
			continue
		}
		it.fresh = false
		if it.outcome == OutcomeDeduped {
			if _, err := q.ForgetHandedIn(ctx, e.def.Name, it.key); err != nil {
				return &unitFault[U]{it, fmt.Errorf("forget the key record: %w", err)}
			}
			it.outcome, it.err = OutcomeMismatch, ErrPayloadMismatch
		}
	}
	return nil
}

// write runs the destination write: one statement for the batch where the
// dialect has one, else one per unit, which names the unit that fails. A
// lone unit (a call or a River job of one, a batch halved down to one, a
// key's later round) takes its own statement on every dialect: on
// PostgreSQL the guarded upsert is one round trip, where the batch form's
// first try costs three (savepoint, insert, release) and a key already
// there two more.
func (e *Engine[U]) write(ctx context.Context, q Querier, items []*item[U]) error {
	if e.def.WriteBatch != nil && (len(items) > 1 || e.def.Write == nil) {
		units := make([]U, len(items))
		for i, it := range items {
			units[i] = it.u
		}
		outcomes, err := e.def.WriteBatch(ctx, q, units, keysOf(items), e.def.Version)
		if err != nil {
			return fmt.Errorf("write destination: %w", err)
		}
		if outcomes != nil {
			for i, it := range items {
				it.outcome = outcomes[i]
			}
			return nil
		}
	}
	for _, it := range items {
		o, err := e.def.Write(ctx, q, it.u, it.key, e.def.Version)
		if err != nil {
			return &unitFault[U]{it, fmt.Errorf("write destination: %w", err)}
		}
		it.outcome = o
	}
	return nil
}

// reserve records, in the write's transaction, the effects each written
// unit owes: no crash can separate "the row was inserted" from "the effect
// is owed". With lease, this worker performs them once the transaction
// commits, so the rows it adds are leased to it already, as its claim
// would lease them (claimAll: until the effect's lease from now on the
// database's clock, an attempt counted), and only the keys that were in
// the ledger before are claimed: one write per effect fewer, and no
// round trip. A rollback takes the leased rows with it, and a crash
// after the commit leaves them to the next worker once the lease ends.
func (e *Engine[U]) reserve(ctx context.Context, q Querier, live []*item[U], now time.Time, lease bool) error {
	for fi, fx := range e.def.Effects {
		var owe, ask []*item[U]
		for _, it := range live {
			decideAs := it.outcome
			if it.fresh {
				decideAs = OutcomeInserted // a handed-in key is new, whatever the destination holds
			}
			switch {
			case fx.When.Matches(decideAs):
				owe = append(owe, it)
			case it.outcome != OutcomeDeduped:
				ask = append(ask, it)
			}
		}
		if len(ask) > 0 {
			// A unit decided under an earlier effect version owes the new
			// version once: version bumps are deliberate.
			was, err := q.Decided(ctx, e.def.Name, fx.Name, keysOf(ask), fx.Version)
			if err != nil {
				return fmt.Errorf("effect %q: look up ledger: %w", fx.Name, err)
			}
			for _, it := range ask {
				if was[it.key] {
					owe = append(owe, it)
				}
			}
		}
		if len(owe) == 0 {
			continue
		}
		r := Reservations{Job: e.def.Name, Effect: fx.Name, EffectVersion: fx.Version, JobVersion: e.def.Version,
			Keys: make([]string, len(owe)), UnitKeys: make([]string, len(owe)), Payloads: make([][]byte, len(owe))}
		slices.SortFunc(owe, func(a, b *item[U]) int { return strings.Compare(fx.KeyOf(a.u), fx.KeyOf(b.u)) })
		for i, it := range owe {
			r.Keys[i], r.UnitKeys[i], r.Payloads[i] = fx.KeyOf(it.u), it.key, it.payload
			it.owes = append(it.owes, fi)
		}
		at, clockErr := time.Time{}, error(nil)
		if lease {
			// Without the database clock the rows are added unleased, and
			// the claim, which needs the clock too, says why.
			at, clockErr = e.leaseNow(ctx, q)
		}
		if errors.Is(clockErr, ErrBusy) {
			// The clock read waited out its bound: the write is busy,
			// not to be finished without its leases.
			return fmt.Errorf("effect %q: reserve: %w", fx.Name, clockErr)
		}
		if !lease || clockErr != nil {
			if err := q.Reserve(ctx, r, now); err != nil {
				return fmt.Errorf("effect %q: reserve: %w", fx.Name, err)
			}
			continue
		}
		until := at.Add(fx.Lease)
		leased, err := q.ReserveLeased(ctx, r, now, e.opt.owner, until)
		if err != nil {
			return fmt.Errorf("effect %q: reserve: %w", fx.Name, err)
		}
		for i, it := range owe {
			if k := r.Keys[i]; leased[k] {
				if it.leased == nil {
					it.leased = map[string]time.Time{}
				}
				it.leased[k] = until
			}
		}
	}
	return nil
}

func keysOf[U any](items []*item[U]) []string {
	keys := make([]string, len(items))
	for i, it := range items {
		keys[i] = it.key
	}
	return keys
}

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
	if err := e.hit(ctx, PointBatchBegin, ""); err != nil {
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
		return e.hit(ctx, PointUnitBeforeCommit, "")
	})
	if err == nil {
		err = e.hit(ctx, PointUnitAfterCommit, "")
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
			if err := e.hit(ctx, PointBatchStart, page); err != nil {
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
			if err := e.hit(ctx, PointBatchBegin, ""); err != nil {
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
		return e.hit(ctx, PointUnitBeforeCommit, "")
	})
	if err == nil {
		err = e.hit(ctx, PointUnitAfterCommit, "")
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
