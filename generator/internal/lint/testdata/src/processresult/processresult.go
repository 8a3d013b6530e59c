package processresult

import (
	"context"

	"gen/billing"
)

var hook *billing.PaymentWebhook

// Good: the error is checked, or the report is.
func handle(ctx context.Context, p billing.Payment) error {
	if _, err := hook.Process(ctx, p); err != nil {
		return err
	}
	rep, _ := hook.Process(ctx, p)
	_ = rep.Failed
	_, _ = hook.Drain(ctx)
	return nil
}

// Bad: nothing is looked at.
func handleBlind(ctx context.Context, p billing.Payment) {
	hook.Process(ctx, p)        // want `the result of \(\*billing.PaymentWebhook\).Process is dropped: a payload mismatch, an effect in progress elsewhere or a failed write shows only in its error and report`
	_, _ = hook.Process(ctx, p) // want `Process is dropped`
	go hook.Process(ctx, p)     // want `Process is dropped`
	defer hook.Process(ctx, p)  // want `Process is dropped`
}

// A method of the same name on another type is not a job's.
type queue struct{}

func (queue) Process(ctx context.Context, units ...billing.Payment) (billing.Report, error) {
	return billing.Report{}, nil
}

func drain(ctx context.Context, q queue, p billing.Payment) { q.Process(ctx, p) }
