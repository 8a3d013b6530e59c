package unitkey

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"gen/billing"

	"github.com/google/uuid"
)

type event struct {
	ID     string
	Amount int64
}

var hook *billing.PaymentWebhook

// Good: the key field from the event, the clock only in other fields.
func handle(ctx context.Context, ev event) error {
	_, err := hook.Process(ctx, billing.Payment{EventID: ev.ID, AmountCents: ev.Amount, PaidAt: time.Now()})
	return err
}

// Good: a name-based UUID is deterministic.
func handleNamed(ctx context.Context, ev event) error {
	_, err := hook.Process(ctx, billing.Payment{EventID: uuid.NewSHA1(uuid.NameSpaceURL, []byte(ev.ID)).String()})
	return err
}

// Bad: random key fields at the call site.
func handleRandom(ctx context.Context, ev event) error {
	_, err := hook.Process(ctx, billing.Payment{EventID: uuid.NewString(), AmountCents: ev.Amount}) // want `billing.Payment.EventID is part of the unit's idempotency key "payments:event:{event_id}" but is set from uuid.NewString\(\), which differs on every attempt`
	return err
}

func handleStamped(ctx context.Context, ev event) error {
	id := fmt.Sprintf("%s-%d", ev.ID, time.Now().UnixNano())
	p := &billing.Payment{AmountCents: ev.Amount}
	p.EventID = id // want `billing.Payment.EventID is part of the unit's idempotency key "payments:event:{event_id}" but is set from time.Now\(\)`
	_, err := hook.Process(ctx, *p)
	return err
}

func handlePositional(ctx context.Context) error {
	_, err := hook.Process(ctx, billing.Payment{fmt.Sprint(rand.Int()), "inv", 1, time.Time{}, nil}) // want `EventID is part of the unit's idempotency key .* set from rand.Int\(\)`
	return err
}

// Good: a unit keyed by its period is a design (a daily or weekly job),
// not a value of the attempt.
func handleDaily(ctx context.Context) error {
	now := time.Now()
	_, err := hook.Process(ctx,
		billing.Payment{EventID: now.Format("2006-01-02")},
		billing.Payment{EventID: startOfWeek(now)},
		billing.Payment{EventID: time.Now().Truncate(time.Hour).String()},
	)
	return err
}

func startOfWeek(t time.Time) string {
	y, w := t.ISOWeek()
	return fmt.Sprint(y, w)
}

// Bad: the time of day is no period.
func handleStampedDay(ctx context.Context) error {
	_, err := hook.Process(ctx, billing.Payment{EventID: time.Now().Format(time.RFC3339)}) // want `set from time.Now\(\)`
	return err
}

var fetched int

// Bad in a source too: a unit fetched again gets a new key.
type source struct{}

func (source) Fetch(ctx context.Context, w billing.Window, page string) ([]billing.Invoice, string, error) {
	fetched++
	host, _ := os.Hostname()
	return []billing.Invoice{
		{InvoiceID: fmt.Sprint(fetched), CustomerID: host}, // want `billing.Invoice.InvoiceID is part of the unit's idempotency key "billing:invoice:{invoice_id}" but is set from the counter fetched`
		{InvoiceID: host}, // want `set from os.Hostname\(\)`
	}, "", nil
}
