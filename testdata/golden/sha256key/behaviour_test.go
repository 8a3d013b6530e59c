// Hand-written behaviour tests of the generated sha256key package (idemgen
// leaves this file alone: it has no generated-code header).
package sha256key_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/sha256key"
)

func open(t *testing.T, db testdb.DB) *sha256key.Store {
	t.Helper()
	var st *sha256key.Store
	if db.Pool != nil {
		st = sha256key.NewPostgresStore(db.Pool)
	} else {
		st = sha256key.NewSQLiteStore(db.SQL)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// hashOf is the documented content hash: each part's length (8 bytes, big
// endian) then its bytes, hex-encoded.
func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestSHA256KeysAreStableAndDistinct(t *testing.T) {
	p := sha256key.Price{Sku: "ab", Region: "c", Rev: 1}
	if got, want := p.Key(), "price:"+hashOf("ab", "c"); got != want {
		t.Fatalf("key %q, want %q", got, want)
	}
	// Data fields are not part of the key; the field boundary is.
	q := p
	q.Rev, q.Cents, q.SeenAt = 9, 9, time.Now()
	if q.Key() != p.Key() {
		t.Fatal("the key depends on fields outside sha256(sku, region)")
	}
	if (sha256key.Price{Sku: "a", Region: "bc"}).Key() == p.Key() {
		t.Fatal(`("ab","c") and ("a","bc") share a key`)
	}
	if got, want := sha256key.PublishChangeKey(p), "publish:v1:"+hashOf("ab", "c")+":1"; got != want {
		t.Fatalf("effect key %q, want %q", got, want)
	}
}

type prices struct{ list []sha256key.Price }

func (s *prices) Fetch(ctx context.Context, w idem.Window, page string) ([]sha256key.Price, string, error) {
	var out []sha256key.Price
	for _, p := range s.list {
		if !p.SeenAt.Before(w.Since) && p.SeenAt.Before(w.Until) {
			out = append(out, p)
		}
	}
	return out, "", nil
}

type providers struct{ publish, index testdb.Calls }

func (p *providers) PublishChange(ctx context.Context, key string, u sha256key.Price) error {
	p.publish.Add(key)
	return nil
}

func (p *providers) TouchIndex(ctx context.Context, key string, u sha256key.Price) error {
	p.index.Add(key)
	return nil
}

func TestChangedNewerWinsAndRenamedTables(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		base := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
		src := &prices{}
		fx := &providers{}
		j, err := sha256key.NewPriceSync(st, src, sha256key.PriceSyncEffects{PublishChange: fx, TouchIndex: fx},
			idem.WithClock(func() time.Time { return base }), idem.WithLogger(testdb.Quiet), idem.WithStart(base.Add(-time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		window := idem.Window{Since: base.Add(-time.Hour), Until: base}
		serve := func(rev, cents int64) idem.Report {
			t.Helper()
			src.list = []sha256key.Price{
				{Sku: "sku-1", Region: "eu", Rev: rev, Cents: cents, SeenAt: base.Add(-time.Minute)},
				{Sku: "sku-1", Region: "us", Rev: 1, Cents: 7, SeenAt: base.Add(-time.Minute)},
			}
			rep, err := j.Backfill(ctx, window)
			if err != nil {
				t.Fatal(err)
			}
			return rep
		}
		want := func(step string, publish, index int) {
			t.Helper()
			if fx.publish.Total() != publish || fx.publish.Keys() != publish || fx.index.Total() != index || fx.index.Keys() != index {
				t.Fatalf("%s: publish %d calls over %d keys (want %d), index %d over %d (want %d)", step,
					fx.publish.Total(), fx.publish.Keys(), publish, fx.index.Total(), fx.index.Keys(), index)
			}
		}

		if rep := serve(2, 200); rep.Inserted != 2 || rep.EffectsDone != 4 {
			t.Fatalf("insert: %s", rep)
		}
		want("insert: when changed fires on insert", 2, 2)
		if rep := serve(2, 200); rep.Unchanged != 2 || rep.EffectsDone != 0 {
			t.Fatalf("re-run: %s", rep)
		}
		want("re-run: nothing fires", 2, 2)
		if rep := serve(3, 300); rep.Updated != 1 || rep.Unchanged != 1 || rep.EffectsDone != 1 {
			t.Fatalf("update: %s", rep)
		}
		want("update: when changed fires again under the new rev; when always is deduped by its key", 3, 2)
		// Older replays, of a revision seen before and of one never seen:
		// newer_wins keeps rev 3 and nothing fires for stale data.
		for _, old := range []int64{2, 1} {
			if rep := serve(old, 1); rep.Unchanged != 2 || rep.Updated != 0 || rep.EffectsDone != 0 {
				t.Fatalf("older replay rev %d: %s", old, rep)
			}
			want("older replay", 3, 2)
		}
		rows, err := j.Rows(ctx)
		if err != nil || len(rows) != 2 {
			t.Fatalf("rows %v, %v", rows, err)
		}
		for _, r := range rows {
			if r.Region == "eu" && (r.Rev != 3 || r.Cents != 300) {
				t.Fatalf("eu row %+v, want rev 3 (newer wins)", r)
			}
		}
		// The bookkeeping lives in the renamed tables.
		var n int64
		if db.Pool != nil {
			err = db.Pool.QueryRow(ctx, "SELECT count(*) FROM hk_ledger").Scan(&n)
		} else {
			err = db.SQL.QueryRowContext(ctx, "SELECT count(*) FROM hk_ledger").Scan(&n)
		}
		if err != nil || n != 5 {
			t.Fatalf("hk_ledger has %d rows, %v; want 5", n, err)
		}
	})
}
