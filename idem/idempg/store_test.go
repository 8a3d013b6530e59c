package idempg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem/idempg"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/storetest"
)

// TestStoreContract runs the stores' conformance suite on PostgreSQL
// (IDEMGEN_TEST_POSTGRES), each test in a schema of its own with the
// tables of the example's package billing as its migrations create them,
// through the store its generated code builds.
func TestStoreContract(t *testing.T) {
	pg := idemtest.OpenPostgres(t)
	storetest.Exercise(t, func(t *testing.T) storetest.Opened {
		ctx := context.Background()
		schema := pg.NewSchema(t)
		pool, err := pgxpool.NewWithConfig(ctx, pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		outside, err := pgxpool.NewWithConfig(ctx, pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(outside.Close)
		generated := billing.NewPostgresStore(pool)
		if err := generated.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		st, ok := generated.Runtime().(idempg.Store)
		if !ok {
			t.Fatalf("billing's PostgreSQL store runs on %T, not an idempg.Store", generated.Runtime())
		}
		outsideStore, ok := billing.NewPostgresStore(outside).Runtime().(idempg.Store)
		if !ok {
			t.Fatal("billing's PostgreSQL store is not an idempg.Store")
		}
		return storetest.Opened{
			Store:   st,
			Outside: outsideStore,
			Begin: func(ctx context.Context, t *testing.T) (idemrt.Querier, func() error, func() error) {
				tx, err := pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return st.PgTx(tx), func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) }
			},
		}
	})
}
