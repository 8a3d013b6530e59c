// Hand-written behaviour tests of the generated modelling package (idemgen
// leaves this file alone: it has no generated-code header).
package modelling_test

import (
	"context"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/modelling"
)

// Three users' sign-ups, one delivered twice and one user signing up
// twice: one welcome per user, one event row and one audit row per event.
// An event whose audit row the database refuses leaves nothing: no event,
// no user, no welcome.
func TestWelcomeOncePerUserAndTheAuditRowInTheSameTransaction(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		var st *modelling.Store
		if db.Pool != nil {
			st = modelling.NewPostgresStore(db.Pool)
		} else {
			st = modelling.NewSQLiteStore(db.SQL)
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		// The service's own table, from its own migrations.
		db.Exec(t,
			`CREATE TABLE signup_audit (event_id TEXT PRIMARY KEY, user_id TEXT NOT NULL CHECK (user_id <> 'refused'))`,
			`CREATE TABLE signup_audit (event_id text PRIMARY KEY, user_id text NOT NULL CHECK (user_id <> 'refused'))`)
		calls := &testdb.Calls{}
		events, err := modelling.NewSignupWebhook(st, idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		users, err := modelling.NewUserWelcome(st, modelling.UserWelcomeEffects{
			Welcome: modelling.WelcomeFunc(func(ctx context.Context, key string, u modelling.NewUser) error { calls.Add(key); return nil }),
		}, idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		s := &modelling.Signups{Events: events, Users: users}
		handle := func(ev modelling.SignupEvent) error {
			if db.Pool != nil {
				return s.HandlePg(ctx, db.Pool, ev, ev.UserID+"@example.com")
			}
			return s.HandleSQL(ctx, db.SQL, ev, ev.UserID+"@example.com")
		}
		for _, ev := range []modelling.SignupEvent{
			{EventID: "e1", UserID: "u1"},
			{EventID: "e1", UserID: "u1"}, // the provider delivers e1 again
			{EventID: "e2", UserID: "u1"}, // u1 signs up again
			{EventID: "e3", UserID: "u2"},
		} {
			if err := handle(ev); err != nil {
				t.Fatalf("%s: %v", ev.EventID, err)
			}
		}
		if err := handle(modelling.SignupEvent{EventID: "e4", UserID: "refused"}); err == nil {
			t.Fatal("the refused audit row did not fail the handler")
		}
		if calls.Of("welcome:u1") != 1 || calls.Of("welcome:u2") != 1 || calls.Total() != 2 {
			t.Fatalf("welcomes: u1 %d, u2 %d, total %d; want one per user", calls.Of("welcome:u1"), calls.Of("welcome:u2"), calls.Total())
		}
		for _, c := range []struct {
			table string
			want  int
		}{{"signup_events", 3}, {"signup_audit", 3}, {"welcomed_users", 2}} {
			var n int
			var err error
			if db.Pool != nil {
				err = db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+c.table).Scan(&n)
			} else {
				err = db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM "+c.table).Scan(&n)
			}
			if err != nil || n != c.want {
				t.Errorf("%s: %d rows, %v; want %d", c.table, n, err, c.want)
			}
		}
	})
}

// A destination the database already has (the service's own migrations
// made it) fails Migrate, and the error says what to declare.
func TestExistingTableFailsMigrateWithAHint(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		db.Exec(t, `CREATE TABLE welcomed_users (user_id TEXT PRIMARY KEY)`, `CREATE TABLE welcomed_users (user_id text PRIMARY KEY)`)
		var st *modelling.Store
		if db.Pool != nil {
			st = modelling.NewPostgresStore(db.Pool)
		} else {
			st = modelling.NewSQLiteStore(db.SQL)
		}
		err := st.Migrate(context.Background())
		if err == nil || !strings.Contains(err.Error(), "already exists") || !strings.Contains(err.Error(), "declare it adopt: true in the spec") {
			t.Fatalf("Migrate over an existing table: %v", err)
		}
	})
}
