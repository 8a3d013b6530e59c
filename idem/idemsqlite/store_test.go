package idemsqlite_test

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"

	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemsqlite"
	"github.com/idemgen/idemgen/idem/storetest"
)

// TestStoreContract runs the stores' conformance suite on SQLite, on the
// tables of the example's package billing as its migrations create them,
// through the store its generated code builds.
func TestStoreContract(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) storetest.Opened {
		path := filepath.Join(t.TempDir(), "ledger.db")
		open := func() *sql.DB {
			db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		}
		db := open()
		generated := billing.NewSQLiteStore(db)
		if err := generated.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, ok := generated.Runtime().(idemsqlite.Store)
		if !ok {
			t.Fatalf("billing's SQLite store runs on %T, not an idemsqlite.Store", generated.Runtime())
		}
		outside, ok := billing.NewSQLiteStore(open()).Runtime().(idemsqlite.Store)
		if !ok {
			t.Fatal("billing's SQLite store is not an idemsqlite.Store")
		}
		return storetest.Opened{
			Store:   st,
			Outside: outside,
			Begin: func(ctx context.Context, t *testing.T) (idemrt.Querier, func() error, func() error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				return st.SQLTx(tx), tx.Commit, tx.Rollback
			},
		}
	})
}
