package sqlgen

import (
	"context"
	"database/sql"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// A ledger made by an idemgen that kept five indexes (_pending, _unit and
// _done holding every row) gets the three of this version. On PostgreSQL
// the new ones are built CONCURRENTLY before the old ones are dropped the
// same way, so no query is without its index in between; Down builds the
// old ones again before dropping the new. SQLite drops and creates in its
// transaction, and keeps its full _pending. Both run on a ledger with rows.
func TestLedgerIndexesAreReplaced(t *testing.T) {
	p := shopPackage(t)
	ledger := p.Tables.Ledger
	before := []Index{
		{Name: ledger + "_pending", Columns: []string{"job", "state", "effect_key"}},
		{Name: ledger + "_unit", Columns: []string{"job", "effect", "unit_key"}},
		{Name: ledger + "_done", Columns: []string{"job", "effect", "state", "done_at"}},
		{Name: ledger + "_unit_key", Columns: []string{"job", "unit_key"}},
	}
	for _, d := range []model.Dialect{model.SQLite, model.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			want := SchemaOf(p, d)
			old := want
			old.Tables = slices.Clone(want.Tables)
			for i := range old.Tables {
				if old.Tables[i].Role == RoleLedger {
					old.Tables[i].Indexes = before
				}
			}
			migs, next, err := ChangeMigration(old, want, 2, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(migs) != 1 {
				t.Fatalf("%d migrations, want 1", len(migs))
			}
			up, down, _ := strings.Cut(string(migs[0]), "-- +goose Down")
			// in checks that each line is in text, in this order.
			in := func(what, text string, lines ...string) {
				t.Helper()
				at := 0
				for _, l := range lines {
					i := strings.Index(text[at:], l)
					if i < 0 {
						t.Fatalf("%s lacks %q after what came before it:\n%s", what, l, migs[0])
					}
					at += i + len(l)
				}
			}
			if d == model.Postgres {
				in("Up", up, "-- +goose NO TRANSACTION",
					"CREATE INDEX CONCURRENTLY IF NOT EXISTS shop_idem_ledger_open ON shop_idem_ledger (job, state, effect_key) WHERE state <> 'done';",
					"CREATE INDEX CONCURRENTLY IF NOT EXISTS shop_idem_ledger_done_at ON shop_idem_ledger (job, effect, done_at) WHERE state = 'done';",
					"DROP INDEX CONCURRENTLY IF EXISTS shop_idem_ledger_pending;",
					"DROP INDEX CONCURRENTLY IF EXISTS shop_idem_ledger_unit;",
					"DROP INDEX CONCURRENTLY IF EXISTS shop_idem_ledger_done;")
				in("Down", down,
					"CREATE INDEX CONCURRENTLY IF NOT EXISTS shop_idem_ledger_done ON shop_idem_ledger (job, effect, state, done_at);",
					"CREATE INDEX CONCURRENTLY IF NOT EXISTS shop_idem_ledger_unit ON shop_idem_ledger (job, effect, unit_key);",
					"CREATE INDEX CONCURRENTLY IF NOT EXISTS shop_idem_ledger_pending ON shop_idem_ledger (job, state, effect_key);",
					"DROP INDEX CONCURRENTLY IF EXISTS shop_idem_ledger_done_at;",
					"DROP INDEX CONCURRENTLY IF EXISTS shop_idem_ledger_open;")
			} else {
				in("Up", up, "DROP INDEX shop_idem_ledger_unit;", "DROP INDEX shop_idem_ledger_done;",
					"CREATE INDEX IF NOT EXISTS shop_idem_ledger_done_at ON shop_idem_ledger (job, effect, done_at) WHERE state = 'done';")
				if strings.Contains(string(migs[0]), "_pending") {
					t.Errorf("SQLite's migration touches _pending, which it keeps:\n%s", migs[0])
				}
			}
			if again, _, err := ChangeMigration(next, want, 3, nil); err != nil || len(again) > 0 {
				t.Fatalf("after migration 2 the schema still differs: %v\n%s", err, again)
			}

			oldSchema := want
			oldSchema.Tables = old.Tables
			db := openDB(t, d)
			prov := shopMigratedTo1(t, db, d, initialMigration(oldSchema), migs[0])
			ctx := context.Background()
			blob := blobLiteral(d)
			for i, state := range []string{"pending", "done", "failed"} {
				mustExec(t, db, `INSERT INTO shop_idem_ledger (effect_key, job, effect, effect_version, job_version, unit_key, payload, state, created_at, updated_at)
					VALUES ('k`+string(rune('0'+i))+`', 'order_sync', 'notify', 1, 1, 'order:o1', `+blob+`, '`+state+`', '2024-01-02T03:04:05Z', '2024-01-02T03:04:05Z')`)
			}
			indexes := func() []string {
				t.Helper()
				q := `SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'shop_idem_ledger' AND sql IS NOT NULL ORDER BY name`
				if d == model.Postgres {
					q = `SELECT indexname FROM pg_indexes WHERE tablename = 'shop_idem_ledger' AND indexname <> 'shop_idem_ledger_pkey' ORDER BY indexname`
				}
				return queryStrings(t, db, q)
			}
			names := func(ixs []Index) []string {
				var out []string
				for _, ix := range ixs {
					out = append(out, ix.Name)
				}
				slices.Sort(out)
				return out
			}
			if got := indexes(); !slices.Equal(got, names(before)) {
				t.Fatalf("indexes after migration 1: %v, want %v", got, names(before))
			}
			if _, err := prov.Up(ctx); err != nil {
				t.Fatalf("migration 2 on a ledger with rows: %v", err)
			}
			if got, w := indexes(), names(byRole(want, RoleLedger).Indexes); !slices.Equal(got, w) {
				t.Errorf("indexes after migration 2: %v, want %v", got, w)
			}
			if _, err := prov.DownTo(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if got := indexes(); !slices.Equal(got, names(before)) {
				t.Errorf("indexes after Down: %v, want %v", got, names(before))
			}
		})
	}
}

func queryStrings(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	rows, err := db.Query(q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
