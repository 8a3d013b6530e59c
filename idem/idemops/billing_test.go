package idemops_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The operations reads and recovery are tested over a real generated
// package, the example's billing (example/idemgen.yaml), on a real
// database: what they read is what the runtime's runs wrote.

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// opsDB is a billing database with the operations view of it.
type opsDB struct {
	store *billing.Store
	ops   *idemops.DB
	// exec runs a statement only the database can (a row put under a
	// lease, a copied row), in the dialect's own form.
	exec func(t *testing.T, sqlite, postgres string)
}

// eachOpsDB runs fn on SQLite and, when IDEMGEN_TEST_POSTGRES is set, on
// PostgreSQL in a schema of its own.
func eachOpsDB(t *testing.T, fn func(t *testing.T, db opsDB)) {
	t.Run("sqlite", func(t *testing.T) {
		ctx := context.Background()
		db, err := sql.Open("sqlite3", "file:"+url.PathEscape(filepath.Join(t.TempDir(), "ops.db"))+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st := billing.NewSQLiteStore(db)
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		ops, err := idemops.New(ctx, db, st.Runtime(), idemops.SQLite, billing.OpsPackage(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, opsDB{store: st, ops: ops, exec: func(t *testing.T, sqlite, _ string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, sqlite); err != nil {
				t.Fatalf("sqlite: %v", err)
			}
		}})
	})
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		pg := idemtest.OpenPostgres(t)
		pool, err := pgxpool.NewWithConfig(ctx, pg.Config(pg.NewSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		st := billing.NewPostgresStore(pool)
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		ops, err := idemops.New(ctx, db, st.Runtime(), idemops.Postgres, billing.OpsPackage(), quiet)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, opsDB{store: st, ops: ops, exec: func(t *testing.T, _, postgres string) {
			t.Helper()
			if _, err := pool.Exec(ctx, postgres); err != nil {
				t.Fatalf("postgres: %v", err)
			}
		}})
	})
}

// clock is a settable clock shared by a scenario's jobs and the ops DB.
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
// updated_at window, in one page.
type invoices struct {
	mu   sync.Mutex
	list map[string]billing.Invoice
}

func (s *invoices) put(inv billing.Invoice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list[inv.InvoiceID] = inv
}

// Fetch implements billing.InvoiceSyncSource.
func (s *invoices) Fetch(_ context.Context, w idem.Window, _ string) ([]billing.Invoice, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var in []billing.Invoice
	for _, inv := range s.list {
		if !inv.UpdatedAt.Before(w.Since) && inv.UpdatedAt.Before(w.Until) {
			in = append(in, inv)
		}
	}
	slices.SortFunc(in, func(a, b billing.Invoice) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	return in, "", nil
}

var errNoMailbox = errors.New("mailbox does not exist")

// mailer stands in for an email provider that honours idempotency keys;
// it counts every call, and a bounce is a permanent failure.
type mailer struct {
	mu     sync.Mutex
	calls  map[string]int
	bounce bool
}

// NotifyNewInvoice implements billing.NotifyNewInvoice.
func (m *mailer) NotifyNewInvoice(_ context.Context, key string, _ billing.Invoice) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls[key]++
	if m.bounce {
		return idem.Permanent(errNoMailbox)
	}
	return nil
}

func (m *mailer) callsOf(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls[key]
}

// fixture is one scenario's outside world: the clock, the invoices and
// the mailer.
type fixture struct {
	clk  *clock
	src  *invoices
	mail *mailer
	base time.Time
}

func newFixture() *fixture {
	base := time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	return &fixture{clk: &clock{now: base}, src: &invoices{list: map[string]billing.Invoice{}}, mail: &mailer{calls: map[string]int{}}, base: base}
}

func (f *fixture) invoice(id string, cents int64, updated time.Time) {
	f.src.put(billing.Invoice{InvoiceID: id, CustomerID: "cus", AmountCents: cents, CreatedAt: f.base.Add(-time.Hour), UpdatedAt: updated})
}

func (f *fixture) options() []idem.Option {
	return []idem.Option{idem.WithClock(f.clk.Now), idemrt.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet)}
}

func (f *fixture) job(t *testing.T, st *billing.Store) *billing.InvoiceSync {
	t.Helper()
	j, err := billing.NewInvoiceSync(st, f.src, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
		append(f.options(), idem.WithStart(f.base.Add(-24*time.Hour)))...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// run runs j once; a run that stopped fails the test (a failed effect is
// the scenario's, and its report says so).
func run(t *testing.T, j *billing.InvoiceSync) idem.Report {
	t.Helper()
	rep, err := j.Run(context.Background())
	if fe := (*idem.FailuresError)(nil); err != nil && !errors.As(err, &fe) {
		t.Fatalf("run: %v", err)
	}
	return rep
}

// The effect keys of the scenario's invoices (notify_new_invoice, v2).
const (
	parkedKey = "notify:new-invoice:v2:inv-1" // bounced: parked at its first attempt
	doneKey   = "notify:new-invoice:v2:inv-2" // sent
	leasedKey = "notify:new-invoice:v2:inv-3" // owed, under worker-7's live lease
)

// opsScenario fills the database: inv-1's notice parked (the mailbox
// bounced), inv-2's sent, inv-3's owed under a live lease. The fixture's
// clock is the ops DB's, so the activity window holds the runs.
func opsScenario(t *testing.T, db opsDB) (*fixture, *billing.InvoiceSync) {
	t.Helper()
	f := newFixture()
	db.ops.SetClock(f.clk.Now)
	f.invoice("inv-1", 100, f.base.Add(-3*time.Minute))
	f.mail.bounce = true
	j := f.job(t, db.store)
	if rep := run(t, j); rep.EffectsParked != 1 || rep.Inserted != 1 {
		t.Fatalf("first run: %s", rep)
	}
	f.mail.bounce = false
	f.clk.advance(5 * time.Minute)
	f.invoice("inv-2", 200, f.clk.Now().Add(-2*time.Minute))
	f.invoice("inv-3", 300, f.clk.Now().Add(-time.Minute))
	if rep := run(t, j); rep.EffectsDone != 2 {
		t.Fatalf("second run: %s", rep)
	}
	set := "UPDATE billing_idem_ledger SET state = 'pending', lease_owner = 'worker-7', lease_until = %s WHERE effect_key = '" + leasedKey + "'"
	db.exec(t, strings.Replace(set, "%s", "'2999-01-01T00:00:00.000000000Z'", 1), strings.Replace(set, "%s", "'2999-01-01'::timestamptz", 1))
	f.clk.advance(time.Minute)
	return f, j
}

// ledgerEntry is the ledger row under key.
func ledgerEntry(t *testing.T, st *billing.Store, key string) idem.LedgerEntry {
	t.Helper()
	rows, err := st.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rows {
		if e.Key == key {
			return e
		}
	}
	t.Fatalf("no ledger row %s", key)
	return idem.LedgerEntry{}
}
