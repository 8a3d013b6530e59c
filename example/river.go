package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"

	"github.com/idemgen/idemgen/example/billing"
)

// migrateRiver applies River's own migrations (its job table, leader
// table, ...) through River's migrator, in the pool's search_path.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}

// riverTiming is how quickly a fleet notices work and dead workers. River's
// defaults suit production (a stuck job is rescued after an hour); the
// example, its tests and the soak shorten them so kills heal in seconds.
type riverTiming struct {
	JobTimeout   time.Duration // a job running longer is cancelled
	RescueAfter  time.Duration // a job running longer (its worker died) is rescued and retried
	RetryAfter   time.Duration // fixed retry delay instead of River's attempt^4 seconds
	FetchPoll    time.Duration
	DrainEvery   time.Duration
	MaxWorkers   int
	ClientID     string
	RiverLogger  *slog.Logger
	ErrorHandler river.ErrorHandler
}

// fixedRetry retries a failed job after a fixed delay.
type fixedRetry time.Duration

func (d fixedRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(time.Duration(d)) }

// newRiverClient starts nothing: it builds a River client on pool that
// works the billing jobs set in jobs (AddRiverWorkers) on the package's queues.
func newRiverClient(pool *pgxpool.Pool, jobs billing.RiverJobs, tm riverTiming) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	periodic, err := billing.AddRiverWorkers(workers, jobs, tm.DrainEvery)
	if err != nil {
		return nil, err
	}
	cfg := &river.Config{
		ID:                   tm.ClientID,
		Queues:               billing.RiverQueues(max(tm.MaxWorkers, 1)),
		Workers:              workers,
		PeriodicJobs:         periodic,
		JobTimeout:           tm.JobTimeout,
		RescueStuckJobsAfter: tm.RescueAfter,
		FetchPollInterval:    tm.FetchPoll,
		FetchCooldown:        min(tm.FetchPoll, river.FetchCooldownDefault),
		Logger:               tm.RiverLogger,
		ErrorHandler:         tm.ErrorHandler,
	}
	if tm.RetryAfter > 0 {
		cfg.RetryPolicy = fixedRetry(tm.RetryAfter)
	}
	return river.NewClient(riverpgxv5.New(pool), cfg)
}

// fastRiver is the timing of the example, its tests and the soak.
func fastRiver(id string, log *slog.Logger) riverTiming {
	return riverTiming{
		JobTimeout: 3 * time.Second, RescueAfter: 4 * time.Second, RetryAfter: 200 * time.Millisecond,
		FetchPoll: 100 * time.Millisecond, DrainEvery: 2 * time.Second, MaxWorkers: 8,
		ClientID: id, RiverLogger: log,
	}
}

// riverJobStates counts River's jobs of kind by state.
func riverJobStates(ctx context.Context, pool *pgxpool.Pool, kind string) (map[string]int, error) {
	rows, err := pool.Query(ctx, "SELECT state::text, count(*) FROM river_job WHERE kind = $1 GROUP BY state", kind)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return nil, err
		}
		out[s] = n
	}
	return out, rows.Err()
}
