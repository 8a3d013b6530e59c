package idemrt_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver" // pure-Go SQLite: nothing to install

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The runtime's behaviour, tested through a real generated package: the
// example's billing (example/idemgen.yaml), on SQLite and, when
// IDEMGEN_TEST_POSTGRES is set, on PostgreSQL. What follows is the outside
// world those tests stand in (the billing service, the mail and receipt
// providers, a settable clock) and how they open the database.

// billingAPI stands in for the billing service: a list of invoices, served
// by updated_at window, two per page.
type billingAPI struct {
	mu       sync.Mutex
	invoices map[string]billing.Invoice
	fetches  int
	windows  []idem.Window // the window of every first page fetched
}

func newBillingAPI() *billingAPI { return &billingAPI{invoices: map[string]billing.Invoice{}} }

func (b *billingAPI) put(inv billing.Invoice) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.invoices[inv.InvoiceID] = inv
}

// Fetch implements billing.InvoiceSyncSource.
func (b *billingAPI) Fetch(ctx context.Context, w idem.Window, page string) ([]billing.Invoice, string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fetches++
	if page == "" {
		b.windows = append(b.windows, w)
	}
	var in []billing.Invoice
	for _, inv := range b.invoices {
		if !inv.UpdatedAt.Before(w.Since) && inv.UpdatedAt.Before(w.Until) {
			in = append(in, inv)
		}
	}
	slices.SortFunc(in, func(a, c billing.Invoice) int { return a.UpdatedAt.Compare(c.UpdatedAt) })
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

// lastWindow is the window of the last fetch of a first page.
func (b *billingAPI) lastWindow() idem.Window {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.windows) == 0 {
		return idem.Window{}
	}
	return b.windows[len(b.windows)-1]
}

// notifier stands in for an email provider that honours idempotency keys:
// it counts every call, and applies each key once.
type notifier struct {
	mu      sync.Mutex
	calls   map[string]int     // calls received per key
	applied map[string]int     // emails actually sent per key
	amounts map[string][]int64 // the invoice amount each call carried, per key
	failing bool
	failure error         // what a failing call returns; errProviderDown when nil
	bounce  bool          // the address does not exist: a permanent failure
	hang    chan struct{} // when set, calls apply then block until closed
	onCall  func()        // when set, called after a call applied (the example's crash)
}

func newNotifier() *notifier {
	return &notifier{calls: map[string]int{}, applied: map[string]int{}, amounts: map[string][]int64{}}
}

// amountsOf is the invoice amount of each call made with key, in order.
func (n *notifier) amountsOf(key string) []int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.amounts[key])
}

var (
	errProviderDown = errors.New("provider unavailable")
	errNoMailbox    = errors.New("mailbox does not exist")
	errDeclined     = errors.New("receipt declined by the card network")
)

// NotifyNewInvoice implements billing.NotifyNewInvoice.
func (n *notifier) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	n.mu.Lock()
	n.calls[key]++
	n.amounts[key] = append(n.amounts[key], inv.AmountCents)
	if n.bounce {
		n.mu.Unlock()
		return idem.Permanent(errNoMailbox)
	}
	if n.failing {
		err := n.failure
		n.mu.Unlock()
		if err == nil {
			err = errProviderDown
		}
		return err
	}
	if n.applied[key] == 0 {
		n.applied[key]++
	}
	hang, onCall := n.hang, n.onCall
	n.mu.Unlock()
	if onCall != nil {
		onCall()
	}
	if hang != nil {
		<-hang
	}
	return nil
}

func (n *notifier) totals() (calls, applied int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.calls {
		calls += c
	}
	for _, a := range n.applied {
		applied += a
	}
	return calls, applied
}

// receipts stands in for a receipt service; its result is a receipt id.
type receipts struct {
	mu      sync.Mutex
	calls   map[string]int
	decline bool // refuse every receipt for good
}

func newReceipts() *receipts { return &receipts{calls: map[string]int{}} }

// SendReceipt implements billing.SendReceipt.
func (r *receipts) SendReceipt(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[key]++
	if r.decline {
		return nil, idem.Permanent(errDeclined)
	}
	return []byte("rcpt-" + p.EventID), nil
}

// clock is a settable clock shared by the jobs of one scenario.
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

// Every test here runs on SQLite and, when IDEMGEN_TEST_POSTGRES is set, on
// PostgreSQL in a schema of its own that is dropped afterwards.
func eachDB(t *testing.T, fn func(t *testing.T, store *billing.Store)) {
	eachRawDB(t, func(t *testing.T, store *billing.Store, _ rawDB) { fn(t, store) })
}

// rawDB runs, on the test's database, what only the database can do: a
// trigger that refuses a row, say. Each statement comes in both dialects.
type rawDB func(t *testing.T, sqlite, postgres string)

// eachRawDB is eachDB with a rawDB beside the store.
func eachRawDB(t *testing.T, fn func(t *testing.T, store *billing.Store, db rawDB)) {
	t.Run("sqlite", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "test.db")
		st, closeDB, err := openSQLite(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeDB)
		raw, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { raw.Close() })
		fn(t, st, func(t *testing.T, sqlite, _ string) {
			t.Helper()
			if _, err := raw.ExecContext(context.Background(), sqlite); err != nil {
				t.Fatalf("sqlite: %v", err)
			}
		})
	})
	t.Run("postgres", func(t *testing.T) {
		pg := idemtest.OpenPostgres(t)
		st, pool, err := openPostgresConfig(context.Background(), pg.Config(pg.NewSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		fn(t, st, func(t *testing.T, _, postgres string) {
			t.Helper()
			if _, err := pool.Exec(context.Background(), postgres); err != nil {
				t.Fatalf("postgres: %v", err)
			}
		})
	})
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type fixture struct {
	clk  *clock
	api  *billingAPI
	mail *notifier
	base time.Time
}

func newFixture() *fixture {
	base := time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)
	return &fixture{clk: &clock{now: base}, api: newBillingAPI(), mail: newNotifier(), base: base}
}

func (f *fixture) job(t *testing.T, st *billing.Store) *billing.InvoiceSync {
	t.Helper()
	j, err := billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
		idem.WithClock(f.clk.Now), idemrt.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func (f *fixture) invoice(id string, amount int64, updated time.Time) billing.Invoice {
	inv := billing.Invoice{InvoiceID: id, CustomerID: "cus", AmountCents: amount, CreatedAt: f.base.Add(-time.Hour), UpdatedAt: updated}
	f.api.put(inv)
	return inv
}

// runJob runs j once. A run that stopped fails the test; one that ran to
// its end must return a *idem.FailuresError exactly when its report counts
// a unit or effect that did not end applied, one failure per count.
func runJob(t *testing.T, j *billing.InvoiceSync) idem.Report {
	t.Helper()
	rep, err := j.Run(context.Background())
	checkFailures(t, "run", rep, err, false)
	return rep
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

func rows(t *testing.T, j *billing.InvoiceSync) map[string]billing.Invoice {
	t.Helper()
	rs, err := j.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]billing.Invoice{}
	for _, r := range rs {
		if _, dup := out[r.InvoiceID]; dup {
			t.Fatalf("two rows for %s", r.InvoiceID)
		}
		out[r.InvoiceID] = r
	}
	return out
}

// openSQLiteDB opens (creating) a SQLite file: WAL, so readers never wait
// for the writer, and a busy timeout (the store sets one anyway where the
// DSN has none).
func openSQLiteDB(path string) (*sql.DB, error) {
	return sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
}

// openSQLite opens (creating) a SQLite file and returns a migrated store.
func openSQLite(ctx context.Context, path string) (*billing.Store, func(), error) {
	db, err := openSQLiteDB(path)
	if err != nil {
		return nil, nil, err
	}
	st := billing.NewSQLiteStore(db)
	if err := st.Migrate(ctx); err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	return st, func() { db.Close() }, nil
}

// openPostgresConfig connects as cfg says (a test's schema comes from
// idem/idemtest with its search_path set) and returns a migrated store.
func openPostgresConfig(ctx context.Context, cfg *pgxpool.Config) (*billing.Store, *pgxpool.Pool, error) {
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	st := billing.NewPostgresStore(pool)
	if err := st.Migrate(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	return st, pool, nil
}
