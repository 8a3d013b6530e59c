// Hand-written behaviour tests of the generated sqliteonly package (idemgen
// leaves this file alone: it has no generated-code header).
package sqliteonly_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/sqliteonly"
)

type tags struct{ pages [][]sqliteonly.Tag }

func (s *tags) Fetch(ctx context.Context, cur string) ([]sqliteonly.Tag, string, error) {
	i := 0
	if cur != "" {
		i = int(cur[0] - '0')
	}
	if i >= len(s.pages) {
		return nil, cur, nil
	}
	return s.pages[i], string(rune('1' + i)), nil
}

// A one-field unit on SQLite only: insert_once dedupes repeats across pages.
func TestSingleFieldUnitOnSQLite(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := sqliteonly.NewSQLiteStore(db.SQL)
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		src := &tags{pages: [][]sqliteonly.Tag{{{Tag: "go"}, {Tag: "sql"}}, {{Tag: "go"}, {Tag: "yaml"}}}}
		j, err := sqliteonly.NewTagCollect(st, src, idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := j.Run(ctx); err != nil || rep.Inserted != 3 || rep.Deduped != 1 {
			t.Fatalf("run: %s, %v", rep, err)
		}
		rows, err := j.Rows(ctx)
		if err != nil || len(rows) != 3 || rows[0].Tag != "go" || rows[1].Tag != "sql" || rows[2].Tag != "yaml" {
			t.Fatalf("rows %v, %v", rows, err)
		}
		if rep, err := j.Run(ctx); err != nil || rep.Seen != 0 {
			t.Fatalf("second run: %s, %v", rep, err)
		}
	}, "sqlite")
}
