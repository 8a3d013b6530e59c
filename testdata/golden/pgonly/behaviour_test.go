// Hand-written behaviour tests of the generated pgonly package (idemgen
// leaves this file alone: it has no generated-code header).
package pgonly_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/pgonly"
)

// A one-field unit: every column is in the unique key, so a repeat is unchanged.
func TestSingleFieldUnitOnPostgres(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := pgonly.NewPostgresStore(db.Pool)
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		j, err := pgonly.NewDeviceRegister(st, idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		a, b := pgonly.Device{DeviceID: uuid.MustParse("0e4f1c35-9e2c-4c55-9d39-0f0b6a6f4f01")}, pgonly.Device{DeviceID: uuid.Max}
		if rep, err := j.Process(ctx, a, b); err != nil || rep.Inserted != 2 {
			t.Fatalf("first: %s, %v", rep, err)
		}
		if rep, err := j.Process(ctx, b); err != nil || rep.Deduped != 1 {
			t.Fatalf("repeat: %s, %v", rep, err)
		}
		rows, err := j.Rows(ctx)
		if err != nil || len(rows) != 2 || rows[0] != a || rows[1] != b {
			t.Fatalf("rows %v, %v", rows, err)
		}
		if a.Key() != "device:0e4f1c35-9e2c-4c55-9d39-0f0b6a6f4f01" {
			t.Fatalf("key %q", a.Key())
		}
	}, "postgres")
}
