// Hand-written behaviour tests of the generated adopted package (idemgen
// leaves this file alone: it has no generated-code header).
package adopted_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/adopted"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
)

func store(db testdb.DB) *adopted.Store {
	if db.Pool != nil {
		return adopted.NewPostgresStore(db.Pool)
	}
	return adopted.NewSQLiteStore(db.SQL)
}

type signups []adopted.Signup

func (s signups) Fetch(ctx context.Context, w idem.Window, page string) ([]adopted.Signup, string, error) {
	var in []adopted.Signup
	for _, u := range s {
		if !u.SignedUpAt.Before(w.Since) && u.SignedUpAt.Before(w.Until) {
			in = append(in, u)
		}
	}
	return in, "", nil
}

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// The service's migrations created signups long ago, with a column of its
// own and a row idemgen never wrote. idemgen's Migrate creates nothing for
// it, finds it fits, and the job writes into it beside the old row.
func TestAdoptedTableFits(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		db.Exec(t,
			`CREATE TABLE signups (
				id INTEGER PRIMARY KEY,
				email TEXT NOT NULL UNIQUE,
				locale TEXT,
				signed_up_at TEXT NOT NULL,
				source TEXT NOT NULL DEFAULT 'web',
				idemgen_key TEXT NOT NULL DEFAULT '',
				idemgen_job_version INTEGER NOT NULL DEFAULT 0,
				idemgen_rev INTEGER NOT NULL DEFAULT 1,
				idemgen_write TEXT NOT NULL DEFAULT 'inserted');
			INSERT INTO signups (email, signed_up_at, source) VALUES ('old@example.com', '2020-01-01T00:00:00Z', 'import')`,
			`CREATE TABLE signups (
				id bigserial PRIMARY KEY,
				email varchar(320) NOT NULL,
				locale text,
				signed_up_at timestamptz NOT NULL,
				source text NOT NULL DEFAULT 'web',
				idemgen_key text NOT NULL DEFAULT '',
				idemgen_job_version integer NOT NULL DEFAULT 0,
				idemgen_rev bigint NOT NULL DEFAULT 1,
				idemgen_write text NOT NULL DEFAULT 'inserted');
			CREATE UNIQUE INDEX signups_email ON signups (email);
			INSERT INTO signups (email, signed_up_at, source) VALUES ('old@example.com', '2020-01-01T00:00:00Z', 'import')`)
		st := store(db)
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("Migrate on a table that fits: %v", err)
		}
		calls := &testdb.Calls{}
		src := signups{
			{Email: "a@example.com", SignedUpAt: base.Add(-3 * time.Minute)},
			{Email: "old@example.com", SignedUpAt: base.Add(-2 * time.Minute)},
		}
		j, err := adopted.NewSignupSync(st, src, adopted.SignupSyncEffects{
			Welcome: adopted.WelcomeFunc(func(ctx context.Context, key string, u adopted.Signup) error { calls.Add(key); return nil }),
		}, idem.WithClock(testdb.NewClock(base).Now), idem.WithStart(base.Add(-time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := j.Run(ctx)
		// The old row is the service's: the job's write updates it (it is
		// not an insert, so no welcome), and inserts the new one.
		if err != nil || rep.Inserted != 1 || rep.Updated != 1 || calls.Total() != 1 || calls.Of("welcome:a@example.com") != 1 {
			t.Fatalf("run: %s, %v, %d calls", rep, err, calls.Total())
		}
		rows, err := j.Rows(ctx)
		if err != nil || len(rows) != 2 {
			t.Fatalf("rows: %v, %v", rows, err)
		}
		// Migrate again (every start-up) checks again and still passes.
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Migrate never creates an adopted table, and names everything a table
// lacks, all at once: a missing table; then a missing column, a column the
// job writes NULLs into that is NOT NULL, a wrong type, a NOT NULL column
// the job would leave empty, a bookkeeping column without its default and
// no unique constraint on the key's fields.
func TestAdoptedTableThatDoesNotFitIsRefused(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := store(db)
		err := st.Migrate(ctx)
		if err == nil || !strings.Contains(err.Error(), "job signup_sync: adopted table signups: does not exist") {
			t.Fatalf("Migrate without the table: %v", err)
		}
		db.Exec(t,
			`CREATE TABLE signups (
				email TEXT NOT NULL,
				locale TEXT NOT NULL,
				signed_up_at BLOB NOT NULL,
				owner TEXT NOT NULL,
				idemgen_key TEXT NOT NULL,
				idemgen_job_version INTEGER NOT NULL,
				idemgen_rev INTEGER NOT NULL)`,
			`CREATE TABLE signups (
				email text NOT NULL,
				locale text NOT NULL,
				signed_up_at timestamp NOT NULL,
				owner text NOT NULL,
				idemgen_key text NOT NULL,
				idemgen_job_version integer NOT NULL,
				idemgen_rev bigint NOT NULL)`)
		err = st.Migrate(ctx)
		if err == nil {
			t.Fatal("Migrate accepted a table that does not fit")
		}
		for _, want := range []string{
			"missing column idemgen_write (add idemgen_write ",
			"column locale is NOT NULL, but its field is nullable",
			"column signed_up_at is ",
			"column owner is NOT NULL without a default",
			"column idemgen_rev has no default; the job's inserts leave it to DEFAULT 1",
			"no unique constraint or unique index on exactly (email)",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal does not say %q:\n%v", want, err)
			}
		}
		if n := strings.Count(err.Error(), "job signup_sync: adopted table signups: "); n != 6 {
			t.Errorf("%d problems named, want 6:\n%v", n, err)
		}
	})
}
