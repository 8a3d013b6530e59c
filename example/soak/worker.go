package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/example/soak/soakpay"
	"github.com/idemgen/idemgen/idem"
)

// River timing for a fleet whose workers die every few seconds: a job left
// running by a dead worker is rescued after rescueAfter (River's rescuer
// looks every 30s), a failed one retried after retryAfter, owed receipts
// drained every drainEvery.
const (
	jobTimeout  = 3 * time.Second
	rescueAfter = 4 * time.Second
	retryAfter  = 200 * time.Millisecond
	drainEvery  = 2 * time.Second
)

type fixedRetry time.Duration

func (d fixedRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Duration(d)) }

// openPool connects to the soak's schema, naming the connection after the process.
func openPool(ctx context.Context, url, schema, name string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = name
	// A server that is down or restarting refuses or drops connections: a
	// bounded dial, and the pool dials again on the next acquire.
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	return pgxpool.NewWithConfig(ctx, cfg)
}

// newClient returns a River client; with job set it works the soak's job.
func newClient(pool *pgxpool.Pool, id string, job *soakpay.PaymentJob, log *slog.Logger) (*river.Client[pgx.Tx], error) {
	cfg := &river.Config{ID: id, Logger: log}
	if job != nil {
		workers := river.NewWorkers()
		periodic, err := soakpay.AddRiverWorkers(workers, soakpay.RiverJobs{PaymentJob: job}, drainEvery)
		if err != nil {
			return nil, err
		}
		cfg.Workers, cfg.PeriodicJobs, cfg.Queues = workers, periodic, soakpay.RiverQueues(16)
		cfg.JobTimeout, cfg.RescueStuckJobsAfter, cfg.RetryPolicy = jobTimeout, rescueAfter, fixedRetry(retryAfter)
		cfg.FetchPollInterval, cfg.FetchCooldown = 50*time.Millisecond, 10*time.Millisecond
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// runWorker is one worker process: it works River jobs until it is killed
// (or, for a clean stop, sent SIGTERM). Across a database restart or a cut
// connection its pool dials again and River's client carries on; should
// the client stop on its own, the worker exits with an error and the
// supervisor starts another in its place.
func runWorker(ctx context.Context, cfg config) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	pool, err := openPool(ctx, cfg.postgres, cfg.schema, cfg.id)
	if err != nil {
		return err
	}
	defer pool.Close()
	prov := &httpProvider{url: cfg.provider, bug: cfg.bug, client: &http.Client{Timeout: 5 * time.Second}}
	job, err := soakpay.NewPaymentJob(soakpay.NewPostgresStore(pool), soakpay.PaymentJobEffects{Receipt: prov},
		idem.WithOwner(cfg.id), idem.WithLogger(log))
	if err != nil {
		return err
	}
	client, err := newClient(pool, cfg.id, job, log)
	if err != nil {
		return err
	}
	if err := client.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-client.Stopped():
		return errors.New("the River client stopped on its own")
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Stop(stopCtx)
}

// httpProvider sends a receipt to the fake provider with the effect key as
// its Idempotency-Key, as a Stripe client would.
type httpProvider struct {
	url    string
	bug    string // a planted bug: "fresh-key" (a new key per call), "no-key"
	client *http.Client
}

func (p *httpProvider) Receipt(ctx context.Context, key string, u soakpay.Payment) error {
	if p.bug == "fresh-key" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		key += ":" + hex.EncodeToString(b[:])
	}
	body, err := json.Marshal(receiptRequest{EventID: u.EventID, AmountCents: u.AmountCents})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url+"/receipts", bytes.NewReader(body))
	if err != nil {
		return err
	}
	if p.bug != "no-key" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("provider: %s", resp.Status)
	}
	return nil
}

type receiptRequest struct {
	EventID     string `json:"event_id"`
	AmountCents int64  `json:"amount_cents"`
}

// workerEnv marks a process the supervisor started as a worker, so the
// test binary can serve as one (TestMain).
const workerEnv = "IDEMGEN_SOAK_WORKER"

type riverClient = river.Client[pgx.Tx]

// quietLog drops the supervisor's job logs.
var quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
