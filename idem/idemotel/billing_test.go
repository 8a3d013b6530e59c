package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The observer is tested over a real generated package, the example's
// billing (example/idemgen.yaml), on a real database: what it counts and
// traces is what the runs did.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rawDB runs, on the test's database, what only the database can do: a
// trigger that refuses a row. Each statement comes in both dialects.
type rawDB func(t *testing.T, sqlite, postgres string)

// eachDB runs fn on SQLite and, when IDEMGEN_TEST_POSTGRES is set, on
// PostgreSQL in a schema of its own.
func eachDB(t *testing.T, fn func(t *testing.T, st *billing.Store, db rawDB)) {
	t.Run("sqlite", func(t *testing.T) {
		db, err := sql.Open("sqlite3", "file:"+url.PathEscape(filepath.Join(t.TempDir(), "otel.db"))+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st := billing.NewSQLiteStore(db)
		if err := st.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		fn(t, st, func(t *testing.T, sqlite, _ string) {
			t.Helper()
			if _, err := db.ExecContext(t.Context(), sqlite); err != nil {
				t.Fatalf("sqlite: %v", err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := idemtest.OpenPostgres(t)
		pool, err := pgxpool.NewWithConfig(t.Context(), pg.Config(pg.NewSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		st := billing.NewPostgresStore(pool)
		if err := st.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		fn(t, st, func(t *testing.T, _, postgres string) {
			t.Helper()
			if _, err := pool.Exec(t.Context(), postgres); err != nil {
				t.Fatalf("postgres: %v", err)
			}
		})
	})
}

// The database refuses invoices of customer "poison" (a constraint the
// source does not know about), so their writes fail on every attempt.
const (
	refusePoisonSQLite = `CREATE TRIGGER refuse_poison BEFORE INSERT ON invoices WHEN NEW.customer_id = 'poison'
		BEGIN SELECT RAISE(ABORT, 'poison invoice refused'); END`
	refusePoisonPostgres = `CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.customer_id = 'poison' THEN RAISE EXCEPTION 'poison invoice refused'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON invoices FOR EACH ROW EXECUTE FUNCTION refuse_poison()`
)

// runGap separates runs: twice the overlap, so only a watermark held at a
// failed unit makes a run fetch that unit again.
const runGap = 20 * time.Minute

// clock is a settable clock shared by a scenario's jobs.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// invoices stands in for the billing service: invoices served by
// updated_at window, two per page (so a run of three writes two batches).
type invoices struct {
	mu   sync.Mutex
	list map[string]billing.Invoice
}

// Fetch implements billing.InvoiceSyncSource.
func (s *invoices) Fetch(_ context.Context, w idem.Window, page string) ([]billing.Invoice, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []billing.Invoice
	for _, inv := range s.list {
		if !inv.UpdatedAt.Before(w.Since) && inv.UpdatedAt.Before(w.Until) {
			in = append(in, inv)
		}
	}
	slices.SortFunc(in, func(a, b billing.Invoice) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	start := 0
	if page != "" {
		start = int(page[0] - '0')
	}
	end := min(start+2, len(in))
	next := ""
	if end < len(in) {
		next = string(rune('0' + end))
	}
	return in[start:end], next, nil
}

var errDeclined = errors.New("receipt declined by the card network")

// mailer stands in for an email provider that honours idempotency keys.
type mailer struct{}

// NotifyNewInvoice implements billing.NotifyNewInvoice.
func (mailer) NotifyNewInvoice(context.Context, string, billing.Invoice) error { return nil }

// fixture is one scenario's outside world.
type fixture struct {
	clk  *clock
	src  *invoices
	base time.Time
}

func newFixture() *fixture {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	return &fixture{clk: &clock{now: base}, src: &invoices{list: map[string]billing.Invoice{}}, base: base}
}

func (f *fixture) invoice(id, customer string, cents int64, updated time.Time) {
	f.src.mu.Lock()
	defer f.src.mu.Unlock()
	f.src.list[id] = billing.Invoice{InvoiceID: id, CustomerID: customer, AmountCents: cents, CreatedAt: f.base.Add(-time.Hour), UpdatedAt: updated}
}

func payment(f *fixture, id string, cents int64) billing.Payment {
	return billing.Payment{EventID: id, InvoiceID: "inv-" + id, AmountCents: cents, PaidAt: f.base}
}

// checkFailures holds a call's error to its report: nil when nothing
// failed, else a *idem.FailuresError counting every failed unit and effect
// (and busy effects, for Process).
func checkFailures(t *testing.T, call string, rep idem.Report, err error, busyFails bool) {
	t.Helper()
	want := rep.Failed + rep.EffectsFailed
	if busyFails {
		want += rep.EffectsBusy
	}
	var fe *idem.FailuresError
	switch {
	case err == nil && want > 0:
		t.Fatalf("%s: report counts %d failures but the error is nil: %s", call, want, rep)
	case errors.As(err, &fe) && fe.Count != want:
		t.Fatalf("%s: error counts %d failures, report %d: %v; %s", call, fe.Count, want, err, rep)
	case err != nil && fe == nil:
		t.Fatalf("%s: %v", call, err)
	}
}
