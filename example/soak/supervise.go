package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgen/idemgen/example/soak/soakpay"
	"github.com/idemgen/idemgen/idem"
)

// result is what a soak measured and found.
type result struct {
	units, rows, keys, done, owed, parked int
	riverJobs                             map[string]int
	elapsed                               time.Duration
	kills, restarts                       int
	prov                                  tally
	missing, duplicates                   []string // payments receipted 0 or 2+ times
}

func (r result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %d units in %s: %.1f units/s\n", r.units, r.elapsed.Round(time.Millisecond), float64(r.units)/r.elapsed.Seconds())
	fmt.Fprintf(&b, "  workers killed (SIGKILL) and restarted: %d\n", r.kills)
	fmt.Fprintf(&b, "  rows: %d for %d keys (%d units fed); ledger: done %d, owed %d, parked %d\n", r.rows, r.keys, r.units, r.done, r.owed, r.parked)
	fmt.Fprintf(&b, "  River jobs: %v\n", r.riverJobs)
	fmt.Fprintf(&b, "  provider: %d requests, %d repeats absorbed by Idempotency-Key, %d without a key\n", r.prov.requests, r.prov.repeats, r.prov.noKey)
	fmt.Fprintf(&b, "  receipts missing: %d, duplicates: %d", len(r.missing), len(r.duplicates))
	return b.String()
}

// verdict is nil when every invariant held.
func (r result) verdict() error {
	var errs []error
	if r.rows != r.units || r.keys != r.units {
		errs = append(errs, fmt.Errorf("%d rows for %d keys; want one row for each of %d units", r.rows, r.keys, r.units))
	}
	if r.done != r.units || r.owed != 0 || r.parked != 0 {
		errs = append(errs, fmt.Errorf("ledger: done %d, owed %d, parked %d; want %d done", r.done, r.owed, r.parked, r.units))
	}
	if r.riverJobs["completed"] != r.units || len(r.riverJobs) != 1 {
		errs = append(errs, fmt.Errorf("River jobs %v; want %d completed", r.riverJobs, r.units))
	}
	if r.prov.noKey > 0 {
		errs = append(errs, fmt.Errorf("%d provider requests without an Idempotency-Key", r.prov.noKey))
	}
	if len(r.missing) > 0 {
		errs = append(errs, fmt.Errorf("%d payments never receipted, e.g. %s", len(r.missing), r.missing[0]))
	}
	if len(r.duplicates) > 0 {
		errs = append(errs, fmt.Errorf("%d payments receipted more than once, e.g. %s", len(r.duplicates), r.duplicates[0]))
	}
	return errors.Join(errs...)
}

// fleet starts, kills and restarts worker processes.
type fleet struct {
	mu    sync.Mutex
	exe   string
	args  []string
	env   []string
	procs map[int]*exec.Cmd
	log   io.Writer
	kills int
}

func (f *fleet) start(i int) error {
	cmd := exec.Command(f.exe, append(f.args, "-id", fmt.Sprintf("soak-worker-%d", i))...)
	cmd.Env, cmd.Stdout, cmd.Stderr = f.env, f.log, f.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker %d: %w", i, err)
	}
	f.mu.Lock()
	f.procs[i] = cmd
	f.mu.Unlock()
	return nil
}

// kill SIGKILLs worker i and starts a new process in its place.
func (f *fleet) kill(i int) error {
	f.mu.Lock()
	cmd := f.procs[i]
	f.kills++
	f.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	return f.start(i)
}

// stop ends every worker cleanly.
func (f *fleet) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, cmd := range f.procs {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, cmd := range f.procs {
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
}

// supervise runs one soak: exe is the binary to start workers from (this
// command, or the test binary, which runs a worker when the env says so).
func supervise(ctx context.Context, cfg config, exe string, out io.Writer) (res result, err error) {
	rng := rand.New(rand.NewPCG(uint64(cfg.seed), 0))
	fmt.Fprintf(out, "soak: %d workers, %d units over %s, a SIGKILL every ~%s, seed %d\n", cfg.workers, cfg.units, cfg.duration, cfg.killEvery, cfg.seed)
	schema := fmt.Sprintf("idemgen_soak_%d", time.Now().UnixNano())
	pool, err := openPool(ctx, cfg.postgres, "public", "soak-supervisor")
	if err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		pool.Close()
		return res, err
	}
	pool.Close()
	if pool, err = openPool(ctx, cfg.postgres, schema, "soak-supervisor"); err != nil {
		return res, err
	}
	defer func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}()
	store := soakpay.NewPostgresStore(pool)
	if err := store.Migrate(ctx); err != nil {
		return res, err
	}
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return res, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return res, err
	}

	prov := newProvider()
	prov.delay = cfg.providerDelay
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return res, err
	}
	srv := &http.Server{Handler: prov}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	args := []string{"-worker", "-postgres", cfg.postgres, "-schema", schema, "-provider", "http://" + ln.Addr().String()}
	if cfg.bug != "" {
		args = append(args, "-bug", cfg.bug)
	}
	fl := &fleet{exe: exe, args: args, env: append(os.Environ(), workerEnv+"=1"), procs: map[int]*exec.Cmd{}, log: os.Stderr}
	for i := range cfg.workers {
		if err := fl.start(i); err != nil {
			fl.stop()
			return res, err
		}
	}
	defer fl.stop()

	// The feeder: an insert-only River client enqueues units in the
	// supervisor's transactions, in batches, over the soak's duration;
	// one batch in ten also repeats an earlier unit (River skips it).
	inserter, err := newClient(pool, "soak-feeder", nil, nil)
	if err != nil {
		return res, err
	}
	job, err := soakpay.NewPaymentJob(store, soakpay.PaymentJobEffects{Receipt: &httpProvider{url: "http://" + ln.Addr().String(), client: http.DefaultClient}}, idem.WithLogger(quietLog))
	if err != nil {
		return res, err
	}
	start := time.Now()
	const batch = 20
	batches := (cfg.units + batch - 1) / batch
	interval := cfg.duration / time.Duration(batches)
	nextKill := start.Add(jitter(rng, cfg.killEvery))
	fed := 0
	for b := 0; fed < cfg.units; b++ {
		var units []soakpay.Payment
		for ; len(units) < batch && fed < cfg.units; fed++ {
			units = append(units, soakpay.Payment{EventID: fmt.Sprintf("evt-%06d", fed), AmountCents: int64(100 + fed)})
		}
		if b%10 == 9 {
			units = append(units, soakpay.Payment{EventID: "evt-000000", AmountCents: 100})
		}
		if err := enqueue(ctx, pool, inserter, job, units); err != nil {
			return res, err
		}
		for time.Now().Before(start.Add(time.Duration(b+1) * interval)) {
			if now := time.Now(); !now.Before(nextKill) {
				if err := fl.kill(rng.IntN(cfg.workers)); err != nil {
					return res, err
				}
				nextKill = now.Add(jitter(rng, cfg.killEvery))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Fprintf(out, "soak: fed %d units in %s, %d kills; waiting for the fleet to finish\n", cfg.units, time.Since(start).Round(time.Millisecond), fl.kills)

	// Settle: no more kills; the fleet finishes, rescues and drains.
	deadline := time.Now().Add(cfg.settle)
	for {
		res, err = check(ctx, pool, prov, cfg.units)
		if err != nil {
			return res, err
		}
		open := 0
		for s, n := range res.riverJobs {
			if s != "completed" && s != "cancelled" && s != "discarded" {
				open += n
			}
		}
		if open == 0 && res.owed == 0 && res.done+res.parked >= res.units {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(out, "soak: the fleet did not finish within -settle %s\n", cfg.settle)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	res.kills = fl.kills
	return res, nil
}

// enqueue inserts units in one transaction of the supervisor's.
func enqueue(ctx context.Context, pool *pgxpool.Pool, client *riverClient, job *soakpay.PaymentJob, units []soakpay.Payment) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := job.InsertTx(ctx, client, tx, units...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// check reads the database and the provider.
func check(ctx context.Context, pool *pgxpool.Pool, prov *provider, units int) (result, error) {
	res := result{units: units, riverJobs: map[string]int{}}
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM soak_payments),
		(SELECT count(DISTINCT event_id) FROM soak_payments),
		(SELECT count(*) FROM soakpay_idem_ledger WHERE state = 'done'),
		(SELECT count(*) FROM soakpay_idem_ledger WHERE state = 'pending'),
		(SELECT count(*) FROM soakpay_idem_ledger WHERE state = '`+idem.StoredParked+`')`).Scan(&res.rows, &res.keys, &res.done, &res.owed, &res.parked)
	if err != nil {
		return res, err
	}
	rows, err := pool.Query(ctx, "SELECT state::text, count(*) FROM river_job WHERE kind = $1 GROUP BY 1", soakpay.PaymentJobArgs{}.Kind())
	if err != nil {
		return res, err
	}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			return res, err
		}
		res.riverJobs[s] = n
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	res.prov = prov.tally()
	for i := range units {
		switch e := fmt.Sprintf("evt-%06d", i); res.prov.applied[e] {
		case 0:
			res.missing = append(res.missing, e)
		case 1:
		default:
			res.duplicates = append(res.duplicates, e)
		}
	}
	return res, nil
}

// jitter is a random duration around mean (half to one and a half of it).
func jitter(rng *rand.Rand, mean time.Duration) time.Duration {
	return mean/2 + time.Duration(rng.Int64N(int64(mean)+1))
}
