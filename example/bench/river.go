package main

// The river measurement (issue 23, item 3): River with a no-op worker
// beside River with the generated worker, on one PostgreSQL schema in one
// run. Both sides queue the same units (call_job's, handed in) as the same
// River jobs: unique by the unit's key, on the same queue, worked by one
// River client configured alike. The generated side is call_job's River
// worker (benchjobs.AddRiverWorkers): the jobs it works at the same time
// are written in groups, each group's units written and their effects
// reserved in one transaction, then the provider called for each (it
// answers at once and counts each key it is called with), and River's
// completer completes the jobs, as it does plain River's. The jobs a
// worker has in hand at once are River's MaxWorkers (-river-workers), so
// that bounds a group. Each side is queued twice, one unit per transaction
// (InsertTx) and in transactions of -batch units (InsertManyTx), and
// worked after each: insertion and working are timed apart.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	//idemgen:allow-testonly the benchmark sets its runs' limits on the spec's job (WithJobEdit)
	"github.com/idemgen/idemgen/idem/idemtest"
)

// riverTarget: the generated worker works at least 0.7 × plain River's jobs/s.
const riverTarget = 0.7

// The River client's timing on both sides: River's own benchmark's
// (cmd/river/riverbench), far quicker to fetch than its defaults (100 ms
// between fetches), which would cap both sides alike.
const (
	riverFetchCooldown = 2 * time.Millisecond
	riverFetchPoll     = 20 * time.Millisecond
	riverInserters     = 8 // concurrent callers of the one-at-a-time insertion, as request handlers are
)

// riverResult is the measurement: a run per worker and insertion.
type riverResult struct {
	units, workers, batch, conns int
	runs                         []riverRun
}

// riverRun is one side queued one way and worked.
type riverRun struct {
	generated  bool
	bulk       bool
	units      int
	insert     time.Duration // first insert to the last commit
	work       time.Duration // the client's start to every job completed (and, generated, every effect done in the ledger)
	workCPU    time.Duration // this process's user + system time while working
	completed  int           // River jobs of the run's kind completed
	worked     int           // Work calls (bare) or provider keys called exactly once (generated)
	calls      int           // provider calls (generated)
	effectDone int           // ledger rows done (generated)
}

func (r riverRun) name() string {
	w, i := "bare", "one"
	if r.generated {
		w = "generated"
	}
	if r.bulk {
		i = "bulk"
	}
	return w + "/" + i
}

func (r riverRun) insertRate() float64 { return float64(r.units) / r.insert.Seconds() }
func (r riverRun) workRate() float64   { return float64(r.units) / r.work.Seconds() }
func (r riverRun) totalRate() float64  { return float64(r.units) / (r.insert + r.work).Seconds() }

func (r riverRun) checked() string {
	if r.generated {
		return fmt.Sprintf("completed %d/%d, provider keys once %d/%d (calls %d), ledger done %d",
			r.completed, r.units, r.worked, r.units, r.calls, r.effectDone)
	}
	return fmt.Sprintf("completed %d/%d, worked %d", r.completed, r.units, r.worked)
}

// workRate is a side's jobs worked per second over both insertions.
func (r *riverResult) workRate(generated bool) float64 {
	var n int
	var t time.Duration
	for _, run := range r.runs {
		if run.generated == generated {
			n, t = n+run.units, t+run.work
		}
	}
	if t == 0 {
		return 0
	}
	return float64(n) / t.Seconds()
}

// ratio is river/bare: the generated worker's jobs/s over plain River's.
func (r *riverResult) ratio() float64 { return ratio(r.workRate(true), r.workRate(false)) }

func (r *riverResult) print(out io.Writer) {
	fmt.Fprintln(out)
	fmt.Fprintf(out, "River, side by side (river.go): %d units a run on one schema, River MaxWorkers %d, FetchCooldown %v, FetchPollInterval %v, a pool of %d connections\n",
		r.units, r.workers, riverFetchCooldown, riverFetchPoll, r.conns)
	const row = "%-14s %7s %8s %10s %8s %9s %9s %12s   %s\n"
	fmt.Fprintf(out, row, "river", "units", "insert s", "inserted/s", "work s", "worked/s", "CPU/job", "end-to-end/s", "checked")
	for _, run := range r.runs {
		fmt.Fprintf(out, row, run.name(), fmt.Sprint(run.units), fmt.Sprintf("%.2f", run.insert.Seconds()), fmt.Sprintf("%.0f", run.insertRate()),
			fmt.Sprintf("%.2f", run.work.Seconds()), fmt.Sprintf("%.0f", run.workRate()),
			(run.workCPU / time.Duration(max(run.units, 1))).Round(100*time.Nanosecond).String(), fmt.Sprintf("%.0f", run.totalRate()), run.checked())
	}
	t := target{label: "river/bare", value: r.ratio(), bound: riverTarget, applies: true}
	fmt.Fprintf(out, "river/bare = generated worked/s ÷ bare worked/s, both insertions = %.0f/%.0f = %s   target %s\n",
		r.workRate(true), r.workRate(false), formatRatio(t.value), t)
	fmt.Fprintf(out, "  one: each unit in its own transaction (InsertTx), %d callers at once; bulk: InsertManyTx, %d units a transaction.\n", riverInserters, r.batch)
	fmt.Fprintln(out, "  Jobs are queued with the client stopped, then worked: \"work\" runs from the client's start to every River job completed")
	fmt.Fprintln(out, "  and, for the generated worker, every effect recorded done; end-to-end/s is units over insert + work. CPU/job is this")
	fmt.Fprintln(out, "  process's while working (River, the worker, pgx), not PostgreSQL's. Both sides' jobs are unique by key (ByArgs).")
}

// bareArgs is plain River's job: the generated args' shape and options.
type bareArgs struct {
	Key  string         `json:"key" river:"unique"`
	Unit benchjobs.Call `json:"unit"`
}

func (bareArgs) Kind() string { return "bench.bare" }

func (bareArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: "benchjobs", UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// bareWorker does nothing but count.
type bareWorker struct {
	river.WorkerDefaults[bareArgs]
	worked atomic.Int64
}

func (w *bareWorker) Work(context.Context, *river.Job[bareArgs]) error {
	w.worked.Add(1)
	return nil
}

// onceProvider answers at once and counts the calls under each key.
type onceProvider struct {
	mu    sync.Mutex
	calls map[string]int
}

func (p *onceProvider) call(_ context.Context, key string, _ benchjobs.Call) error {
	p.mu.Lock()
	p.calls[key]++
	p.mu.Unlock()
	return nil
}

// counts returns the calls and the keys called exactly once.
func (p *onceProvider) counts() (calls, once int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.calls {
		calls += n
		if n == 1 {
			once++
		}
	}
	return calls, once
}

// measureRiver runs the four runs (bare and generated, each queued one at
// a time and in bulk) on one fresh schema, within -river-deadline.
func measureRiver(ctx context.Context, d *database, cfg *config) (*riverResult, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.riverDeadline)
	defer cancel()
	sp, err := d.fresh(ctx, "river", true)
	if err != nil {
		return nil, err
	}
	defer sp.drop()
	m, err := rivermigrate.New(riverpgxv5.New(sp.pool), nil)
	if err != nil {
		return nil, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrations: %w", err)
	}
	res := &riverResult{units: cfg.riverN, workers: cfg.riverWorkers, batch: cfg.batch, conns: int(sp.pool.Config().MaxConns)}
	for _, bulk := range []bool{false, true} {
		for _, generated := range []bool{false, true} {
			run := riverRun{generated: generated, bulk: bulk, units: cfg.riverN}
			if err := run.measure(ctx, sp, cfg); err != nil {
				if ctx.Err() != nil {
					err = fmt.Errorf("%w (the -river-deadline of %v is up)", err, cfg.riverDeadline)
				}
				return res, fmt.Errorf("%s: %w", run.name(), err)
			}
			res.runs = append(res.runs, run)
		}
	}
	return res, nil
}

// measure queues the run's units with the client stopped, then starts it
// and waits for every job (and effect) to be done; then checks the counts.
func (r *riverRun) measure(ctx context.Context, sp *space, cfg *config) error {
	// Each run starts from an empty job table, as River's benchmark does;
	// its units are its own, so the ledger never skips one as a copy.
	if _, err := sp.pool.Exec(ctx, "TRUNCATE river_job"); err != nil {
		return err
	}
	prefix := strings.ReplaceAll(r.name(), "/", "-") + "-"
	units := make([]benchjobs.Call, r.units)
	for i := range units {
		units[i] = benchjobs.Call{ID: fmt.Sprint(prefix, i), Amount: int64(100 + i%900)}
	}

	discard := slog.New(slog.DiscardHandler)
	workers := river.NewWorkers()
	bare := &bareWorker{}
	provider := &onceProvider{calls: make(map[string]int, r.units)}
	var job *benchjobs.CallJob
	var periodic []*river.PeriodicJob
	kind := bareArgs{}.Kind()
	if r.generated {
		var err error
		job, err = benchjobs.NewCallJob(sp.store, benchjobs.CallJobEffects{CallProvider: benchjobs.CallProviderFunc(provider.call)},
			idem.WithLogger(discard), idem.WithOwner("bench-river"),
			// The provider answers at once: no rate (the spec's is for -providers).
			idemtest.WithJobEdit(func(j *idemrt.Job[benchjobs.Call]) { j.Effects[0].Rate = idemrt.Rate{} }))
		if err != nil {
			return err
		}
		// As a service wires it, the periodic drain included.
		if periodic, err = benchjobs.AddRiverWorkers(workers, benchjobs.RiverJobs{CallJob: job}, 0); err != nil {
			return err
		}
		kind = benchjobs.CallJobArgs{}.Kind()
	} else {
		river.AddWorker(workers, bare)
	}
	client, err := river.NewClient(riverpgxv5.New(sp.pool), &river.Config{
		Queues:            benchjobs.RiverQueues(cfg.riverWorkers),
		Workers:           workers,
		PeriodicJobs:      periodic,
		FetchCooldown:     riverFetchCooldown,
		FetchPollInterval: riverFetchPoll,
		Logger:            discard,
	})
	if err != nil {
		return err
	}

	start := time.Now()
	if err := r.queue(ctx, sp, client, job, units, cfg.batch); err != nil {
		return err
	}
	r.insert = time.Since(start)
	queued, err := sp.count(ctx, "river_job", fmt.Sprintf("kind = '%s' AND state = 'available'", kind))
	if err != nil {
		return err
	}
	if err := want("River jobs queued", queued, r.units); err != nil {
		return err
	}

	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: r.units + 1000, // never full: River drops events a full channel cannot take
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	defer unsubscribe()
	var work error
	r.work, r.workCPU, work = measure(func() error {
		if err := client.Start(ctx); err != nil {
			return err
		}
		if err := r.waitCompleted(ctx, events, kind); err != nil {
			return err
		}
		if !r.generated {
			return nil
		}
		// A job's effect is performed before its Work returns, and
		// recorded done by the engine's background recorder just after.
		for {
			done, err := sp.count(ctx, "benchjobs_idem_ledger", fmt.Sprintf("job = 'call_job' AND state = 'done' AND unit_key LIKE 'bench:call:%s%%'", prefix))
			if err != nil {
				return err
			}
			if done == r.units {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%d of %d effects done: %w", done, r.units, ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := errors.Join(work, client.Stop(stopCtx)); err != nil {
		return err
	}
	return r.check(ctx, sp, kind, prefix, bare, provider)
}

// queue inserts units one per transaction from riverInserters callers at
// once, or in transactions of batch units with InsertManyTx.
func (r *riverRun) queue(ctx context.Context, sp *space, client *river.Client[pgx.Tx], job *benchjobs.CallJob, units []benchjobs.Call, batch int) error {
	if r.bulk {
		for from := 0; from < len(units); from += batch {
			chunk := units[from:min(from+batch, len(units))]
			if err := pgx.BeginFunc(ctx, sp.pool, func(tx pgx.Tx) error {
				if job != nil {
					return job.InsertManyTx(ctx, client, tx, chunk...)
				}
				params := make([]river.InsertManyParams, len(chunk))
				for i, u := range chunk {
					params[i].Args = bareArgs{Key: u.Key(), Unit: u}
				}
				_, err := client.InsertManyTx(ctx, tx, params)
				return err
			}); err != nil {
				return fmt.Errorf("insert units %d..%d: %w", from, from+len(chunk)-1, err)
			}
		}
		return nil
	}
	var next atomic.Int64
	errs := make([]error, riverInserters)
	var wg sync.WaitGroup
	for w := range riverInserters {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(units); i = int(next.Add(1) - 1) {
				u := units[i]
				if err := pgx.BeginFunc(ctx, sp.pool, func(tx pgx.Tx) error {
					if job != nil {
						return job.InsertTx(ctx, client, tx, u)
					}
					_, err := client.InsertTx(ctx, tx, bareArgs{Key: u.Key(), Unit: u}, nil)
					return err
				}); err != nil {
					errs[w] = fmt.Errorf("insert unit %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitCompleted counts the client's completion events of kind until every
// unit's job has one; a failed or cancelled job fails the run.
func (r *riverRun) waitCompleted(ctx context.Context, events <-chan *river.Event, kind string) error {
	completed := 0
	for completed < r.units {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d River jobs completed: %w", completed, r.units, ctx.Err())
		case ev, ok := <-events:
			switch {
			case !ok:
				return fmt.Errorf("River closed its event channel after %d of %d jobs", completed, r.units)
			case ev.Job.Kind != kind:
				continue // the periodic drain
			case ev.Kind != river.EventKindJobCompleted:
				return fmt.Errorf("River job %d (%s): %s: %v", ev.Job.ID, ev.Job.Kind, ev.Kind, ev.Job.Errors)
			}
			completed++
		}
	}
	return nil
}

// check fails the run unless every job of its kind completed and every
// unit was worked once: by the no-op worker, or at the provider and in the
// ledger.
func (r *riverRun) check(ctx context.Context, sp *space, kind, prefix string, bare *bareWorker, provider *onceProvider) error {
	var err error
	if r.completed, err = sp.count(ctx, "river_job", fmt.Sprintf("kind = '%s' AND state = 'completed'", kind)); err != nil {
		return err
	}
	all, err := sp.count(ctx, "river_job", fmt.Sprintf("kind = '%s'", kind))
	if err != nil {
		return err
	}
	checks := []error{want("River jobs completed", r.completed, r.units), want("River jobs", all, r.units)}
	if !r.generated {
		r.worked = int(bare.worked.Load())
		return errors.Join(append(checks, want("no-op Work calls", r.worked, r.units))...)
	}
	r.calls, r.worked = provider.counts()
	if r.effectDone, err = sp.count(ctx, "benchjobs_idem_ledger", fmt.Sprintf("job = 'call_job' AND state = 'done' AND unit_key LIKE 'bench:call:%s%%'", prefix)); err != nil {
		return err
	}
	return errors.Join(append(checks,
		want("provider calls", r.calls, r.units),
		want("provider keys called exactly once", r.worked, r.units),
		want("ledger effects done", r.effectDone, r.units))...)
}
