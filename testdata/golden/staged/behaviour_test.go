// Hand-written behaviour tests of the generated staged package (idemgen
// leaves this file alone: it has no generated-code header).
package staged_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
	"github.com/idemgen/idemgen/testdata/golden/staged"
)

func open(t *testing.T, db testdb.DB) *staged.Store {
	t.Helper()
	var st *staged.Store
	if db.Pool != nil {
		st = staged.NewPostgresStore(db.Pool)
	} else {
		st = staged.NewSQLiteStore(db.SQL)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// book serves entries by booked_at window, two per page.
type book struct {
	mu      sync.Mutex
	entries []staged.Entry
}

func (b *book) Fetch(ctx context.Context, w idem.Window, page string) ([]staged.Entry, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var in []staged.Entry
	for _, e := range b.entries {
		if !e.BookedAt.Before(w.Since) && e.BookedAt.Before(w.Until) {
			in = append(in, e)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].EntryID < in[j].EntryID })
	start := 0
	fmt.Sscan(page, &start)
	end := min(start+2, len(in))
	next := ""
	if end < len(in) {
		next = fmt.Sprint(end)
	}
	return in[start:end], next, nil
}

var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// rejectPoison makes the database refuse entries of account "poison".
func rejectPoison(t *testing.T, db testdb.DB) {
	t.Helper()
	db.Exec(t,
		`CREATE TRIGGER reject_poison BEFORE INSERT ON ledger_entries WHEN NEW.account = 'poison'
		 BEGIN SELECT RAISE(ABORT, 'poison rejected'); END`,
		`CREATE FUNCTION reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN IF NEW.account = 'poison' THEN RAISE EXCEPTION 'poison rejected'; END IF; RETURN NEW; END $$;
		 CREATE TRIGGER reject_poison BEFORE INSERT ON ledger_entries FOR EACH ROW EXECUTE FUNCTION reject_poison()`)
}

// poisonBook serves six entries over three pages; e5 is the poison.
func poisonBook() *book {
	src := &book{}
	for i := 1; i <= 6; i++ {
		acct := "ops"
		if i == 5 {
			acct = "poison"
		}
		src.entries = append(src.entries, staged.Entry{EntryID: fmt.Sprintf("e%d", i), Account: acct, AmountCents: int64(i), BookedAt: base.Add(-time.Duration(i) * time.Minute)})
	}
	return src
}

// A staged window is published whole or not at all: one entry the
// database refuses keeps the whole window (three pages) unpublished, the
// watermark unmoved and no effect performed; once it is accepted, the
// window lands in one piece and each new entry is announced once.
func TestStagedWindowIsAllOrNothing(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		rejectPoison(t, db)
		src := poisonBook()
		clock := testdb.NewClock(base)
		calls := &testdb.Calls{}
		j, err := staged.NewLedgerImport(st, src, staged.LedgerImportEffects{
			AnnounceEntry: staged.AnnounceEntryFunc(func(ctx context.Context, key string, e staged.Entry) error { calls.Add(key); return nil }),
		}, idem.WithClock(clock.Now), idem.WithStart(base.Add(-time.Hour)))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := j.Run(ctx)
		if !testdb.FailedAsReported(rep, err, false) || rep.Failed != 6 || rep.Inserted != 0 || calls.Total() != 0 {
			t.Fatalf("poisoned window: %s, %v, %d calls", rep, err, calls.Total())
		}
		if rows, _ := j.Rows(ctx); len(rows) != 0 {
			t.Fatalf("half a window was published: %d rows", len(rows))
		}
		// The watermark did not move: the same window is fetched again.
		clock.Advance(time.Minute)
		db.Exec(t, `DROP TRIGGER reject_poison`, `DROP TRIGGER reject_poison ON ledger_entries`)
		rep, err = j.Run(ctx)
		if err != nil || rep.Inserted != 6 || rep.EffectsDone != 6 {
			t.Fatalf("after the fix: %s, %v", rep, err)
		}
		rows, _ := j.Rows(ctx)
		var ids []string
		for _, r := range rows {
			ids = append(ids, r.EntryID)
		}
		if want := []string{"e1", "e2", "e3", "e4", "e5", "e6"}; !slices.Equal(ids, want) {
			t.Fatalf("rows %v, want %v", ids, want)
		}
		clock.Advance(time.Minute)
		if rep, err = j.Run(ctx); err != nil || rep.Inserted+rep.Updated != 0 || rep.EffectsDone != 0 || calls.Total() != 6 {
			t.Fatalf("re-run: %s, %v, %d calls", rep, err, calls.Total())
		}
	})
}

// One poison entry cannot hold a staged job for ever: it fails its whole
// window for max_attempts (2) runs, is parked, and the next run publishes
// the window without it and moves the watermark past it. Retried once the
// database accepts it, it is written from its stored payload.
func TestStagedWindowPublishedOncePoisonIsParked(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		rejectPoison(t, db)
		clock := testdb.NewClock(base)
		calls := &testdb.Calls{}
		src := poisonBook()
		j, err := staged.NewLedgerImport(st, src, staged.LedgerImportEffects{
			AnnounceEntry: staged.AnnounceEntryFunc(func(ctx context.Context, key string, e staged.Entry) error { calls.Add(key); return nil }),
		}, idem.WithClock(clock.Now), idem.WithStart(base.Add(-time.Hour)), idem.WithLogger(testdb.Quiet))
		if err != nil {
			t.Fatal(err)
		}
		if rep, err := j.Run(ctx); !testdb.FailedAsReported(rep, err, false) || rep.Failed != 6 || rep.Parked != 0 || rep.Inserted != 0 {
			t.Fatalf("first run: %s, %v", rep, err)
		}
		// The second failure, here of the same entries handed in as one
		// batch, parks e5; each unit is reported under its own key.
		clock.Advance(time.Minute)
		rep, err := j.Process(ctx, src.entries...)
		if !testdb.FailedAsReported(rep, err, false) || rep.Failed != 6 || rep.Parked != 1 || rep.Inserted != 0 || len(rep.Units) != 6 {
			t.Fatalf("second attempt: %s, %v", rep, err)
		}
		for i, u := range rep.Units {
			want := idem.OutcomeFailed
			if i == 4 {
				want = idem.OutcomeParked
			}
			if u.Key != src.entries[i].Key() || u.Outcome != want || u.Err == nil {
				t.Fatalf("unit %d reported %+v, want key %s, %s", i, u, src.entries[i].Key(), want)
			}
		}
		clock.Advance(time.Minute)
		units, err := st.Parked(ctx)
		if err != nil || len(units) != 1 || units[0].Key != "ledger:entry:e5" || units[0].State != "parked" || units[0].Attempts != 2 ||
			units[0].Mark == nil || !units[0].Mark.Equal(base.Add(-5*time.Minute)) {
			t.Fatalf("only the failing entry is recorded, and parked: %+v, %v", units, err)
		}
		rep, err = j.Run(ctx)
		if !errors.Is(err, idem.ErrParked) || !testdb.FailedAsReported(rep, err, false) || rep.Inserted != 5 || rep.Parked != 1 || rep.Failed != 1 || rep.EffectsDone != 5 {
			t.Fatalf("run after parking: %s, %v", rep, err)
		}
		rows, _ := j.Rows(ctx)
		if len(rows) != 5 {
			t.Fatalf("%d rows published, want the window without e5", len(rows))
		}
		// The watermark moved past e5: the next window (mark minus the 5m
		// overlap) holds e1 to e3 only.
		clock.Advance(time.Minute)
		if rep, err := j.Run(ctx); err != nil || rep.Seen != 3 || rep.Parked != 0 || rep.Unchanged != 3 {
			t.Fatalf("next run: %s, %v", rep, err)
		}

		// A batch that another entry fails still reports e5 parked, not failing
		// anew; once that entry is back to what was written, its row goes.
		window := idem.Window{Since: base.Add(-time.Hour), Until: base}
		src.entries[5].Account = "poison"
		if rep, err := j.Backfill(ctx, window); !testdb.FailedAsReported(rep, err, false) || rep.Failed != 6 || rep.Parked != 1 || rep.Inserted+rep.Unchanged != 0 {
			t.Fatalf("backfill failed by e6: %s, %v", rep, err)
		}
		src.entries[5].Account = "ops"
		if rep, err := j.Backfill(ctx, window); !testdb.FailedAsReported(rep, err, false) || rep.Failed != 1 || rep.Parked != 1 || rep.Unchanged != 5 {
			t.Fatalf("backfill with e6 restored: %s, %v", rep, err)
		}
		if units, err := st.Parked(ctx); err != nil || len(units) != 1 || units[0].Key != "ledger:entry:e5" || units[0].Attempts != 2 {
			t.Fatalf("parked table %+v, %v; want e5 alone, not attempted again", units, err)
		}

		db.Exec(t, `DROP TRIGGER reject_poison`, `DROP TRIGGER reject_poison ON ledger_entries`)
		if changes, err := st.RetryParked(ctx, "ledger_import"); len(changes) != 1 || err != nil {
			t.Fatalf("RetryParked: %+v, %v", changes, err)
		}
		clock.Advance(time.Minute)
		if rep, err := j.Run(ctx); err != nil || rep.Inserted != 1 || rep.EffectsDone != 1 {
			t.Fatalf("run after the retry: %s, %v", rep, err)
		}
		if units, err := st.Parked(ctx); err != nil || len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v, %v", units, err)
		}
		if rows, _ := j.Rows(ctx); len(rows) != 6 || calls.Total() != 6 || calls.Keys() != 6 {
			t.Fatalf("%d rows, %d announcements over %d keys; want 6, each once", len(rows), calls.Total(), calls.Keys())
		}
	})
}
