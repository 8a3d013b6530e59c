// Hand-written behaviour tests of the generated cursor package (idemgen
// leaves this file alone: it has no generated-code header).
package cursor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/testdata/golden/cursor"
	"github.com/idemgen/idemgen/testdata/golden/internal/testdb"
)

func open(t *testing.T, db testdb.DB) *cursor.Store {
	t.Helper()
	var st *cursor.Store
	if db.Pool != nil {
		st = cursor.NewPostgresStore(db.Pool)
	} else {
		st = cursor.NewSQLiteStore(db.SQL)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// feed serves events after a cursor (the last seq seen), two per page; past
// the end it answers with the cursor it was given.
type feed struct {
	mu     sync.Mutex
	events []cursor.Event
	asked  []string         // every cursor Fetch was called with
	failAt map[string]error // cursors whose fetch fails once
}

func (f *feed) add(seq int64, name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, cursor.Event{Seq: seq, Name: name})
}

func (f *feed) Fetch(ctx context.Context, cur string) ([]cursor.Event, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, cur)
	if err := f.failAt[cur]; err != nil {
		delete(f.failAt, cur)
		return nil, "", err
	}
	after := int64(0)
	if cur != "" {
		after, _ = strconv.ParseInt(cur, 10, 64)
	}
	var page []cursor.Event
	for _, e := range f.events {
		if e.Seq > after && len(page) < 2 {
			page = append(page, e)
		}
	}
	if len(page) == 0 {
		return nil, cur, nil
	}
	return page, strconv.FormatInt(page[len(page)-1].Seq, 10), nil
}

func (f *feed) takeAsked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.asked
	f.asked = nil
	return a
}

// registry stands in for a provider honouring idempotency keys; its result
// names the call that produced it, so a replayed result is recognisable.
type registry struct {
	calls   testdb.Calls
	failing bool
}

var errDown = errors.New("registry down")

func (r *registry) RegisterEvent(ctx context.Context, key string, e cursor.Event) ([]byte, error) {
	r.calls.Add(key)
	if r.failing {
		return nil, errDown
	}
	return fmt.Appendf(nil, "reg-%d#%d", e.Seq, r.calls.Of(key)), nil
}

func newJob(t *testing.T, st *cursor.Store, src *feed, reg *registry, opts ...idem.Option) *cursor.EventImport {
	t.Helper()
	j, err := cursor.NewEventImport(st, src, cursor.EventImportEffects{RegisterEvent: reg}, append([]idem.Option{idem.WithLogger(testdb.Quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func run(t *testing.T, j *cursor.EventImport) idem.Report {
	t.Helper()
	rep, err := j.Run(context.Background())
	if !testdb.FailedAsReported(rep, err, false) {
		t.Fatalf("run: %s, %v", rep, err)
	}
	return rep
}

func TestCursorAdvancesPageByPage(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		src, reg := &feed{}, &registry{}
		for i := int64(1); i <= 5; i++ {
			src.add(i, fmt.Sprint("e", i))
		}
		j := newJob(t, open(t, db), src, reg)
		if rep := run(t, j); rep.Seen != 5 || rep.Inserted != 5 || rep.EffectsDone != 5 {
			t.Fatalf("first run: %s", rep)
		}
		if got, want := src.takeAsked(), []string{"", "2", "4", "5"}; !slices.Equal(got, want) {
			t.Fatalf("cursors asked %q, want %q", got, want)
		}
		// The next run starts where the last whole page ended.
		if rep := run(t, j); rep.Seen != 0 {
			t.Fatalf("second run: %s", rep)
		}
		if got, want := src.takeAsked(), []string{"5"}; !slices.Equal(got, want) {
			t.Fatalf("second run asked %q, want %q", got, want)
		}
		src.add(6, "e6")
		if rep := run(t, j); rep.Seen != 1 || rep.Inserted != 1 || rep.EffectsDone != 1 {
			t.Fatalf("third run: %s", rep)
		}
		if reg.calls.Total() != 6 || reg.calls.Keys() != 6 {
			t.Fatalf("provider calls %d over %d keys, want 6 over 6", reg.calls.Total(), reg.calls.Keys())
		}
	})
}

// rejectPoison makes the database refuse events named "poison" (a trigger),
// so their writes fail on every attempt until acceptPoison.
func rejectPoison(t *testing.T, db testdb.DB) {
	t.Helper()
	db.Exec(t,
		`CREATE TRIGGER reject_poison BEFORE INSERT ON events WHEN NEW.name = 'poison'
		 BEGIN SELECT RAISE(ABORT, 'poison rejected'); END`,
		`CREATE FUNCTION reject_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		 BEGIN IF NEW.name = 'poison' THEN RAISE EXCEPTION 'poison rejected'; END IF; RETURN NEW; END $$;
		 CREATE TRIGGER reject_poison BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION reject_poison()`)
}

func acceptPoison(t *testing.T, db testdb.DB) {
	t.Helper()
	db.Exec(t, `DROP TRIGGER reject_poison`, `DROP TRIGGER reject_poison ON events`)
}

// poisonFeed serves six events, the third named "poison", two per page.
func poisonFeed() *feed {
	src := &feed{}
	for i, name := range []string{"a", "b", "poison", "d", "e", "f"} {
		src.add(int64(i+1), name)
	}
	return src
}

func parked(t *testing.T, st *cursor.Store) []idem.ParkedUnit {
	t.Helper()
	units, err := st.Parked(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return units
}

// A unit the database refuses (a trigger here) fails alone, and its page is
// not passed: the next run fetches that page again and dedupes the rest.
// Written then (below its max_attempts of 2), it leaves no parked row.
func TestPageWithFailedUnitIsNotPassed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		st := open(t, db)
		rejectPoison(t, db)
		src, reg := poisonFeed(), &registry{}
		j := newJob(t, st, src, reg)
		rep := run(t, j)
		if rep.Inserted != 3 || rep.Failed != 1 || rep.Parked != 0 || rep.EffectsDone != 3 {
			t.Fatalf("first run: %s", rep)
		}
		if got, want := src.takeAsked(), []string{"", "2"}; !slices.Equal(got, want) {
			t.Fatalf("cursors asked %q, want %q: the page after the failure must not be fetched", got, want)
		}
		if units := parked(t, st); len(units) != 1 || units[0].State != "failing" || units[0].Attempts != 1 {
			t.Fatalf("after one failure: %+v", units)
		}
		acceptPoison(t, db)
		rep = run(t, j)
		if rep.Inserted != 3 || rep.Deduped != 1 || rep.Failed != 0 || rep.EffectsDone != 3 {
			t.Fatalf("after the fix: %s", rep)
		}
		if got, want := src.takeAsked(), []string{"2", "4", "6"}; !slices.Equal(got, want) {
			t.Fatalf("after the fix asked %q, want %q", got, want)
		}
		rows, err := j.Rows(context.Background())
		if err != nil || len(rows) != 6 {
			t.Fatalf("%d rows, %v; want 6", len(rows), err)
		}
		if reg.calls.Total() != 6 || reg.calls.Keys() != 6 {
			t.Fatalf("provider calls %d over %d keys, want each key once", reg.calls.Total(), reg.calls.Keys())
		}
		if units := parked(t, st); len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v", units)
		}
	})
}

// After max_attempts (2) failed runs the unit is parked and the cursor
// passes its page; handed in again with the same payload it is skipped, not
// attempted; Retry and a fixed database write it from its stored payload.
func TestParkedUnitIsPassedThenRetried(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		rejectPoison(t, db)
		src, reg := poisonFeed(), &registry{}
		j := newJob(t, st, src, reg)
		run(t, j)
		src.takeAsked()
		rep := run(t, j)
		if rep.Failed != 1 || rep.Parked != 1 || rep.Deduped != 1 || rep.Inserted != 2 || rep.EffectsDone != 2 {
			t.Fatalf("second run: %s", rep)
		}
		if got, want := src.takeAsked(), []string{"2", "4", "6"}; !slices.Equal(got, want) {
			t.Fatalf("second run asked %q, want %q: the cursor passes a parked unit's page", got, want)
		}
		units := parked(t, st)
		if len(units) != 1 || units[0].Key != "event:3" || units[0].State != "parked" || units[0].Attempts != 2 ||
			units[0].Mark != nil || !strings.Contains(units[0].LastError, "poison rejected") {
			t.Fatalf("parked table %+v", units)
		}
		var stored cursor.Event
		if err := json.Unmarshal(units[0].Payload, &stored); err != nil || stored != (cursor.Event{Seq: 3, Name: "poison"}) {
			t.Fatalf("stored payload %s, %v", units[0].Payload, err)
		}
		if rep := run(t, j); rep.Seen != 0 {
			t.Fatalf("third run: %s", rep)
		}
		if got, want := src.takeAsked(), []string{"6"}; !slices.Equal(got, want) {
			t.Fatalf("third run asked %q, want %q", got, want)
		}

		// The same payload handed in is skipped: reported, not attempted.
		rep, err := j.Process(ctx, stored)
		if !errors.Is(err, idem.ErrParked) || !testdb.FailedAsReported(rep, err, true) || rep.Parked != 1 || rep.Failed != 1 || rep.Units[0].Outcome != idem.OutcomeParked || !errors.Is(rep.Units[0].Err, idem.ErrParked) {
			t.Fatalf("Process of the parked unit: %s %+v, %v", rep, rep.Units, err)
		}
		if units := parked(t, st); len(units) != 1 || units[0].Attempts != 2 {
			t.Fatalf("a skipped unit was attempted: %+v", units)
		}

		acceptPoison(t, db)
		if changes, err := st.Retry(ctx, "event_import", "event:3"); len(changes) != 1 || err != nil {
			t.Fatalf("Retry: %+v, %v", changes, err)
		}
		if rep := run(t, j); rep.Inserted != 1 || rep.Failed != 0 || rep.EffectsDone != 1 {
			t.Fatalf("run after Retry: %s", rep)
		}
		if units := parked(t, st); len(units) != 0 {
			t.Fatalf("the written unit's row is left: %+v", units)
		}
		if rows, err := j.Rows(ctx); err != nil || len(rows) != 6 {
			t.Fatalf("%d rows, %v; want 6", len(rows), err)
		}
		if reg.calls.Total() != 6 || reg.calls.Keys() != 6 {
			t.Fatalf("provider calls %d over %d keys, want each key once", reg.calls.Total(), reg.calls.Keys())
		}
	})
}

func TestFetchErrorKeepsCursor(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		src, reg := &feed{failAt: map[string]error{"2": errors.New("feed timeout")}}, &registry{}
		for i := int64(1); i <= 4; i++ {
			src.add(i, "x")
		}
		j := newJob(t, open(t, db), src, reg)
		rep, err := j.Run(context.Background())
		if err == nil || rep.Inserted != 2 {
			t.Fatalf("run with a failing fetch: %s, %v", rep, err)
		}
		src.takeAsked()
		if rep := run(t, j); rep.Inserted != 2 || rep.Seen != 2 {
			t.Fatalf("resumed run: %s", rep)
		}
		if got := src.takeAsked(); got[0] != "2" {
			t.Fatalf("resumed at %q, want after the first whole page (2)", got[0])
		}
	})
}

func TestInsertOnceKeepsFirstAndResultIsReplayed(t *testing.T) {
	if got := cursor.RegisterEventKey(cursor.Event{Seq: 7}); got != "register:v1:j3:7" {
		t.Fatalf("effect key %q", got)
	}
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		reg := &registry{}
		j := newJob(t, open(t, db), &feed{}, reg)
		first, err := j.Process(ctx, cursor.Event{Seq: 1, Name: "first"})
		if err != nil || first.Inserted != 1 || len(first.Units) != 1 || len(first.Units[0].Effects) != 1 {
			t.Fatalf("first: %s, %v", first, err)
		}
		if got := string(first.Units[0].Effects[0].Result); got != "reg-1#1" {
			t.Fatalf("first result %q", got)
		}
		again, err := j.Process(ctx, cursor.Event{Seq: 1, Name: "second"})
		if err != nil || again.Deduped != 1 || again.EffectsDeduped != 1 {
			t.Fatalf("replay: %s, %v", again, err)
		}
		if er := again.Units[0].Effects[0]; er.Outcome != idem.EffectDeduped || string(er.Result) != "reg-1#1" {
			t.Fatalf("replayed effect %+v, want the kept result reg-1#1", er)
		}
		if reg.calls.Total() != 1 {
			t.Fatalf("provider calls %d, want 1", reg.calls.Total())
		}
		rows, err := j.Rows(ctx)
		if err != nil || len(rows) != 1 || rows[0].Name != "first" {
			t.Fatalf("rows %+v, %v; insert_once keeps the first", rows, err)
		}
		if stale, err := j.Stale(ctx, 10); err != nil || len(stale) != 0 {
			t.Fatalf("stale %v, %v", stale, err)
		}
	})
}

func TestEffectParksAfterMaxAttempts(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db testdb.DB) {
		ctx := context.Background()
		st := open(t, db)
		reg := &registry{failing: true}
		clk := testdb.NewClock(time.Now())
		j := newJob(t, st, &feed{}, reg, idemtest.WithLeaseClock(clk.Now))
		if rep, _ := j.Process(ctx, cursor.Event{Seq: 1, Name: "a"}); rep.EffectsFailed != 1 || rep.EffectsParked != 0 {
			t.Fatalf("first attempt: %s", rep)
		}
		clk.Advance(time.Hour) // past the retry backoff
		if rep, _ := j.Drain(ctx); rep.EffectsParked != 1 {
			t.Fatalf("second attempt (max_attempts 2): %s", rep)
		}
		reg.failing = false
		clk.Advance(time.Hour)
		if rep, _ := j.Drain(ctx); rep.EffectsDone != 0 {
			t.Fatalf("a parked effect was retried: %s", rep)
		}
		entries, err := st.Ledger(ctx)
		if err != nil || len(entries) != 1 || entries[0].State != idem.StateParked || entries[0].Attempts != 2 || entries[0].LastError == "" {
			t.Fatalf("ledger %+v, %v", entries, err)
		}
		if reg.calls.Total() != 2 {
			t.Fatalf("provider calls %d, want 2", reg.calls.Total())
		}
	})
}
