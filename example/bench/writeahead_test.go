package main

import (
	"context"
	"log/slog"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// TestWriteAhead runs copy_job on PostgreSQL in batches of two, the first
// batch held for a moment before it writes anything, and checks both
// halves of idem.WithWriteAhead: batches with keys of their own are
// written while the one before is still open, as many at once as the
// pool allows (its connections but one, two to five), and a batch that
// shares a key with one in flight waits, so that the key's writes commit
// in order.
func TestWriteAhead(t *testing.T) {
	// The level names the database, as the crash tests' do (the mutation
	// check runs TestWriteAhead/postgres).
	t.Run("postgres", writeAhead)
}

func writeAhead(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set: write-ahead is for PostgreSQL")
	}
	base := time.Now().Add(-time.Hour).UTC().Truncate(time.Millisecond)
	row := func(id string, amount int64, at int) benchjobs.CopyRow {
		return benchjobs.CopyRow{ID: id, Account: "acct", Amount: amount, UpdatedAt: base.Add(time.Duration(at) * time.Microsecond)}
	}
	const hold = 300 * time.Millisecond

	// run applies one page and returns the report and the order in which
	// the batches started writing and committed.
	run := func(t *testing.T, conns int, page []benchjobs.CopyRow) (idem.Report, []string) {
		d, err := openDatabase(url, conns)
		if err != nil {
			t.Fatal(err)
		}
		sp, err := d.fresh(t.Context(), "writeahead", true)
		if err != nil {
			t.Fatal(err)
		}
		defer sp.drop()
		var (
			mu     sync.Mutex
			events []string
			held   bool
		)
		first, second := page[0].Key(), page[3].Key() // a key of each batch alone
		third := ""
		if len(page) > 4 {
			third = page[4].Key()
		}
		hook := func(ctx context.Context, p idemtest.CrashPoint, detail string) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case p == idemtest.PointUnitStart && detail == first && !held:
				held = true
				events = append(events, "start 1")
				mu.Unlock()
				time.Sleep(hold) // the first batch's transaction is open, nothing written yet
				mu.Lock()
			case p == idemtest.PointUnitStart && detail == second:
				events = append(events, "start 2")
			case p == idemtest.PointUnitStart && detail == third:
				events = append(events, "start 3")
			case p == idemtest.PointUnitAfterCommit:
				events = append(events, "commit "+detail)
			}
			return nil
		}
		src := copySource{func(context.Context, idem.Window, string) ([]benchjobs.CopyRow, string, error) { return page, "", nil }}
		job, err := benchjobs.NewCopyJob(sp.store, src, idem.WithLogger(slog.New(slog.DiscardHandler)), idem.WithStart(base.Add(-time.Minute)),
			idem.WithBatchSize(2), idem.WithWriteAhead(true), idemtest.WithCrashHook(hook))
		if err != nil {
			t.Fatal(err)
		}
		rep, err := job.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		rows, err := job.Rows(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if r.ID == "k" && r.Amount != 2 {
				t.Errorf("row k holds amount %d, want the newer 2", r.Amount)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		return rep, events
	}

	t.Run("disjoint keys overlap", func(t *testing.T) {
		_, events := run(t, 4, []benchjobs.CopyRow{row("a", 1, 1), row("c", 1, 2), row("d", 1, 3), row("e", 1, 4)})
		// The second batch starts before the first, held, commits.
		if i, j := slices.Index(events, "start 2"), slices.Index(events, "commit bench:copy:a"); i < 0 || j < 0 || i > j {
			t.Errorf("batches ran %v: the second did not start while the first was open", events)
		}
	})
	// Three batches of disjoint keys: with a pool of four, three
	// transactions are open at once; with a pool of three, two, so the
	// third batch starts only once the first has committed.
	page := []benchjobs.CopyRow{row("a", 1, 1), row("c", 1, 2), row("d", 1, 3), row("e", 1, 4), row("f", 1, 5), row("g", 1, 6)}
	t.Run("as many at once as the pool allows", func(t *testing.T) {
		_, events := run(t, 4, page)
		if i, j := slices.Index(events, "start 3"), slices.Index(events, "commit bench:copy:a"); i < 0 || j < 0 || i > j {
			t.Errorf("batches ran %v: the third did not start while the first was open (pool of 4)", events)
		}
	})
	t.Run("no more than the pool allows", func(t *testing.T) {
		_, events := run(t, 3, page)
		if i, j := slices.Index(events, "start 3"), slices.Index(events, "commit bench:copy:a"); i < 0 || j < 0 || i < j {
			t.Errorf("batches ran %v: the third started while the first was open (pool of 3)", events)
		}
	})
	t.Run("a shared key waits", func(t *testing.T) {
		rep, events := run(t, 4, []benchjobs.CopyRow{row("a", 1, 1), row("k", 1, 2), row("k", 2, 3), row("b", 1, 4)})
		// In order, k is inserted by the first batch and updated by the
		// second; had the second gone first, the first would have found
		// the newer row and left it unchanged.
		if rep.Inserted != 3 || rep.Updated != 1 || rep.Unchanged != 0 {
			t.Errorf("report %v (batches ran %v), want 3 inserted and k updated once", rep, events)
		}
	})
}
