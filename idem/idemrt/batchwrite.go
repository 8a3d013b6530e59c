package idemrt

// The batch's transaction: the statements writeBatch runs for each round
// of distinct keys (the parked-unit lookup, the handed-in key records, the
// destination write, and the effect reservations).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// writeBatch does a batch's database work inside its transaction. Units
// whose key repeats go in later rounds, so each statement sees a key once
// and the batch ends as if its units had been written one by one. With
// lease, the engine performs the batch's effects once it commits
// (commit, then endBatch): the reservations it adds are leased to this
// worker already (reserve).
func (e *Engine[U]) writeBatch(ctx context.Context, q Querier, items []*item[U], lease bool) error {
	for _, it := range items {
		it.outcome, it.fresh, it.older, it.err, it.owes, it.leased = "", false, false, nil, nil, nil // a retry starts afresh
		if err := e.hit(ctx, hooks.PointUnitStart, it.key); err != nil {
			return &unitFault[U]{it, err}
		}
	}
	for _, round := range rounds(items) {
		if err := e.writeRound(ctx, q, round, lease); err != nil {
			return err
		}
	}
	for _, it := range items {
		if err := e.hit(ctx, hooks.PointUnitBeforeCommit, it.key); err != nil {
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
		live = slices.DeleteFunc(live, func(it *item[U]) bool { return it.outcome == OutcomeMismatch || it.older })
	}
	if err := e.reserve(ctx, q, live, now, lease); err != nil {
		return err
	}
	// A failure here names no unit, as a failed set-based statement does.
	return e.hit(ctx, hooks.PointBatchWritten, "")
}

// settleReplays decides the handed-in keys new to the ledger whose write
// left the destination row as it was: the key was written before its
// records were purged past retention. An effect never acts on data the
// destination does not hold, so such a key acts as new (its effects decided
// as on an insert) only when the row holds the unit's very data. When it
// holds other data, an insert_once row makes the unit a mismatch (and the
// key record just made for it goes again: the key stays unknown, as it
// was). A row that kept newer data (newer_wins) makes the unit an older
// copy: unchanged, deciding no effect, whatever the effect's when (its
// data is not the destination's), and its key record goes too, so the
// row's own version handed in later is no mismatch.
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
		if it.outcome == OutcomeUnchanged {
			it.older = true // newer_wins kept the row's newer data
		} else {
			it.outcome, it.err = OutcomeMismatch, ErrPayloadMismatch
		}
		// The key stays unknown, as it was.
		if _, err := q.ForgetHandedIn(ctx, e.def.Name, it.key); err != nil {
			return &unitFault[U]{it, fmt.Errorf("forget the key record: %w", err)}
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
		outcomes, err := e.def.WriteBatch(withSkipInsertNew(ctx, e.batchMetRows.Load()), q, units, keysOf(items), e.def.Version)
		if err != nil {
			return fmt.Errorf("write destination: %w", err)
		}
		if outcomes != nil {
			for i, it := range items {
				it.outcome = outcomes[i]
			}
			e.batchMetRows.Store(slices.ContainsFunc(outcomes, func(o Outcome) bool { return o != OutcomeInserted }))
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
