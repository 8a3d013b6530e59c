package idemrt

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgTxStore is a store whose queries can also run in a PostgreSQL
// transaction the caller owns (generated stores on PostgreSQL).
type PgTxStore interface {
	PgTx(tx pgx.Tx) Querier
}

// SQLTxStore is a store whose queries can also run in a database/sql
// transaction the caller owns (generated stores on SQLite).
type SQLTxStore interface {
	SQLTx(tx *sql.Tx) Querier
}

// ProcessPgTx is ProcessIn over the caller's pgx transaction.
func (e *Engine[U]) ProcessPgTx(ctx context.Context, tx pgx.Tx, units []U) (Report, error) {
	q, err := e.pgTx(tx)
	if err != nil {
		return Report{Job: e.def.Name}, err
	}
	return e.ProcessIn(ctx, q, units)
}

// pgTx runs the store's queries in the caller's pgx transaction.
func (e *Engine[U]) pgTx(tx pgx.Tx) (Querier, error) {
	s, ok := e.st.(PgTxStore)
	if !ok {
		return nil, fmt.Errorf("job %q: a pgx transaction needs a PostgreSQL store", e.def.Name)
	}
	return s.PgTx(tx), nil
}

// ProcessSQLTx is ProcessIn over the caller's database/sql transaction.
func (e *Engine[U]) ProcessSQLTx(ctx context.Context, tx *sql.Tx, units []U) (Report, error) {
	s, ok := e.st.(SQLTxStore)
	if !ok {
		return Report{Job: e.def.Name}, fmt.Errorf("job %q: a database/sql transaction needs a SQLite store", e.def.Name)
	}
	return e.ProcessIn(ctx, s.SQLTx(tx), units)
}

// ProcessIn writes handed-in units and reserves the effects their writes
// decide with q, which runs in a transaction the caller owns: the outbox
// pattern. Nothing is performed here; once the caller commits, Drain (or
// Perform) performs the owed effects with their keys, and a rollback
// leaves nothing owed.
//
// It stops at the first unit that does not end written or deduped and
// returns a *FailuresError: the caller's transaction may be aborted by then
// (PostgreSQL aborts it on any failed statement), so the caller rolls back
// and retries the whole request. No failure is recorded for the unit (the
// caller's rollback would erase it); a caller that counts attempts calls
// RecordUnitFailure after its rollback.
func (e *Engine[U]) ProcessIn(ctx context.Context, q Querier, units []U) (Report, error) {
	rep, _, err := e.processIn(ctx, q, units, false)
	return rep, err
}

// Leases are the effect keys a transaction reserved leased to this
// worker (ProcessPgTxLeased), each with its lease's end.
type Leases map[string]time.Time

// ProcessPgTxLeased is ProcessPgTx for a caller that performs the units'
// effects itself once its transaction commits (a queue worker): the
// reservations it adds are leased to this worker already, as a claim would
// lease them, and PerformLeased performs them without claiming them
// again: one ledger write and one round trip per effect fewer. The leases
// are returned only when every unit ended written or deduped; they hold
// only once the caller's transaction has committed (a rollback takes them
// with it), and a crash after the commit leaves the effects to the next
// worker once the leases end.
func (e *Engine[U]) ProcessPgTxLeased(ctx context.Context, tx pgx.Tx, units []U) (Report, Leases, error) {
	q, err := e.pgTx(tx)
	if err != nil {
		return Report{Job: e.def.Name}, nil, err
	}
	return e.processIn(ctx, q, units, true)
}

// processIn is ProcessIn; with lease, the reservations it adds are leased
// to this worker, and their keys returned when every unit is written.
func (e *Engine[U]) processIn(ctx context.Context, q Querier, units []U, lease bool) (Report, Leases, error) {
	var leases Leases
	rep, err := e.run(ctx, "process_tx", true, func(ctx context.Context, rep *runState) error {
		items := e.prepare(units, rep)
		live := slices.DeleteFunc(slices.Clone(items), func(it *item[U]) bool { return it.done })
		err := e.writeBatch(ctx, q, live, lease)
		if err == nil && lease {
			leases = Leases{}
			for _, it := range live {
				maps.Copy(leases, it.leased)
			}
		}
		var fault *unitFault[U]
		errors.As(err, &fault)
		for _, it := range live {
			switch {
			case err == nil:
				e.settle(it, rep)
			case fault != nil && it == fault.it:
				o := OutcomeFailed
				if errors.Is(fault.err, ErrPayloadMismatch) {
					o = OutcomeMismatch
				}
				e.failItem(it, o, fault.err, rep)
			default:
				// The caller's transaction failed with this batch: nothing
				// of it is written.
				e.failItem(it, OutcomeFailed, err, rep)
			}
		}
		for _, it := range items {
			e.unitEnded(ctx, rep, it.result, true)
		}
		return nil // the report's failures are the call's error
	})
	if err != nil {
		leases = nil
	}
	return rep, leases, err
}

// Perform performs the effects of units that a committed transaction
// reserved (ProcessIn, then the caller's commit): each with its key, under
// its lease, as Drain would, but only for these units. An effect with no
// reservation is not owed and is skipped; one done already is deduped.
func (e *Engine[U]) Perform(ctx context.Context, units []U) (Report, error) {
	return e.PerformLeased(ctx, units, nil)
}

// ReleaseLeases gives back the leases a committed ProcessPgTxLeased took,
// for a caller that stops between its commit and PerformLeased (an error
// it lives through): no call was made, so no attempt is counted, and the
// next Perform, Drain or redelivery takes the effects at once instead of
// after the leases end. A key whose lease this worker no longer holds is
// left as it is. A crash there gives nothing back: the leases end.
func (e *Engine[U]) ReleaseLeases(ctx context.Context, leases Leases) error {
	if len(leases) == 0 {
		return nil
	}
	return e.st.InTx(ctx, func(q Querier) error {
		for _, key := range slices.Sorted(maps.Keys(leases)) {
			if _, err := q.Release(ctx, Release{Key: key, Owner: e.opt.owner, NotCounted: true, Now: e.opt.now(),
				LastError: "lease given back before the call: the worker stopped after its commit"}); err != nil {
				return fmt.Errorf("job %q: give back the lease of effect key %q: %w", e.def.Name, key, err)
			}
		}
		return nil
	})
}

// PerformLeased is Perform for units whose committed transaction
// (ProcessPgTxLeased) leased their reservations to this worker: a key in
// leases is performed under its lease without a claim; the others are
// claimed as Perform claims them.
func (e *Engine[U]) PerformLeased(ctx context.Context, units []U, leases Leases) (Report, error) {
	return e.run(ctx, "perform", false, func(ctx context.Context, rep *runState) error {
		var calls []*call[U]
		for _, u := range units {
			for _, fx := range e.def.Effects {
				key := fx.KeyOf(u)
				calls = append(calls, &call[U]{fx: fx, key: key, u: u, unitKey: e.def.KeyOf(u), leaseUntil: leases[key]})
			}
		}
		e.performAll(ctx, calls, rep)
		return ctx.Err()
	})
}

// RecordUnitFailure counts a failed attempt at writing u, in a transaction
// of its own, as a run does for a unit whose write failed: at the job's
// max_attempts the unit is parked (it returns OutcomeParked) and listed by
// ParkedPage (and the generated store's Parked); before that it returns OutcomeFailed. A queue worker calls
// it after rolling back, so the queue's retries and the ledger's attempts
// are the same attempts.
func (e *Engine[U]) RecordUnitFailure(ctx context.Context, u U, cause error) Outcome {
	key := e.def.KeyOf(u)
	return e.failedOutcome(ctx, u, key, cause, e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", key)))
}

// Logger returns the job's logger.
func (e *Engine[U]) Logger() *slog.Logger { return e.opt.log }
