package idem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// charge is an effect's provider call, mapping the provider's answer once,
// Stripe-style: the network and 5xx are failed attempts (tried again after
// the backoff, with the same key), a throttle or a key in use is "not now",
// and an invalid or declined request is permanent.
func charge(ctx context.Context, url, key string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Idempotency-Key", key) // the effect's key, unchanged
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err // the network: tried again after the backoff, same key
	}
	defer resp.Body.Close()
	switch code := resp.StatusCode; {
	case code < 300:
		return io.ReadAll(resp.Body)
	case code == 429 || code == 503 || code == 409: // throttled, down for a moment, or the key is in use
		wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return nil, idem.RetryAfter(time.Duration(wait)*time.Second, errors.New(resp.Status))
	case code == 400 || code == 402 || code == 404: // invalid or declined: no retry can fix it
		return nil, idem.Permanent(errors.New(resp.Status))
	default: // 5xx: a failed attempt, up to max_attempts
		return nil, errors.New(resp.Status)
	}
}

// An effect tells the engine what a provider's answer means: Permanent
// parks the effect at once, RetryAfter waits without counting an attempt,
// and any other error is a failed attempt.
func ExampleRetryAfter() {
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Idempotency-Key") {
		case "charge:throttled":
			w.Header().Set("Retry-After", "30")
			w.WriteHeader(http.StatusTooManyRequests)
		case "charge:declined":
			w.WriteHeader(http.StatusPaymentRequired)
		case "charge:down":
			w.WriteHeader(http.StatusBadGateway)
		default:
			fmt.Fprint(w, "receipt for "+r.Header.Get("Idempotency-Key"))
		}
	}))
	defer provider.Close()

	for _, key := range []string{"charge:ok", "charge:throttled", "charge:declined", "charge:down"} {
		receipt, err := charge(context.Background(), provider.URL, key)
		switch {
		case err == nil:
			fmt.Printf("%s: done, %q kept\n", key, receipt)
		case errors.Is(err, idem.ErrRetryAfter):
			fmt.Printf("%s: not now (%v); no attempt counted\n", key, err)
		case errors.Is(err, idem.ErrPermanent):
			fmt.Printf("%s: parked at once (%v)\n", key, errors.Unwrap(err))
		default:
			fmt.Printf("%s: a failed attempt (%v)\n", key, err)
		}
	}
	// Output:
	// charge:ok: done, "receipt for charge:ok" kept
	// charge:throttled: not now (retry after 30s: 429 Too Many Requests); no attempt counted
	// charge:declined: parked at once (402 Payment Required)
	// charge:down: a failed attempt (502 Bad Gateway)
}
