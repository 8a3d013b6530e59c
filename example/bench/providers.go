package main

// The -providers measurement (issue 20, item 7): effects against a provider
// that throttles. A simulator serves R calls a second over HTTP on
// loopback and answers 429 with Retry-After above that; call_job's
// effect (idemgen.yaml) calls it through a Stripe-style HTTP client, from
// one worker process and from a fleet of four, all sharing one PostgreSQL
// and the effect's fleet-wide rate (spec rate, set to R here). Each run
// measures effects/s against R, the share of calls answered 429, parked
// effects, and whether the simulator applied every effect exactly once.
// With -outage the simulator answers 503 for a window inside the run, and
// the run checks that nothing parks and every effect still happens once;
// it counts the calls made during the outage and the seconds from the
// provider's recovery to effects/s back at 0.9 × R. With -throttle it
// answers 429 with Retry-After to every call for a window instead (an
// account throttled after a burst), and the run counts the 429s.
// -provider-gate off,on runs each side by side without and with the
// effect's gate (a circuit, and Retry-After as idem.PauseEffect).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	//idemgen:allow-testonly the benchmark sets its runs' limits on the spec's job (WithJobEdit)
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The hidden flags of a provider worker child: it drains call_job on the
// parent's schema against the parent's simulator, then exits.
const (
	workerFlag       = "internal-provider-worker"
	workerSchemaFlag = "internal-provider-schema"
	workerURLFlag    = "internal-provider-url"
	workerLimitFlag  = "internal-provider-deadline"
	workerGateFlag   = "internal-provider-gate"
)

// benchCircuit is the effect's circuit in a providers run with the gate
// on: five failures in a row open it for 2 s, doubling with each reopening
// up to 3 s (max_cool_down), so that a recovered provider is probed within
// 3 s.
var benchCircuit = idemrt.Circuit{Failures: 5, CoolDown: 2 * time.Second, MaxCoolDown: 3 * time.Second}

// The targets of issue 20, item 7.
const (
	providerRateTarget     = 0.9  // effects/s ≥ 0.9 × R
	providerThrottleTarget = 0.05 // 429s ≤ 5% of calls
)

// The targets of issue 42, for a run with the gate on.
const (
	outageCallsPerCoolDown = 2               // calls during the outage ≤ (outage ÷ cool_down) × 2
	recoveryTarget         = 5 * time.Second // effects/s back to ≥ 0.9 × R within 5 s of the provider's recovery
	burstThrottleTarget    = 0.01            // with -throttle: 429s ≤ 1% of calls
)

// providerRun is one run of call_job over its own schema and simulator.
type providerRun struct {
	workers  int
	units    int
	rate     int           // R, the simulator's calls per second
	elapsed  time.Duration // from the workers' start to the last effect done (ledger)
	cpu      time.Duration // the workers' user + system time
	outage   time.Duration // the simulator's 503 window, 0 for none
	outageAt time.Duration // its start after the workers' start
	throttle time.Duration // the simulator's 429 window (-throttle), 0 for none
	// recovery is the time from the outage's end to the first full second
	// with 0.9 × R calls applied (recovered false: none before the run
	// ended); recoveryPre the same to 0.9 × the rate of the outage's
	// first half before it (preRate), which a loaded machine may hold
	// below R.
	recovery, recoveryPre   time.Duration
	recovered, recoveredPre bool
	preRate                 float64
	sim                     simCounts
	done                    int  // ledger rows done
	parked                  int  // ledger rows parked
	onceKeys                int  // keys the simulator applied exactly once
	wrongKeys               int  // keys applied more than once, or not one of the run's
	passes                  int  // Drain calls, all workers
	attempts                int  // the most attempts on one effect (the ledger's attempts: the provider's RetryAfter counts none)
	maxAtt                  int  // the effect's max_attempts (idemgen.yaml)
	gate                    bool // the effect's circuit on, and Retry-After as idem.PauseEffect
}

func (r providerRun) name() string {
	if r.gate {
		return fmt.Sprintf("providers/%d+gate", r.workers)
	}
	return fmt.Sprintf("providers/%d", r.workers)
}

// effectsPerSecond is done effects over the run's wall time.
func (r providerRun) effectsPerSecond() float64 { return float64(r.done) / r.elapsed.Seconds() }

// rateRatio is effects/s over R: the figure of the ≥ 0.9 target.
func (r providerRun) rateRatio() float64 { return r.effectsPerSecond() / float64(r.rate) }

// throttledShare is the share of calls the simulator answered 429, of
// those it did not answer 503 (the outage answers before the rate limit).
func (r providerRun) throttledShare() float64 {
	if r.servedCalls() == 0 {
		return math.NaN()
	}
	return float64(r.sim.throttled) / float64(r.servedCalls())
}

// servedCalls is the calls outside the outage.
func (r providerRun) servedCalls() int { return r.sim.calls - r.sim.unavailable }

// exactlyOnce: every unit's effect applied once at the provider, none
// twice, nothing else applied, and the ledger has each done.
func (r providerRun) exactlyOnce() bool {
	return r.onceKeys == r.units && r.wrongKeys == 0 && r.done == r.units
}

// met says whether the run meets its targets: without an outage the
// issue's three (rate, 0 parked, 429 share) and exactly once; with one,
// 0 parked and exactly once (the outage takes its minutes out of the rate).
func (r providerRun) met() bool {
	ok := r.parked == 0 && r.exactlyOnce()
	if r.outage == 0 && r.throttle == 0 {
		ok = ok && r.rateRatio() >= providerRateTarget && r.throttledShare() <= providerThrottleTarget
	}
	if r.gate && r.outage > 0 {
		ok = ok && r.outageCallsMet() && r.recoveryMet()
	}
	if r.gate && r.throttle > 0 {
		ok = ok && r.throttledShare() <= burstThrottleTarget
	}
	return ok
}

// outageCallsBound is issue 42's bound on the calls during the outage:
// (outage ÷ cool_down) × 2.
func (r providerRun) outageCallsBound() int {
	return int(float64(outageCallsPerCoolDown) * r.outage.Seconds() / benchCircuit.CoolDown.Seconds())
}

func (r providerRun) outageCallsMet() bool { return r.sim.unavailable <= r.outageCallsBound() }

// recoveryMet: effects/s back to 0.9 × R within recoveryTarget of the
// provider's recovery.
func (r providerRun) recoveryMet() bool { return r.recovered && r.recovery <= recoveryTarget }

// providerUnits is how many units a run reserves: -provider-n, else R
// units per second of -provider-duration outside the outage, so that the
// run lasts about the duration at R.
func providerUnits(cfg *config) int {
	if cfg.providerN > 0 {
		return cfg.providerN
	}
	return max(1, int(float64(cfg.providerRate)*(cfg.providerDuration-cfg.outage-cfg.throttle).Seconds()))
}

// clientRate is the effect's rate in the workers: -provider-client-rate,
// else R. 0 leaves the effect without a rate.
func clientRate(cfg *config) int {
	if cfg.providerClientRate >= 0 {
		return cfg.providerClientRate
	}
	return cfg.providerRate
}

// measureProviders runs call_job once per -provider-workers count.
func measureProviders(ctx context.Context, d *database, cfg *config) ([]providerRun, error) {
	var runs []providerRun
	for _, w := range cfg.providerWorkers {
		for _, gate := range cfg.providerGates {
			r, err := measureProviderRun(ctx, d, cfg, w, gate)
			if err != nil {
				return runs, fmt.Errorf("%d workers: %w", w, err)
			}
			runs = append(runs, r)
		}
	}
	return runs, nil
}

// reservingProvider is the parent's provider: the parent only reserves
// (ProcessTx performs nothing), so a call here is a bug, which
// checkNoReservingCalls reports with the keys it was asked to call.
var reservingProvider = benchjobs.CallProviderFunc(func(_ context.Context, key string, _ benchjobs.Call) error {
	reservingCalls.Lock()
	reservingCalls.keys = append(reservingCalls.keys, key)
	reservingCalls.Unlock()
	return idem.Permanent(errors.New("the parent reserves effects; only workers call the provider"))
})

// reservingCalls are the keys reservingProvider was asked to call.
var reservingCalls struct {
	sync.Mutex
	keys []string
}

// checkNoReservingCalls fails a measurement whose parent called the
// provider while it only meant to reserve.
func checkNoReservingCalls() error {
	reservingCalls.Lock()
	defer reservingCalls.Unlock()
	if n := len(reservingCalls.keys); n > 0 {
		return fmt.Errorf("the parent called the provider %d times while reserving (first key %s): ProcessTx must perform nothing", n, reservingCalls.keys[0])
	}
	return nil
}

func callUnit(i int) benchjobs.Call {
	return benchjobs.Call{ID: "c" + strconv.Itoa(i), Amount: int64(100 + i%900)}
}

// measureProviderRun reserves the units in a fresh schema, starts the
// simulator and `workers` worker processes, and waits for the ledger to
// have every effect done or parked.
func measureProviderRun(ctx context.Context, d *database, cfg *config, workers int, gate bool) (providerRun, error) {
	n := providerUnits(cfg)
	run := providerRun{workers: workers, units: n, rate: cfg.providerRate, outage: cfg.outage, throttle: cfg.throttle, gate: gate}
	sp, err := d.fresh(ctx, fmt.Sprintf("providers%d", workers), true)
	if err != nil {
		return run, err
	}
	defer sp.drop()

	// Reserve every unit's effect, in transactions of 10,000 units.
	job, err := benchjobs.NewCallJob(sp.store, benchjobs.CallJobEffects{CallProvider: reservingProvider},
		idem.WithLogger(slog.New(slog.DiscardHandler)), idem.WithOwner("bench-parent"),
		idemtest.WithJobEdit(func(j *idemrt.Job[benchjobs.Call]) { run.maxAtt = int(j.Effects[0].MaxAttempts) })) // read, not changed
	if err != nil {
		return run, err
	}
	const perTx = 10000
	for from := 0; from < n; from += perTx {
		units := make([]benchjobs.Call, 0, min(perTx, n-from))
		for i := from; i < min(from+perTx, n); i++ {
			units = append(units, callUnit(i))
		}
		if err := pgx.BeginFunc(ctx, sp.pool, func(tx pgx.Tx) error {
			_, err := job.ProcessTx(ctx, tx, units...)
			return err
		}); err != nil {
			return run, fmt.Errorf("reserve units %d..%d: %w", from, from+len(units)-1, err)
		}
	}
	if err := checkNoReservingCalls(); err != nil {
		return run, err
	}
	owed, err := sp.count(ctx, "benchjobs_idem_ledger", "job = 'call_job' AND state = 'pending'")
	if err != nil {
		return run, err
	}
	if err := want("reserved effects", owed, n); err != nil {
		return run, err
	}

	sim := newSimulator(float64(cfg.providerRate), providerBurst(cfg), cfg.providerLatency)
	url, stop, err := sim.serve()
	if err != nil {
		return run, err
	}
	defer stop()

	// Every wait below is bounded by the run's deadline: the time the run
	// should take at R, twice over, plus the outage and its retries, plus
	// a minute.
	expect := time.Duration(float64(n) / float64(cfg.providerRate) * float64(time.Second))
	deadline := 2*expect + 2*(cfg.outage+cfg.throttle) + time.Minute
	if cfg.providerDeadline > 0 {
		deadline = cfg.providerDeadline
	}
	ctx, cancel := context.WithTimeout(ctx, deadline+30*time.Second)
	defer cancel()
	fleet, err := startWorkers(ctx, cfg, workers, sp.name, url, deadline, gate)
	if err != nil {
		return run, err
	}
	defer fleet.kill()
	if err := fleet.ready(ctx); err != nil {
		return run, err
	}

	// The clock starts when the workers are told to go (their processes
	// are up and connected: a fleet is long-running) and stops at the
	// first ledger read that finds every effect done or parked.
	start := time.Now()
	sim.setStart(start)
	if cfg.outage > 0 {
		run.outageAt = expect / 2 // the middle of a run that lasts expect + outage
		sim.setOutage(start.Add(run.outageAt), start.Add(run.outageAt+cfg.outage))
	}
	if cfg.throttle > 0 {
		run.outageAt = expect / 2
		sim.setThrottle(start.Add(run.outageAt), start.Add(run.outageAt+cfg.throttle))
	}
	if err := fleet.start(); err != nil {
		return run, err
	}
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	exited := false
	for {
		run.done, err = sp.count(ctx, "benchjobs_idem_ledger", "job = 'call_job' AND state = 'done'")
		if err != nil {
			return run, err
		}
		run.parked, err = sp.count(ctx, "benchjobs_idem_ledger", "job = 'call_job' AND state = '"+idemrt.StoredParked+"'")
		if err != nil {
			return run, err
		}
		if run.done+run.parked == n {
			run.elapsed = time.Since(start)
			break
		}
		if exited {
			return run, fmt.Errorf("every worker exited with %d of %d effects done and %d parked", run.done, n, run.parked)
		}
		select {
		case <-poll.C:
		case err := <-fleet.failed:
			return run, err
		case <-fleet.allExited:
			exited = true // read the ledger once more: the last worker may have just finished
		case <-ctx.Done():
			return run, fmt.Errorf("%d of %d effects done, %d parked after %v: %w", run.done, n, run.parked, time.Since(start).Round(time.Millisecond), ctx.Err())
		}
	}
	if run.passes, run.cpu, err = fleet.wait(ctx); err != nil {
		return run, err
	}
	if err := sp.pool.QueryRow(ctx, "SELECT coalesce(max(attempts), 0) FROM benchjobs_idem_ledger WHERE job = 'call_job'").Scan(&run.attempts); err != nil {
		return run, err
	}

	// What the provider saw: each unit's key applied once, no other key;
	// how soon after the outage it applied calls at 0.9 × R again.
	run.sim = sim.counts()
	if cfg.outage > 0 {
		recoveredAt := start.Add(run.outageAt + cfg.outage)
		run.preRate = sim.rateBetween(start.Add(run.outageAt/2), start.Add(run.outageAt))
		run.recovery, run.recovered = sim.backTo(recoveredAt, providerRateTarget*float64(cfg.providerRate))
		run.recoveryPre, run.recoveredPre = sim.backTo(recoveredAt, providerRateTarget*run.preRate)
	}
	applied := sim.appliedCounts()
	for i := range n {
		key := benchjobs.CallProviderKey(callUnit(i))
		switch c := applied[key]; {
		case c == 1:
			run.onceKeys++
		case c > 1:
			run.wrongKeys++
		}
		delete(applied, key)
	}
	run.wrongKeys += len(applied) // keys of no unit of this run
	return run, nil
}

func providerBurst(cfg *config) int {
	if cfg.providerBurst > 0 {
		return cfg.providerBurst
	}
	return max(2, cfg.providerRate/20)
}

// fleet is the worker processes of one run.
type fleet struct {
	cmds   []*exec.Cmd
	stdins []io.WriteCloser
	lines  []chan string // each worker's stdout, line by line
	failed chan error    // a worker that exited with an error
	// allExited closes when every worker has exited.
	allExited chan struct{}
	running   sync.WaitGroup
	mu        sync.Mutex
	output    []strings.Builder // each worker's output, for errors
	exited    []chan error
}

// startWorkers starts the worker processes: this binary again, with the
// hidden worker flags, as the peak-memory runs start theirs (mem.go).
func startWorkers(ctx context.Context, cfg *config, workers int, schema, url string, deadline time.Duration, gate bool) (*fleet, error) {
	f := &fleet{failed: make(chan error, workers), output: make([]strings.Builder, workers), allExited: make(chan struct{})}
	defer func() { go func() { f.running.Wait(); close(f.allExited) }() }()
	for w := range workers {
		args := []string{"-" + workerFlag, strconv.Itoa(w + 1), "-" + workerSchemaFlag, schema, "-" + workerURLFlag, url,
			"-" + workerLimitFlag, deadline.String(), "-db", cfg.db, "-concurrency", strconv.Itoa(cfg.concurrency),
			"-provider-rate", strconv.Itoa(cfg.providerRate), "-provider-client-rate", strconv.Itoa(clientRate(cfg)),
			"-" + workerGateFlag + "=" + strconv.FormatBool(gate)}
		cmd := exec.CommandContext(ctx, os.Args[0], args...)
		cmd.Env = append(os.Environ(), childEnv+"=1")
		cmd.Stderr = &lockedWriter{mu: &f.mu, b: &f.output[w]}
		in, err := cmd.StdinPipe()
		if err != nil {
			f.kill()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			f.kill()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			f.kill()
			return nil, fmt.Errorf("start worker %d: %w", w+1, err)
		}
		lines, exited := make(chan string, 16), make(chan error, 1)
		f.running.Add(1)
		go func() {
			defer f.running.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
			// Wait only once stdout is read to its end (exec's rule for pipes).
			err := cmd.Wait()
			if err != nil {
				f.mu.Lock()
				err = fmt.Errorf("worker %d: %w\n%s", w+1, err, f.output[w].String())
				f.mu.Unlock()
				f.failed <- err
			}
			exited <- err
		}()
		f.cmds, f.stdins, f.lines, f.exited = append(f.cmds, cmd), append(f.stdins, in), append(f.lines, lines), append(f.exited, exited)
	}
	return f, nil
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// ready waits, at most a minute, for every worker to say it is connected.
func (f *fleet) ready(ctx context.Context) error {
	limit := time.NewTimer(time.Minute)
	defer limit.Stop()
	for w, lines := range f.lines {
		select {
		case line := <-lines:
			if line != "ready" {
				return fmt.Errorf("worker %d said %q, want ready", w+1, line)
			}
		case err := <-f.failed:
			return err
		case <-limit.C:
			return fmt.Errorf("worker %d not ready within a minute", w+1)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// start tells every worker to go.
func (f *fleet) start() error {
	for w, in := range f.stdins {
		if _, err := io.WriteString(in, "go\n"); err != nil {
			return fmt.Errorf("start worker %d: %w", w+1, err)
		}
		in.Close()
	}
	return nil
}

// wait reads each worker's last line (its Drain passes) and waits for it
// to exit, within ctx; it returns the workers' passes and CPU time.
func (f *fleet) wait(ctx context.Context) (passes int, cpu time.Duration, err error) {
	for w := range f.cmds {
		var last string
		for line := range f.lines[w] {
			last = line
		}
		select {
		case err := <-f.exited[w]:
			if err != nil {
				return passes, cpu, err
			}
		case <-ctx.Done():
			return passes, cpu, fmt.Errorf("worker %d did not exit: %w", w+1, ctx.Err())
		}
		var p int
		if _, err := fmt.Sscanf(last, "passes=%d", &p); err != nil {
			return passes, cpu, fmt.Errorf("worker %d ended with %q, want passes=N", w+1, last)
		}
		passes += p
		st := f.cmds[w].ProcessState
		cpu += st.UserTime() + st.SystemTime()
	}
	return passes, cpu, nil
}

// kill ends the workers still running (a run that failed).
func (f *fleet) kill() {
	for _, cmd := range f.cmds {
		if cmd.ProcessState == nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
	}
}

// providerWorker is a worker process: it drains call_job on the parent's
// schema, calling the parent's simulator, until the ledger owes nothing
// (every effect done or parked), within its deadline.
func providerWorker(ctx context.Context, cfg *config, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.workerDeadline)
	defer cancel()
	pool, err := schemaPool(ctx, cfg.db, cfg.workerSchema, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	client := &httpProvider{url: cfg.workerURL, pause: cfg.workerGate, client: &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: cfg.concurrency, IdleConnTimeout: time.Minute}}}
	rate := idemrt.Rate{N: int32(clientRate(cfg)), Per: time.Second}
	job, err := benchjobs.NewCallJob(benchjobs.NewPostgresStore(pool), benchjobs.CallJobEffects{CallProvider: client},
		idem.WithLogger(slog.New(slog.DiscardHandler)), idem.WithOwner(fmt.Sprintf("worker-%d", cfg.worker)),
		idem.WithEffectConcurrency(cfg.concurrency),
		// A batch is five seconds of the fleet's calls at R (at most
		// 1,000): one worker pays a batch's end (its last calls, the next
		// listing and claim) once per 5 s, and a few workers still
		// perform a batch well within half the lease, when a call still
		// waiting for its start under the rate gives its claim back.
		idem.WithBatchSize(min(1000, max(10, 5*cfg.providerRate))),
		idemtest.WithJobEdit(func(j *idemrt.Job[benchjobs.Call]) {
			j.Effects[0].Rate = rate
			if cfg.workerGate {
				j.Effects[0].Circuit = benchCircuit
			}
		}))
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "ready")
	goLine := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err == nil && line != "go\n" {
			err = fmt.Errorf("said %q, want go", line)
		}
		goLine <- err
	}()
	select {
	case err := <-goLine:
		if err != nil {
			return fmt.Errorf("wait for go: %w", err)
		}
	case <-ctx.Done():
		return fmt.Errorf("wait for go: %w", ctx.Err())
	}

	passes := 0
	for {
		rep, err := job.Drain(ctx)
		passes++
		var fe *idem.FailuresError
		if err != nil && !errors.As(err, &fe) {
			return fmt.Errorf("drain pass %d: %w", passes, err)
		}
		if rep.Backlog == nil {
			return fmt.Errorf("drain pass %d: no backlog in the report", passes)
		}
		if rep.Backlog.OwedEffects == 0 {
			break
		}
		// Nothing was due this pass (the rest waits for a retry or
		// belongs to another worker's claims): look again shortly.
		if rep.EffectsDone+rep.EffectsFailed+rep.EffectsWaiting+rep.EffectsParked == 0 {
			if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
				return fmt.Errorf("after drain pass %d, %d owed: %w", passes, rep.Backlog.OwedEffects, err)
			}
		}
	}
	fmt.Fprintf(out, "passes=%d\n", passes)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// schemaPool opens a pool on the PostgreSQL at url whose connections use
// schema, as database.fresh does for the measurement's own.
func schemaPool(ctx context.Context, url, schema string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = maxConns
	return pgxpool.NewWithConfig(ctx, cfg)
}

// httpProvider is the effect's provider in the workers: an HTTP client
// that sends the effect key as Idempotency-Key and maps the answer to
// what idem understands (providerError).
type httpProvider struct {
	url    string
	client *http.Client
	// pause: a Retry-After pauses the whole effect (idem.PauseEffect).
	pause bool
}

func (p *httpProvider) CallProvider(ctx context.Context, key string, u benchjobs.Call) error {
	h, err := postIdempotent(ctx, p.client, p.url, key, u)
	if wait, ok := retryAfter(h); ok && p.pause && errors.Is(err, idem.ErrRetryAfter) {
		return idem.PauseEffect(wait, errors.Unwrap(err))
	}
	return err
}

// postIdempotent posts u as JSON to url with key as its Idempotency-Key
// and maps the answer (providerError); it returns the answer's headers
// (nil when none came).
func postIdempotent(ctx context.Context, client *http.Client, url, key string, u any) (http.Header, error) {
	body, err := json.Marshal(u)
	if err != nil {
		return nil, idem.Permanent(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, idem.Permanent(err)
	}
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, err // the network: a failed attempt, tried again after the backoff with the same key
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	return resp.Header, providerError(resp.StatusCode, resp.Header, msg)
}

// providerError maps an HTTP answer, Stripe-style:
//
//   - 2xx: done;
//   - 429 or 503 with Retry-After (or Retry-After-Ms): the provider's
//     "not now", idem.RetryAfter, which waits that long and burns no attempt;
//   - 409 (Stripe: a request with this key is in flight), other 5xx, and a
//     429 or 503 without Retry-After: a failed attempt, tried again after
//     the effect's backoff, up to max_attempts;
//   - other 4xx: idem.Permanent, parked at once (no retry can fix it).
//
// The simulator's outage answers 503 without Retry-After, as a load
// balancer in front of a provider that is down does: each of those calls
// counts, so the effect's retry and max_attempts must outlast the outage.
func providerError(status int, h http.Header, body []byte) error {
	if status >= 200 && status < 300 {
		return nil
	}
	err := fmt.Errorf("provider answered %d %s: %s", status, http.StatusText(status), strings.TrimSpace(string(body)))
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		if wait, ok := retryAfter(h); ok {
			return idem.RetryAfter(wait, err)
		}
	}
	if status == http.StatusConflict || status >= 500 || status == http.StatusTooManyRequests {
		return err
	}
	return idem.Permanent(err)
}

// retryAfter reads Retry-After-Ms (milliseconds, as some APIs send), else
// Retry-After (seconds, or an HTTP date).
func retryAfter(h http.Header) (time.Duration, bool) {
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

// simulator is the provider: an HTTP server that serves rate calls a
// second (a token bucket holding burst calls), answers 429 with
// Retry-After above that and 503 during its outage, and honours
// Idempotency-Key as Stripe does: the first success applies the call, a
// repeat of an applied key returns the stored answer without applying it
// again, and a repeat while the first is in flight gets 409.
type simulator struct {
	rate, burst float64
	latency     time.Duration // each call that reaches the provider's work takes this long

	mu                          sync.Mutex
	tokens                      float64
	last                        time.Time
	outageFrom, outageUntil     time.Time
	throttleFrom, throttleUntil time.Time
	// start and appliedAt: calls applied per simBucket since start.
	start     time.Time
	appliedAt []int
	inFlight  map[string]bool
	applied   map[string]int // applied calls per idempotency key
	keyCalls  map[string]int // calls per idempotency key, answered or not
	c         simCounts
}

// simCounts are the simulator's answers.
type simCounts struct {
	calls       int // every request
	applied     int // 200, the call applied
	replays     int // 200, an applied key's stored answer
	throttled   int // 429
	unavailable int // 503, the outage
	conflicts   int // 409, the key in flight
	bad         int // 400, no key
}

func newSimulator(rate float64, burst int, latency time.Duration) *simulator {
	return &simulator{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now(), latency: latency,
		inFlight: map[string]bool{}, applied: map[string]int{}, keyCalls: map[string]int{}}
}

// serve listens on a loopback port; stop shuts the server down.
func (s *simulator) serve() (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }() // http.ErrServerClosed, once the returned func closes it
	return "http://" + ln.Addr().String() + "/v1/calls", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// simBucket is the resolution of the simulator's record of applied calls.
const simBucket = 100 * time.Millisecond

func (s *simulator) setStart(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.start = t
}

// setThrottle makes the simulator answer 429 with Retry-After (to the
// window's end) to every call from from until until.
func (s *simulator) setThrottle(from, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.throttleFrom, s.throttleUntil = from, until
}

// rateBetween is the calls applied per second from from until until.
func (s *simulator) rateBetween(from, until time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i := s.bucket(from); i < min(s.bucket(until), len(s.appliedAt)); i++ {
		n += s.appliedAt[i]
	}
	return float64(n) / until.Sub(from).Seconds()
}

// backTo is how long after at the first full second began in which the
// simulator applied at least rate calls (a window sliding by simBucket);
// false when none did before the run's last applied call.
func (s *simulator) backTo(at time.Time, rate float64) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	per := int(time.Second / simBucket)
	first := s.bucket(at)
	if s.start.Add(time.Duration(first) * simBucket).Before(at) {
		first++ // the first bucket that starts at or after at
	}
	for i := first; i+per <= len(s.appliedAt); i++ {
		n := 0
		for _, c := range s.appliedAt[i : i+per] {
			n += c
		}
		if float64(n) >= rate {
			return s.start.Add(time.Duration(i) * simBucket).Sub(at), true
		}
	}
	return 0, false
}

// bucket is the index of t's bucket in appliedAt (s.mu held).
func (s *simulator) bucket(t time.Time) int { return max(0, int(t.Sub(s.start)/simBucket)) }

func (s *simulator) setOutage(from, until time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outageFrom, s.outageUntil = from, until
}

func (s *simulator) counts() simCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.c
}

func (s *simulator) appliedCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.applied))
	for k, v := range s.applied {
		out[k] = v
	}
	return out
}

// callCounts is the calls per idempotency key, answered or not.
func (s *simulator) callCounts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.keyCalls)
}

// take takes a token at now, or says how long until one is there.
func (s *simulator) take(now time.Time) time.Duration {
	s.tokens = min(s.burst, s.tokens+now.Sub(s.last).Seconds()*s.rate)
	s.last = now
	if s.tokens >= 1 {
		s.tokens--
		return 0
	}
	return time.Duration((1 - s.tokens) / s.rate * float64(time.Second))
}

func (s *simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, 1<<16))
	key := r.Header.Get("Idempotency-Key")
	now := time.Now()
	s.mu.Lock()
	s.c.calls++
	s.keyCalls[key]++
	switch {
	case key == "" || r.Method != http.MethodPost:
		s.c.bad++
		s.mu.Unlock()
		http.Error(w, "POST with an Idempotency-Key", http.StatusBadRequest)
		return
	case !now.Before(s.outageFrom) && now.Before(s.outageUntil):
		s.c.unavailable++
		s.mu.Unlock()
		http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
		return
	case !now.Before(s.throttleFrom) && now.Before(s.throttleUntil):
		s.c.throttled++
		wait := s.throttleUntil.Sub(now)
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
		http.Error(w, "the account is throttled after a burst", http.StatusTooManyRequests)
		return
	}
	if wait := s.take(now); wait > 0 {
		s.c.throttled++
		s.mu.Unlock()
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/float64(time.Millisecond))), 10))
		http.Error(w, "rate limited", http.StatusTooManyRequests)
		return
	}
	switch {
	case s.applied[key] > 0:
		s.c.replays++
		s.mu.Unlock()
		w.Header().Set("Idempotent-Replayed", "true")
		fmt.Fprintf(w, "{\"applied\":%q}\n", key)
		return
	case s.inFlight[key]:
		s.c.conflicts++
		s.mu.Unlock()
		http.Error(w, "a request with this Idempotency-Key is in flight", http.StatusConflict)
		return
	}
	s.inFlight[key] = true
	s.mu.Unlock()

	// The provider's work; a client that gives up first leaves it undone.
	err := sleepCtx(r.Context(), s.latency)
	s.mu.Lock()
	delete(s.inFlight, key)
	if err == nil {
		s.applied[key]++
		s.c.applied++
		if !s.start.IsZero() {
			i := s.bucket(time.Now())
			for len(s.appliedAt) <= i {
				s.appliedAt = append(s.appliedAt, 0)
			}
			s.appliedAt[i]++
		}
	}
	s.mu.Unlock()
	if err != nil {
		return
	}
	fmt.Fprintf(w, "{\"applied\":%q}\n", key)
}

// rateTarget is effects/s over R against 0.9; it does not apply to a run
// with an outage or a throttle window, which loses the window's minutes.
func (r providerRun) rateTarget() target {
	return target{label: fmt.Sprintf("providers%d/R", r.workers), value: r.rateRatio(), bound: providerRateTarget, applies: r.outage == 0 && r.throttle == 0}
}

// checked is the run's other figures, each with its verdict.
func (r providerRun) checked() string {
	verdict := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISS"
	}
	throttled := fmt.Sprintf("429s=%d/%d calls=%.2f%%", r.sim.throttled, r.servedCalls(), 100*r.throttledShare())
	if r.sim.unavailable > 0 {
		throttled += " outside the outage"
	}
	switch {
	case r.throttle > 0:
		throttled += fmt.Sprintf(" (a %v window of 429 with Retry-After)", r.throttle)
		if r.gate {
			throttled += fmt.Sprintf(" ≤ %g%% %s", 100*burstThrottleTarget, verdict(r.throttledShare() <= burstThrottleTarget))
		}
	case r.outage == 0:
		throttled += fmt.Sprintf(" ≤ %g%% %s", 100*providerThrottleTarget, verdict(r.throttledShare() <= providerThrottleTarget))
	}
	s := fmt.Sprintf("%s, parked=%d %s, applied once %d/%d (ledger done %d, twice or foreign %d) %s",
		throttled, r.parked, verdict(r.parked == 0), r.onceKeys, r.units, r.done, r.wrongKeys, verdict(r.exactlyOnce()))
	if r.outage > 0 || r.sim.unavailable > 0 {
		s += fmt.Sprintf(", 503s=%d (calls during the outage)", r.sim.unavailable)
		if r.gate && r.outage > 0 {
			s += fmt.Sprintf(" ≤ (outage ÷ cool_down) × %d = %d %s", outageCallsPerCoolDown, r.outageCallsBound(), verdict(r.outageCallsMet()))
		}
	}
	if r.outage > 0 {
		back := func(d time.Duration, ok bool) string {
			if !ok {
				return "never"
			}
			return fmt.Sprintf("%.1f", d.Seconds())
		}
		s += fmt.Sprintf(", seconds from provider recovery to 0.9R: %s", back(r.recovery, r.recovered))
		if r.gate {
			s += fmt.Sprintf(" ≤ %g %s", recoveryTarget.Seconds(), verdict(r.recoveryMet()))
		}
		s += fmt.Sprintf(" (to 0.9 × the %.0f/s before the outage: %s)", r.preRate, back(r.recoveryPre, r.recoveredPre))
	}
	s += fmt.Sprintf(", most attempts on one effect %d of max_attempts %d", r.attempts, r.maxAtt)
	return s + fmt.Sprintf(", replays=%d 409s=%d, %d drain passes", r.sim.replays, r.sim.conflicts, r.passes)
}

// what says what the run was.
func (r providerRun) what(cfg *config) string {
	limit := "no effect rate"
	if c := clientRate(cfg); c > 0 {
		limit = fmt.Sprintf("effect rate %d/s fleet-wide", c)
	}
	s := fmt.Sprintf("call_job (ProcessTx, then Drain) in %d worker process(es) against a simulator of %d calls/s (burst %d, %v a call), %s",
		r.workers, r.rate, providerBurst(cfg), cfg.providerLatency, limit)
	if r.outage > 0 {
		s += fmt.Sprintf(", outage (503) of %v from %v after the start", r.outage, r.outageAt.Round(time.Millisecond))
	}
	if r.throttle > 0 {
		s += fmt.Sprintf(", 429 with Retry-After to every call for %v from %v after the start", r.throttle, r.outageAt.Round(time.Millisecond))
	}
	if r.gate {
		s += fmt.Sprintf(", gate on: circuit {failures: %d, cool_down: %v, max_cool_down: %v}, Retry-After as idem.PauseEffect",
			benchCircuit.Failures, benchCircuit.CoolDown, benchCircuit.MaxCoolDown)
	}
	return s
}
