// Hand-written behaviour tests of the generated adopted package (idemgen
// leaves this file alone: it has no generated-code header).
package adopted_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
)

// tablesIn lists the database's tables (the test's schema, on PostgreSQL),
// with each one's column count, so that a change shows.
func tablesIn(t *testing.T, db testdb.DB) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	if db.Pool != nil {
		rows, err := db.Pool.Query(ctx, `SELECT table_name || ':' || count(*) FROM information_schema.columns
			WHERE table_schema = current_schema() GROUP BY table_name ORDER BY table_name`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	rows, err := db.SQL.QueryContext(ctx, `SELECT m.name || ':' || (SELECT count(*) FROM pragma_table_info(m.name))
		FROM sqlite_master m WHERE m.type IN ('table', 'index') ORDER BY m.name`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// A service adopts a table it has filled for years, without idemgen's
// bookkeeping columns: Migrate refuses before it creates or changes
// anything, and the statements it proposes, run as they are on the table
// with its rows, let the next Migrate pass.
func TestAdoptedRefusalChangesNothingAndItsFixRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		db.Exec(t,
			`CREATE TABLE signups (email TEXT NOT NULL, locale TEXT, signed_up_at TEXT NOT NULL);
			INSERT INTO signups (email, signed_up_at) VALUES ('old@example.com', '2020-01-01T00:00:00Z'), ('older@example.com', '2019-01-01T00:00:00Z')`,
			`CREATE TABLE signups (email text NOT NULL, locale text, signed_up_at timestamptz NOT NULL);
			INSERT INTO signups (email, signed_up_at) VALUES ('old@example.com', '2020-01-01T00:00:00Z'), ('older@example.com', '2019-01-01T00:00:00Z')`)
		before := tablesIn(t, db)
		st := store(db)
		err := st.Migrate(ctx)
		if err == nil {
			t.Fatal("Migrate accepted a table without its bookkeeping columns")
		}
		if after := tablesIn(t, db); !slices.Equal(after, before) {
			t.Fatalf("a refused Migrate changed the database:\nbefore %v\nafter  %v", before, after)
		}
		if !strings.Contains(err.Error(), "nothing was applied") {
			t.Errorf("the refusal does not say nothing was applied:\n%v", err)
		}
		var fixes []string
		for line := range strings.Lines(err.Error()) {
			if line = strings.TrimSpace(line); strings.HasSuffix(line, ";") {
				fixes = append(fixes, line)
			}
		}
		if len(fixes) != 5 || !slices.Contains(fixes, "ALTER TABLE signups ADD COLUMN idemgen_key "+map[string]string{"sqlite": "TEXT", "postgres": "text"}[db.Dialect()]+" NOT NULL DEFAULT '';") {
			t.Fatalf("proposed statements %q; want the 4 bookkeeping columns and the unique index, idemgen_key with DEFAULT '':\n%v", fixes, err)
		}
		for _, fix := range fixes {
			db.Exec(t, fix, fix) // as they are, on the table's rows
		}
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("Migrate after the proposed statements: %v", err)
		}
	})
}
