// Hand-written (idemgen leaves this file alone: it has no generated-code
// header): the handler docs/runtime.md quotes in "Two modelling questions".

package modelling

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Signups handles the identity provider's sign-up webhook: one event per
// delivery (retried deliveries repeat its id), one welcome per user.
type Signups struct {
	Events *SignupWebhook // keyed by event
	Users  *UserWelcome   // keyed by user: its welcome is once per user
}

// HandleSQL records the event, writes the service's own audit row and hands
// the user in for a welcome, in one transaction of db (SQLite): all of it
// commits, or none. After the commit it performs the welcome, if owed.
func (s *Signups) HandleSQL(ctx context.Context, db *sql.DB, ev SignupEvent, email string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	// A second row of the service's own: a plain write in the unit's transaction.
	if _, err := tx.ExecContext(ctx, `INSERT INTO signup_audit (event_id, user_id) VALUES (?, ?)
		ON CONFLICT (event_id) DO NOTHING`, ev.EventID, ev.UserID); err != nil {
		return err
	}
	if _, err := s.Events.ProcessSQLTx(ctx, tx, ev); err != nil {
		return err
	}
	// Once per user: the user is a unit of its own job, keyed by user.
	if _, err := s.Users.ProcessSQLTx(ctx, tx, NewUser{UserID: ev.UserID, Email: email}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	_, err = s.Users.Drain(ctx)
	return err
}

// HandlePg is HandleSQL on PostgreSQL, in a transaction of pool.
func (s *Signups) HandlePg(ctx context.Context, pool *pgxpool.Pool, ev SignupEvent, email string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO signup_audit (event_id, user_id) VALUES ($1, $2)
		ON CONFLICT (event_id) DO NOTHING`, ev.EventID, ev.UserID); err != nil {
		return err
	}
	if _, err := s.Events.ProcessTx(ctx, tx, ev); err != nil {
		return err
	}
	if _, err := s.Users.ProcessTx(ctx, tx, NewUser{UserID: ev.UserID, Email: email}); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	_, err = s.Users.Drain(ctx)
	return err
}
