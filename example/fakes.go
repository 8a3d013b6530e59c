package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
)

// billingAPI stands in for the billing service: a list of invoices, served
// by updated_at window, two per page.
type billingAPI struct {
	mu       sync.Mutex
	invoices map[string]billing.Invoice
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

// notifier stands in for an email provider that honours idempotency keys:
// it counts every call, and applies each key once.
type notifier struct {
	mu      sync.Mutex
	calls   map[string]int // calls received per key
	applied map[string]int // emails actually sent per key
	failing bool
	failure error         // what a failing call returns; errProviderDown when nil
	bounce  bool          // the address does not exist: a permanent failure
	hang    chan struct{} // when set, calls apply then block until closed
	onCall  func()        // when set, called after a call applied (the example's crash)
}

func newNotifier() *notifier {
	return &notifier{calls: map[string]int{}, applied: map[string]int{}}
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
