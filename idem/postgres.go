package idem

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PgInTx runs fn in a READ COMMITTED transaction: the unique constraints
// and ON CONFLICT clauses, not isolation, are what keep writes idempotent.
func PgInTx(ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// PgNoRows reports the "no row" result of a :one query, which for an upsert
// means "nothing written", not an error.
func PgNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// ValueOr is *p, or T's zero value for nil: the element a batch write puts
// in a column's array where the parallel NULL array says true.
func ValueOr[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}

// BatchOutcomes maps what a batch write returned (key to "inserted",
// "updated" or "unchanged") back onto its keys, in order; a key with no row
// back was left alone by the conflict clause, which is nothing.
func BatchOutcomes(keys []string, written map[string]string, nothing Outcome) []Outcome {
	out := make([]Outcome, len(keys))
	for i, k := range keys {
		out[i] = nothing
		if w, ok := written[k]; ok {
			out[i] = Outcome(w)
		}
	}
	return out
}
