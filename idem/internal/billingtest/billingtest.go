// Package billingtest is the outside world the runtime's own tests stand
// in when they run a real generated package, the example's billing
// (example/idemgen.yaml), on a real database: a settable clock, the
// billing service's invoices, the mail and receipt providers (each counts
// every call), and each test's database, SQLite in the test's temporary
// directory and, when IDEMGEN_TEST_POSTGRES is set, PostgreSQL in a schema
// of its own. The tests of idem/idemrt, idem/idemops, idem/idemui and
// idem/idemotel share it; what only one of them needs stays in its tests.
package billingtest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	//idemgen:allow-testonly a package of the runtime tests' own
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Quiet is a logger that drops everything: the tests read reports, not logs.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Clock is a settable clock shared by the jobs of one scenario (and, for
// the operations tests, by their view of the database).
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock is a clock that reads at until it is advanced.
func NewClock(at time.Time) *Clock { return &Clock{now: at} }

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Fixture is one scenario's outside world: the clock, the invoices the
// billing service serves and the mailer that notifies of new ones.
type Fixture struct {
	Clock  *Clock
	Source *Invoices
	Mailer *Mailer
	Base   time.Time // the clock's start; invoice times are set from it
}

// NewFixture is a fixture whose clock starts at a fixed time,
// 2026-11-22 09:00 UTC, and whose billing service serves two invoices a
// page (so three invoices take two pages).
func NewFixture() *Fixture {
	return newFixture(time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), 2)
}

// newFixture is a fixture whose clock starts at base and whose billing
// service serves pageSize invoices a page (a whole window when 0).
func newFixture(base time.Time, pageSize int) *Fixture {
	return &Fixture{Clock: NewClock(base), Source: NewInvoices(pageSize), Mailer: NewMailer(), Base: base}
}

// Invoice has the billing service serve an invoice of customer "cus",
// created an hour before the fixture's base, and returns it.
func (f *Fixture) Invoice(id string, cents int64, updated time.Time) billing.Invoice {
	return f.CustomerInvoice(id, "cus", cents, updated)
}

// CustomerInvoice is Invoice for the given customer.
func (f *Fixture) CustomerInvoice(id, customer string, cents int64, updated time.Time) billing.Invoice {
	inv := billing.Invoice{InvoiceID: id, CustomerID: customer, AmountCents: cents, CreatedAt: f.Base.Add(-time.Hour), UpdatedAt: updated}
	f.Source.Put(inv)
	return inv
}

// Payment is a payment event id of cents, paid at the fixture's base, for
// invoice "inv-" + id.
func (f *Fixture) Payment(id string, cents int64) billing.Payment {
	return billing.Payment{EventID: id, InvoiceID: "inv-" + id, AmountCents: cents, PaidAt: f.Base}
}

// Options run a job on the fixture's clock (its leases too), quietly.
func (f *Fixture) Options() []idem.Option {
	return []idem.Option{idem.WithClock(f.Clock.Now), idemtest.WithLeaseClock(f.Clock.Now), idem.WithLogger(Quiet)}
}

// Job is the invoice sync over st, fed by the fixture's invoices and
// notifying through its mailer, on its clock, starting a day before its
// base.
func (f *Fixture) Job(t *testing.T, st *billing.Store) *billing.InvoiceSync {
	t.Helper()
	j, err := billing.NewInvoiceSync(st, f.Source, billing.InvoiceSyncEffects{NotifyNewInvoice: f.Mailer},
		append(f.Options(), idem.WithStart(f.Base.Add(-24*time.Hour)))...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// Hook is the payment webhook over st, sending receipts through provider,
// on the fixture's clock; opts come after the fixture's own.
func (f *Fixture) Hook(t *testing.T, st *billing.Store, provider billing.SendReceipt, opts ...idem.Option) *billing.PaymentWebhook {
	t.Helper()
	hook, err := billing.NewPaymentWebhook(st, billing.PaymentWebhookEffects{SendReceipt: provider}, append(f.Options(), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return hook
}

// Run runs j once; a run that stopped fails the test (a failed effect is
// the scenario's, and its report says so).
func Run(t *testing.T, j *billing.InvoiceSync) idem.Report {
	t.Helper()
	rep, err := j.Run(context.Background())
	if fe := (*idem.FailuresError)(nil); err != nil && !errors.As(err, &fe) {
		t.Fatalf("run: %v", err)
	}
	return rep
}

// RunChecked runs j once. A run that stopped fails the test; one that ran
// to its end must return a *idem.FailuresError exactly when its report
// counts a unit or effect that did not end applied, one failure per count.
func RunChecked(t *testing.T, j *billing.InvoiceSync) idem.Report {
	t.Helper()
	rep, err := j.Run(context.Background())
	CheckFailures(t, "run", rep, err, false)
	return rep
}

// CheckFailures holds a call's error to its report: nil when nothing
// failed, else a *idem.FailuresError counting every failed unit and effect
// (and busy effects, for Process).
func CheckFailures(t *testing.T, call string, rep idem.Report, err error, busyFails bool) {
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

// LedgerEntry is st's ledger row under key; a missing row fails the test.
func LedgerEntry(t *testing.T, st *billing.Store, key string) idem.LedgerEntry {
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
