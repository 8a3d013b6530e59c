package effectkey

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"gen/billing"
	"provider"

	"github.com/google/uuid"
)

var api = provider.API

// Good: the key goes to the provider unchanged.
type mailer struct{ calls map[string]int }

func (m *mailer) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	m.calls[key]++
	return api.Send(ctx, key, inv.CustomerID)
}

// Good: a deterministic prefix, a copy, and the effect's own key function.
type prefixed struct{}

func (prefixed) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	k := "acme:" + strings.ToUpper(key)
	start := time.Now()
	defer func() { fmt.Println(key, time.Since(start)) }()
	return api.Send(ctx, k, inv.CustomerID)
}

type recomputed struct{}

func (recomputed) NotifyNewInvoice(ctx context.Context, _ string, inv billing.Invoice) error {
	return api.Send(ctx, billing.NotifyNewInvoiceKey(inv), inv.CustomerID)
}

// Good: the time next to the key in a log line or an error is no key.
type logging struct{}

func (logging) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	log.Print("notify " + key + " at " + time.Now().String())
	if err := api.Send(ctx, key, inv.CustomerID); err != nil {
		return errors.New(key + " failed at " + time.Now().String())
	}
	return nil
}

// Bad: the key is dropped.
type dropper struct{}

func (dropper) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error { // want `\(dropper\).NotifyNewInvoice, which implements billing.NotifyNewInvoice, never uses its idempotency key: pass key to the provider`
	return api.Send(ctx, inv.InvoiceID, inv.CustomerID)
}

// Bad: the key only goes to the log.
type logOnly struct{}

func (logOnly) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error { // want `\(logOnly\).NotifyNewInvoice, which implements billing.NotifyNewInvoice, never uses its idempotency key`
	log.Printf("notify %s", key)
	if err := api.Send(ctx, inv.InvoiceID, inv.CustomerID); err != nil {
		return fmt.Errorf("notify %s: %w", key, err)
	}
	return nil
}

// Bad: dropped through a helper that ignores its parameter.
type delegator struct{}

func (d delegator) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error { // want `never uses its idempotency key`
	return d.send(ctx, key, inv)
}

func (delegator) send(ctx context.Context, key string, inv billing.Invoice) error {
	_ = key
	return api.Send(ctx, "", inv.CustomerID)
}

// Good: the helper passes it on.
type relay struct{}

func (r relay) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	return r.send(ctx, key, inv)
}

func (relay) send(ctx context.Context, k string, inv billing.Invoice) error {
	return api.Send(ctx, k, inv.CustomerID)
}

// Bad: the clock appended.
type stamped struct{}

func (stamped) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	return api.Send(ctx, key+"-"+time.Now().Format(time.RFC3339), inv.CustomerID) // want `\(stamped\).NotifyNewInvoice, which implements billing.NotifyNewInvoice, joins time.Now\(\) to its idempotency key; time.Now\(\) differs on every attempt`
}

// Bad: a key per day is a new key when the retry falls on the next day.
type daily struct{}

func (daily) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	return api.Send(ctx, key+time.Now().Format("2006-01-02"), inv.CustomerID) // want `joins time.Now\(\) to its idempotency key`
}

// Bad: through a local and fmt.Sprintf.
type sprinted struct{}

func (sprinted) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	nonce := rand.Int63()
	k := fmt.Sprintf("%s/%d", key, nonce) // want `joins rand.Int63\(\) to its idempotency key`
	return api.Send(ctx, k, inv.CustomerID)
}

// Bad: replaced by a UUID, and extended by a counter.
type replaced struct{}

func (replaced) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	key = uuid.NewString() // want `replaces its idempotency key with uuid.NewString\(\); uuid.NewString\(\) differs on every attempt`
	return api.Send(ctx, key, inv.CustomerID)
}

type counted struct{ attempts atomic.Int64 }

func (c *counted) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	c.attempts.Add(1)
	key += strconv.FormatInt(c.attempts.Load(), 10) // want `joins the counter c.attempts to its idempotency key`
	return api.Send(ctx, key, inv.CustomerID)
}

var sent int

// Bad: a package counter in a []string joined by strings.Join; no fix.
func notifyJoined(ctx context.Context, key string, inv billing.Invoice) error {
	sent++
	return api.Send(ctx, strings.Join([]string{key, strconv.Itoa(sent)}, ":"), inv.CustomerID) // want `notifyJoined, given to billing.NotifyNewInvoiceFunc, joins the counter sent to its idempotency key`
}

var _ = billing.NotifyNewInvoiceFunc(notifyJoined)

// Funcs given to adapters, in every way a func reaches one.
func wire() billing.InvoiceSyncEffects {
	good := billing.NotifyNewInvoiceFunc(func(ctx context.Context, key string, inv billing.Invoice) error {
		return api.Send(ctx, key, inv.CustomerID)
	})
	_ = good
	var assigned billing.NotifyNewInvoiceFunc = func(ctx context.Context, key string, inv billing.Invoice) error { // want `the function given to billing.NotifyNewInvoiceFunc never uses its idempotency key`
		return nil
	}
	_ = assigned
	_ = billing.PaymentWebhookEffects{
		SendReceipt: billing.SendReceiptFunc(func(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
			return api.Charge(ctx, p.AmountCents, p.Key()) // want `the function given to billing.SendReceiptFunc passes the unit's key "payments:event:{event_id}" where this effect's key "receipt:v{version}:{event_id}" belongs`
		}),
	}
	return billing.InvoiceSyncEffects{NotifyNewInvoice: billing.NotifyNewInvoiceFunc(func(context.Context, string, billing.Invoice) error { // want `the function given to billing.NotifyNewInvoiceFunc never uses its idempotency key`
		return nil
	})}
}

func register(f billing.SendReceiptFunc) {}

func wireArg() {
	register(func(ctx context.Context, _ string, p billing.Payment) ([]byte, error) {
		return api.Charge(ctx, p.AmountCents, p.Key()) // want `passes the unit's key`
	})
}

func wireReturn() billing.SendReceiptFunc {
	return func(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
		return api.Charge(ctx, p.AmountCents, uuid.New().String()+key) // want `joins uuid.New\(\) to its idempotency key`
	}
}

// Not an effect: same name, other signature.
type other struct{}

func (other) NotifyNewInvoice(key string) error { return nil }

// Not an effect either: a hand-written interface in the generated package.
type auditor struct{}

func (auditor) Audit(key string) error { return nil }
