package effectresult

import (
	"context"
	"fmt"
	"log"
	"strings"

	"gen/billing"
	"provider"
)

var api = provider.API

// Good: synchronous, the error returned.
type mailer struct{}

func (mailer) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	var b strings.Builder
	b.WriteString(key) // a builder's error never happens
	fmt.Printf("sending %s\n", key)
	return api.Send(ctx, b.String(), inv.CustomerID)
}

// Good: a goroutine for something else, the provider called in line.
type logged struct{ done chan string }

func (l logged) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	go func() { l.done <- inv.InvoiceID }()
	return api.Send(ctx, key, inv.CustomerID)
}

// Bad: fire and forget.
type async struct{}

func (async) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	go func() { // want `\(async\).NotifyNewInvoice, which implements billing.NotifyNewInvoice, calls the provider in a goroutine and returns before it has acted`
		if err := api.Send(context.Background(), key, inv.CustomerID); err != nil {
			log.Print(err)
		}
	}()
	return nil
}

type asyncCall struct{}

func (asyncCall) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	go api.Send(ctx, key, inv.CustomerID) // want `calls the provider in a goroutine`
	return nil
}

// Bad: the provider's error dropped; the fixes return it.
type careless struct{}

func (careless) NotifyNewInvoice(ctx context.Context, key string, inv billing.Invoice) error {
	api.Send(ctx, key, inv.CustomerID) // want `\(careless\).NotifyNewInvoice, which implements billing.NotifyNewInvoice, drops the error of api.Send, the call its key goes to`
	return nil
}

func receipt(ctx context.Context, key string, p billing.Payment) ([]byte, error) {
	k := "r:" + key
	api.Send(ctx, k, p.InvoiceID)              // want `receipt, given to billing.SendReceiptFunc, drops the error of api.Send`
	id, _ := api.Charge(ctx, p.AmountCents, k) // want `drops the error of api.Charge`
	return id, nil
}

var _ billing.SendReceipt = billing.SendReceiptFunc(receipt)
