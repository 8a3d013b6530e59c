package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"

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
	s, ok := e.st.(PgTxStore)
	if !ok {
		return Report{Job: e.def.Name}, fmt.Errorf("job %q: a pgx transaction needs a PostgreSQL store", e.def.Name)
	}
	return e.ProcessIn(ctx, s.PgTx(tx), units)
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
	return e.run(ctx, "process_tx", true, func(ctx context.Context, rep *runState) error {
		items := e.prepare(units, rep)
		live := slices.DeleteFunc(slices.Clone(items), func(it *item[U]) bool { return it.done })
		err := e.writeBatch(ctx, q, live, false)
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
}

// Perform performs the effects of units that a committed transaction
// reserved (ProcessIn, then the caller's commit): each with its key, under
// its lease, as Drain would, but only for these units. An effect with no
// reservation is not owed and is skipped; one done already is deduped.
func (e *Engine[U]) Perform(ctx context.Context, units []U) (Report, error) {
	return e.run(ctx, "perform", false, func(ctx context.Context, rep *runState) error {
		var calls []*call[U]
		for _, u := range units {
			for _, fx := range e.def.Effects {
				calls = append(calls, &call[U]{fx: fx, key: fx.KeyOf(u), u: u, unitKey: e.def.KeyOf(u)})
			}
		}
		e.performAll(ctx, calls, rep)
		return ctx.Err()
	})
}

// RecordUnitFailure counts a failed attempt at writing u, in a transaction
// of its own, as a run does for a unit whose write failed: at the job's
// max_attempts the unit is parked (it returns OutcomeParked) and listed by
// Store.Parked; before that it returns OutcomeFailed. A queue worker calls
// it after rolling back, so the queue's retries and the ledger's attempts
// are the same attempts.
func (e *Engine[U]) RecordUnitFailure(ctx context.Context, u U, cause error) Outcome {
	key := e.def.KeyOf(u)
	return e.failedOutcome(ctx, u, key, cause, e.opt.log.With(slog.String("job", e.def.Name), slog.String("key", key)))
}

// Hit calls the crash hook at p, for integrations that own a durable
// boundary of the job (a queue worker's commit); nil without a hook.
func (e *Engine[U]) Hit(ctx context.Context, p CrashPoint, detail string) error {
	return e.hit(ctx, p, detail)
}

// Logger returns the job's logger.
func (e *Engine[U]) Logger() *slog.Logger { return e.opt.log }
