// Hand-written behaviour tests of the generated types package (idemgen
// leaves this file alone: it has no generated-code header).
package types_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/types"
)

func open(t *testing.T, db testdb.DB) *types.Store {
	t.Helper()
	var st *types.Store
	if db.Pool != nil {
		st = types.NewPostgresStore(db.Pool)
	} else {
		st = types.NewSQLiteStore(db.SQL)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// source serves records by their At field, one page for the whole window.
type source struct {
	records map[string]types.Record
	fetches int
}

func (s *source) Fetch(ctx context.Context, w idem.Window, page string) ([]types.Record, string, error) {
	s.fetches++
	var out []types.Record
	for _, r := range s.records {
		if !r.At.Before(w.Since) && r.At.Before(w.Until) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b types.Record) int { return a.At.Compare(b.At) })
	return out, "", nil
}

func ptr[T any](v T) *T { return &v }

var base = time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC) // near a DST change in Europe

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Skipf("time zone %s: %v", name, err)
	}
	return loc
}

// records has one with every value set (times in several zones, edge
// values), one with every nullable NULL, and one whose nullables hold the
// zero values, which must not read back as NULL.
func records(t *testing.T) []types.Record {
	kolkata := zone(t, "Asia/Kolkata")
	newYork := zone(t, "America/New_York")
	return []types.Record{
		{
			ID: "full", Str: "héllo, 世界 'quoted' \"twice\"", StrNull: ptr("set"),
			I32: math.MinInt32, I32Null: ptr(int32(math.MaxInt32)),
			I64: math.MaxInt64, I64Null: ptr(int64(math.MinInt64)),
			F64: 0.1, F64Null: ptr(-1.5e300),
			Flag: true, FlagNull: ptr(false),
			At:     base.Add(-time.Hour).In(kolkata).Add(123456 * time.Microsecond),
			AtNull: ptr(base.Add(-2 * time.Hour).In(newYork)),
			Blob:   []byte{0, 1, 2, 0xff}, BlobNull: []byte("not null"),
			Doc: json.RawMessage(`{"a":[1,2,{"b":null}],"c":"d"}`), DocNull: json.RawMessage(`[true]`),
			Uid: uuid.MustParse("6ba7b810-9dad-11d1-80b4-00c04fd430c8"), UidNull: ptr(uuid.MustParse("f47ac10b-58cc-4372-a567-0e02b2c3d479")),
		},
		{
			ID: "nulls", Str: "x", I32: 1, I64: 2, F64: 3, At: base.Add(-3 * time.Hour).In(time.FixedZone("", -7*3600)),
			Blob: []byte("b"), Doc: json.RawMessage(`{}`), Uid: uuid.MustParse("00000000-0000-0000-0000-000000000001"),
		},
		{
			ID: "zeros", StrNull: ptr(""), I32Null: ptr(int32(0)), I64Null: ptr(int64(0)), F64Null: ptr(0.0),
			FlagNull: ptr(false), At: base.Add(-4 * time.Hour), AtNull: ptr(time.Time{}.Add(time.Hour)),
			Blob: []byte{}, BlobNull: []byte{}, Doc: json.RawMessage(`0`), DocNull: json.RawMessage(`""`),
			UidNull: ptr(uuid.Nil),
		},
		// The zero value of the struct: nil bytes and json in NOT NULL
		// columns store as empty bytes and JSON null, as json.Marshal says.
		{ID: "empty", At: base.Add(-5 * time.Hour)},
	}
}

// stored is what a record reads back as: nil non-null bytes and json as
// empty bytes and JSON null.
func stored(r types.Record) types.Record {
	if r.Blob == nil {
		r.Blob = []byte{}
	}
	if r.Doc == nil {
		r.Doc = json.RawMessage("null")
	}
	return r
}

// sameRecord compares field by field: times as instants, JSON by value
// (PostgreSQL's jsonb keeps values, not text), everything else exactly. A
// NULL bytes? field reads back nil and an empty one empty, on both
// databases (the SQLite driver binds a nil []byte as an empty BLOB, so the
// generated SQLite store passes nullable BLOBs as *[]byte).
func sameRecord(t *testing.T, got, want types.Record) {
	t.Helper()
	errorf := func(field string, g, w any) { t.Errorf("%s.%s: got %#v, want %#v", want.ID, field, g, w) }
	if got.ID != want.ID {
		errorf("ID", got.ID, want.ID)
	}
	if got.Str != want.Str {
		errorf("Str", got.Str, want.Str)
	}
	if !eqPtr(got.StrNull, want.StrNull) {
		errorf("StrNull", got.StrNull, want.StrNull)
	}
	if got.I32 != want.I32 || !eqPtr(got.I32Null, want.I32Null) {
		errorf("I32/I32Null", []any{got.I32, got.I32Null}, []any{want.I32, want.I32Null})
	}
	if got.I64 != want.I64 || !eqPtr(got.I64Null, want.I64Null) {
		errorf("I64/I64Null", []any{got.I64, got.I64Null}, []any{want.I64, want.I64Null})
	}
	if got.F64 != want.F64 || !eqPtr(got.F64Null, want.F64Null) {
		errorf("F64/F64Null", []any{got.F64, got.F64Null}, []any{want.F64, want.F64Null})
	}
	if got.Flag != want.Flag || !eqPtr(got.FlagNull, want.FlagNull) {
		errorf("Flag/FlagNull", []any{got.Flag, got.FlagNull}, []any{want.Flag, want.FlagNull})
	}
	if !got.At.Equal(want.At) {
		errorf("At", got.At, want.At)
	}
	if (got.AtNull == nil) != (want.AtNull == nil) || got.AtNull != nil && !got.AtNull.Equal(*want.AtNull) {
		errorf("AtNull", got.AtNull, want.AtNull)
	}
	if !bytes.Equal(got.Blob, want.Blob) || got.Blob == nil {
		errorf("Blob", got.Blob, want.Blob)
	}
	if !bytes.Equal(got.BlobNull, want.BlobNull) || (got.BlobNull == nil) != (want.BlobNull == nil) {
		errorf("BlobNull", got.BlobNull, want.BlobNull)
	}
	if !sameJSON(got.Doc, want.Doc) || got.Doc == nil {
		errorf("Doc", string(got.Doc), string(want.Doc))
	}
	if !sameJSON(got.DocNull, want.DocNull) || (got.DocNull == nil) != (want.DocNull == nil) {
		errorf("DocNull", string(got.DocNull), string(want.DocNull))
	}
	if got.Uid != want.Uid || !eqPtr(got.UidNull, want.UidNull) {
		errorf("Uid/UidNull", []any{got.Uid, got.UidNull}, []any{want.Uid, want.UidNull})
	}
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func job(t *testing.T, st *types.Store, src *source, clk *testdb.Clock) *types.AllTypes {
	t.Helper()
	j, err := types.NewAllTypes(st, src, idem.WithClock(clk.Now), idem.WithLogger(testdb.Quiet), idem.WithStart(base.Add(-48*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func rowsByID(t *testing.T, j *types.AllTypes) map[string]types.Record {
	t.Helper()
	rs, err := j.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]types.Record{}
	for _, r := range rs {
		out[r.ID] = r
	}
	if len(out) != len(rs) {
		t.Fatalf("%d rows for %d ids", len(rs), len(out))
	}
	return out
}

func TestEveryTypeRoundTrips(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		src := &source{records: map[string]types.Record{}}
		want := records(t)
		for _, r := range want {
			src.records[r.ID] = r
		}
		clk := testdb.NewClock(base)
		j := job(t, st, src, clk)
		rep, err := j.Run(ctx)
		if err != nil || rep.Inserted != len(want) || rep.Failed != 0 {
			t.Fatalf("first run: %s, %v", rep, err)
		}
		got := rowsByID(t, j)
		for _, w := range want {
			sameRecord(t, got[w.ID], stored(w))
		}

		// Re-running the window writes nothing: every value compares equal
		// to what the database holds, NULLs and zones included.
		clk.Advance(time.Minute)
		for range 2 {
			rep, err = j.Backfill(ctx, idem.Window{Since: base.Add(-48 * time.Hour), Until: base})
			if err != nil || rep.Unchanged != len(want) || rep.Inserted+rep.Updated+rep.Failed != 0 {
				t.Fatalf("re-run: %s, %v", rep, err)
			}
		}
		// The same instant in another zone is the same value.
		full := want[0]
		full.At = full.At.UTC()
		src.records["full"] = full
		if rep, err = j.Backfill(ctx, idem.Window{Since: base.Add(-48 * time.Hour), Until: base}); err != nil || rep.Unchanged != len(want) {
			t.Fatalf("same instants in UTC: %s, %v", rep, err)
		}

		// Setting every nullable to NULL, and NULLs to values, is a change each way.
		swapped := want[0]
		swapped.StrNull, swapped.I32Null, swapped.I64Null, swapped.F64Null, swapped.FlagNull = nil, nil, nil, nil, nil
		swapped.AtNull, swapped.BlobNull, swapped.DocNull, swapped.UidNull = nil, nil, nil, nil
		filled := want[1]
		filled.StrNull, filled.I32Null, filled.AtNull, filled.DocNull, filled.UidNull =
			ptr("now set"), ptr(int32(-7)), ptr(base.Add(time.Hour)), json.RawMessage(`null`), ptr(uuid.Max)
		src.records[swapped.ID], src.records[filled.ID] = swapped, filled
		rep, err = j.Backfill(ctx, idem.Window{Since: base.Add(-48 * time.Hour), Until: base})
		if err != nil || rep.Updated != 2 || rep.Unchanged != 2 {
			t.Fatalf("nulls swapped: %s, %v", rep, err)
		}
		got = rowsByID(t, j)
		sameRecord(t, got["full"], swapped)
		sameRecord(t, got["nulls"], filled)
		sameRecord(t, got["zeros"], want[2])
		sameRecord(t, got["empty"], stored(want[3]))
		if src.fetches != 5 {
			t.Fatalf("source fetched %d times, want 5 (one page per run)", src.fetches)
		}
	})
}

func TestKeyAndStale(t *testing.T) {
	if got := (types.Record{ID: "a:b"}).Key(); got != "types:a:b" {
		t.Fatalf("key %q", got)
	}
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		st := open(t, db)
		r := records(t)[1]
		clk := testdb.NewClock(base)
		j := job(t, st, &source{records: map[string]types.Record{r.ID: r}}, clk)
		if _, err := j.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Version 1 wrote every row: none is stale for version 1.
		if stale, err := j.Stale(context.Background(), 10); err != nil || len(stale) != 0 {
			t.Fatalf("stale: %v, %v", stale, err)
		}
	})
}
