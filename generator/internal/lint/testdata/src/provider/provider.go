// Package provider stands in for the client of an API that honours
// idempotency keys (a mailer, a payment provider).
package provider

import "context"

type Client struct{}

func (Client) Send(ctx context.Context, idempotencyKey, to string) error { return nil }

func (Client) Charge(ctx context.Context, cents int64, idempotencyKey string) ([]byte, error) {
	return nil, nil
}

var API Client
