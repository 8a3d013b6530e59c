// Package idemtest is for tests only: production code must not import it
// (idemgen lint reports an import from a file that is not a _test.go
// file). It holds two things.
//
// The hooks a test sets in a job, which the runtime's API (idem, idemrt)
// does not offer: a crash hook called at the job's crash points
// (WithCrashHook, Hit), an edit of its definition (WithJobEdit), and a
// simulated clock for leases and waits (WithLeaseClock, WithPaceWait,
// WithSlotWait). The crash tests idemgen generates set them through
// idem/crashsim.
//
// A PostgreSQL schema of its own for a test, on the database that
// IDEMGEN_TEST_POSTGRES names, dropped when the test ends; the schemas
// that test processes killed before their cleanup left behind are dropped
// too. Every PostgreSQL test of idemgen uses it: the generated crash tests
// (through idem/crashsim, so it lives in the runtime module users already
// import), the generator's and the example's.
//
//	func TestOnPostgres(t *testing.T) {
//		pg := idemtest.OpenPostgres(t) // skips t when IDEMGEN_TEST_POSTGRES is unset
//		schema := pg.NewSchema(t)      // dropped when t ends
//		pool, err := pgxpool.NewWithConfig(ctx, pg.Config(schema)) // search_path = schema
//		if err != nil {
//			t.Fatal(err)
//		}
//		t.Cleanup(pool.Close) // cleanups run last first: the pool closes before the drop
//		...
//	}
//
// For database/sql: stdlib.OpenDB(*pg.Config(schema).ConnConfig).
package idemtest
