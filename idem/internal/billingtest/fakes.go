package billingtest

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
)

// The providers' failures, for tests to find in errors.
var (
	ErrProviderDown = errors.New("provider unavailable")
	ErrNoMailbox    = errors.New("mailbox does not exist")
	ErrDeclined     = errors.New("receipt declined by the card network")
)

// Invoices stands in for the billing service: a list of invoices, served
// by updated_at window, oldest first.
type Invoices struct {
	mu       sync.Mutex
	pageSize int
	invoices map[string]billing.Invoice
	windows  []idem.Window // the window of every first page fetched
}

// NewInvoices serves pageSize invoices a page, or a whole window in one
// page when pageSize is 0.
func NewInvoices(pageSize int) *Invoices {
	return &Invoices{pageSize: pageSize, invoices: map[string]billing.Invoice{}}
}

// Put serves inv, in place of any invoice of the same id.
func (s *Invoices) Put(inv billing.Invoice) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.invoices[inv.InvoiceID] = inv
}

// Fetch implements billing.InvoiceSyncSource.
func (s *Invoices) Fetch(_ context.Context, w idem.Window, page string) ([]billing.Invoice, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if page == "" {
		s.windows = append(s.windows, w)
	}
	var in []billing.Invoice
	for _, inv := range s.invoices {
		if !inv.UpdatedAt.Before(w.Since) && inv.UpdatedAt.Before(w.Until) {
			in = append(in, inv)
		}
	}
	slices.SortFunc(in, func(a, c billing.Invoice) int { return a.UpdatedAt.Compare(c.UpdatedAt) })
	if s.pageSize == 0 {
		return in, "", nil
	}
	start := 0
	if page != "" {
		start = int(page[0] - '0')
	}
	end := min(start+s.pageSize, len(in))
	next := ""
	if end < len(in) {
		next = string(rune('0' + end))
	}
	return in[start:end], next, nil
}

// LastWindow is the window of the last fetch of a first page.
func (s *Invoices) LastWindow() idem.Window {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.windows) == 0 {
		return idem.Window{}
	}
	return s.windows[len(s.windows)-1]
}

// Mailer stands in for an email provider that honours idempotency keys:
// it counts every call, and applies each key once. Tests set its switches
// before the calls they mean them for, and read its counts after.
type Mailer struct {
	mu      sync.Mutex
	Calls   map[string]int     // calls received per key
	Applied map[string]int     // emails actually sent per key
	amounts map[string][]int64 // the invoice amount each call carried, per key
	Failing bool
	Failure error         // what a failing call returns; ErrProviderDown when nil
	Bounce  bool          // the address does not exist: a permanent failure
	Hang    chan struct{} // when set, calls apply then block until closed
	OnCall  func()        // when set, called after a call applied (the example's crash)
}

// NewMailer is a mailer that has had no calls and sends every email.
func NewMailer() *Mailer {
	return &Mailer{Calls: map[string]int{}, Applied: map[string]int{}, amounts: map[string][]int64{}}
}

// NotifyNewInvoice implements billing.NotifyNewInvoice.
func (m *Mailer) NotifyNewInvoice(_ context.Context, key string, inv billing.Invoice) error {
	m.mu.Lock()
	m.Calls[key]++
	m.amounts[key] = append(m.amounts[key], inv.AmountCents)
	if m.Bounce {
		m.mu.Unlock()
		return idem.Permanent(ErrNoMailbox)
	}
	if m.Failing {
		err := m.Failure
		m.mu.Unlock()
		if err == nil {
			err = ErrProviderDown
		}
		return err
	}
	if m.Applied[key] == 0 {
		m.Applied[key]++
	}
	hang, onCall := m.Hang, m.OnCall
	m.mu.Unlock()
	if onCall != nil {
		onCall()
	}
	if hang != nil {
		<-hang
	}
	return nil
}

// SetHang sets Hang while calls may be in flight (under the mailer's lock).
func (m *Mailer) SetHang(hang chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Hang = hang
}

// CallsOf is the number of calls made with key.
func (m *Mailer) CallsOf(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Calls[key]
}

// AmountsOf is the invoice amount of each call made with key, in order.
func (m *Mailer) AmountsOf(key string) []int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.amounts[key])
}

// Totals are the calls received and the emails sent, over all keys.
func (m *Mailer) Totals() (calls, applied int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, c := range m.Calls {
		calls += c
	}
	for _, a := range m.Applied {
		applied += a
	}
	return calls, applied
}

// Receipts stands in for a receipt service: it counts every call, and its
// result is a receipt id.
type Receipts struct {
	mu      sync.Mutex
	Calls   map[string]int // calls received per key
	Decline bool           // refuse every receipt for good
}

// NewReceipts is a receipt service that has had no calls and sends every
// receipt.
func NewReceipts() *Receipts { return &Receipts{Calls: map[string]int{}} }

// SendReceipt implements billing.SendReceipt.
func (r *Receipts) SendReceipt(_ context.Context, key string, p billing.Payment) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Calls[key]++
	if r.Decline {
		return nil, idem.Permanent(ErrDeclined)
	}
	return []byte("rcpt-" + p.EventID), nil
}
