package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgen/idemgen/example/internal/pgproxy"
	"github.com/idemgen/idemgen/example/soak/soakpay"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// result is what a soak measured and found.
type result struct {
	units, rows, keys, done, owed, parked int
	riverJobs                             map[string]int
	elapsed                               time.Duration
	kills, exits                          int
	crashes                               []recovery
	cuts                                  *pgproxy.Stats // nil without a proxy
	prov                                  tally
	missing, duplicates                   []string // payments receipted 0 or 2+ times
}

func (r result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak: %d units in %s: %.1f units/s\n", r.units, r.elapsed.Round(time.Millisecond), float64(r.units)/r.elapsed.Seconds())
	fmt.Fprintf(&b, "  workers killed (SIGKILL) and restarted: %d; exited on their own and restarted: %d\n", r.kills, r.exits)
	if len(r.crashes) > 0 {
		fmt.Fprintf(&b, "  PostgreSQL crashes (immediate shutdown, crash recovery): %d; after each, accepting again / fleet completing jobs again:", len(r.crashes))
		for _, c := range r.crashes {
			fmt.Fprintf(&b, " %s/%s", c.down.Round(time.Millisecond), c.workingString())
		}
		b.WriteString("\n")
	}
	if r.cuts != nil {
		fmt.Fprintf(&b, "  connections cut at the proxy: %d (%d right after a COMMIT, before its answer), of %d opened\n", r.cuts.Cut, r.cuts.CommitCuts, r.cuts.Accepted)
	}
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
	for i, c := range r.crashes {
		if c.working < 0 && c.open != 0 {
			errs = append(errs, fmt.Errorf("after PostgreSQL crash %d the fleet completed no job within %s", i+1, recoverWithin))
		}
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

// fleet starts, kills and restarts worker processes. A worker that exits
// on its own (its River client stopped, say) is started again too, and
// counted.
type fleet struct {
	mu       sync.Mutex
	exe      string
	args     []string
	env      []string
	procs    map[int]*proc
	log      io.Writer
	kills    int
	exits    int // workers that exited on their own, restarted
	stopping bool
}

type proc struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed once the process has exited
	killed bool          // by the fleet: not to be restarted by its watcher
}

func (f *fleet) start(i int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.startLocked(i)
}

func (f *fleet) startLocked(i int) error {
	cmd := exec.Command(f.exe, append(f.args, "-id", fmt.Sprintf("soak-worker-%d", i))...)
	cmd.Env, cmd.Stdout, cmd.Stderr = f.env, f.log, f.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker %d: %w", i, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	f.procs[i] = p
	go f.watch(i, p)
	return nil
}

// watch waits for p and starts another in its place if it exited on its own.
func (f *fleet) watch(i int, p *proc) {
	err := p.cmd.Wait()
	close(p.done)
	f.mu.Lock()
	restart := !p.killed && !f.stopping && f.procs[i] == p
	if restart {
		f.exits++
	}
	f.mu.Unlock()
	if !restart {
		return
	}
	fmt.Fprintf(f.log, "soak: worker %d exited on its own (%v); starting another\n", i, err)
	time.Sleep(500 * time.Millisecond)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.stopping && !p.killed && f.procs[i] == p {
		if err := f.startLocked(i); err != nil {
			fmt.Fprintf(f.log, "soak: %v\n", err)
		}
	}
}

// kill SIGKILLs worker i and starts a new process in its place.
func (f *fleet) kill(i int) error {
	f.mu.Lock()
	p := f.procs[i]
	p.killed = true
	f.kills++
	f.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("worker %d did not die within 30s of SIGKILL", i)
	}
	return f.start(i)
}

// stop ends every worker cleanly (SIGTERM, then SIGKILL after 15s).
func (f *fleet) stop() {
	f.mu.Lock()
	f.stopping = true
	procs := make([]*proc, 0, len(f.procs))
	for _, p := range f.procs {
		procs = append(procs, p)
	}
	f.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
}

func (f *fleet) counts() (kills, exits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.kills, f.exits
}

// supervise runs one soak: exe is the binary to start workers from (this
// command, or the test binary, which runs a worker when the env says so).
func supervise(ctx context.Context, cfg config, exe string, out io.Writer) (res result, err error) {
	rng := rand.New(rand.NewPCG(uint64(cfg.seed), 0))
	fmt.Fprintf(out, "soak: %d workers, %d units over %s, a SIGKILL every ~%s, seed %d\n", cfg.workers, cfg.units, cfg.duration, cfg.killEvery, cfg.seed)
	dbURL := cfg.postgres
	var cl *cluster
	if cfg.pgCrashEvery > 0 {
		if cl, err = startCluster(ctx); err != nil {
			return res, fmt.Errorf("a PostgreSQL server of the soak's own, to crash: %w", err)
		}
		defer cl.stop()
		dbURL = cl.url()
		fmt.Fprintf(out, "soak: PostgreSQL of its own on %s (%s), crashed (immediate shutdown) every ~%s for %s\n", dbURL, cl.bin, cfg.pgCrashEvery, cfg.pgDown)
	}
	workerURL := dbURL
	var px *pgproxy.Proxy
	if cfg.cutEvery > 0 {
		if px, workerURL, err = startProxy(dbURL, uint64(cfg.seed)); err != nil {
			return res, err
		}
		defer px.Close()
		fmt.Fprintf(out, "soak: workers reach PostgreSQL through a proxy on %s that cuts a connection every ~%s\n", px.Addr(), cfg.cutEvery)
	}
	schema := fmt.Sprintf("idemgen_soak_%d", time.Now().UnixNano())
	pool, err := openPool(ctx, dbURL, "public", "soak-supervisor")
	if err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		pool.Close()
		return res, err
	}
	pool.Close()
	if pool, err = openPool(ctx, dbURL, schema, "soak-supervisor"); err != nil {
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

	args := []string{"-worker", "-postgres", workerURL, "-schema", schema, "-provider", "http://" + ln.Addr().String()}
	if cfg.bug != "" {
		args = append(args, "-bug", cfg.bug)
	}
	fl := &fleet{exe: exe, args: args, env: append(os.Environ(), workerEnv+"=1"), procs: map[int]*proc{}, log: os.Stderr}
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

	// The crasher: PostgreSQL crashed every ~pgCrashEvery while units are
	// fed, with the time the fleet took to recover from each.
	var crashes crasher
	stopCrashes := func() error { return nil }
	if cl != nil {
		stopCrashes = crashes.run(ctx, cl, pool, cfg, out)
	}

	const batch = 20
	batches := (cfg.units + batch - 1) / batch
	interval := cfg.duration / time.Duration(batches)
	nextKill := start.Add(jitter(rng, cfg.killEvery))
	var nextCut time.Time
	if px != nil {
		nextCut = start.Add(jitter(rng, cfg.cutEvery))
	}
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
			_ = stopCrashes()
			return res, err
		}
		for time.Now().Before(start.Add(time.Duration(b+1) * interval)) {
			now := time.Now()
			if !now.Before(nextKill) {
				if err := fl.kill(rng.IntN(cfg.workers)); err != nil {
					_ = stopCrashes()
					return res, err
				}
				nextKill = now.Add(jitter(rng, cfg.killEvery))
			}
			if px != nil && !now.Before(nextCut) {
				// Half the cuts land right after a COMMIT, before its
				// answer; most others on one connection; a few on all.
				switch r := rng.IntN(10); {
				case r < 5:
					px.CutNextCommit()
				case r < 9:
					px.CutRandom()
				default:
					px.CutAll()
				}
				nextCut = now.Add(jitter(rng, cfg.cutEvery))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := stopCrashes(); err != nil {
		return res, err
	}
	kills, _ := fl.counts()
	fmt.Fprintf(out, "soak: fed %d units in %s, %d kills, %d database crashes; waiting for the fleet to finish\n", cfg.units, time.Since(start).Round(time.Millisecond), kills, len(crashes.recoveries))

	// Settle: no more kills, crashes or cuts; the fleet finishes, rescues
	// and drains. A read that fails (the server just restarted) is retried.
	deadline := time.Now().Add(cfg.settle)
	for {
		res, err = check(ctx, pool, prov, cfg.units)
		if err == nil {
			open := 0
			for s, n := range res.riverJobs {
				if s != "completed" && s != "cancelled" && s != "discarded" {
					open += n
				}
			}
			if open == 0 && res.owed == 0 && res.done+res.parked >= res.units {
				break
			}
		}
		if time.Now().After(deadline) {
			if err != nil {
				return res, fmt.Errorf("read the results: %w", err)
			}
			fmt.Fprintf(out, "soak: the fleet did not finish within -settle %s\n", cfg.settle)
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.elapsed = time.Since(start)
	res.kills, res.exits = fl.counts()
	res.crashes = crashes.recoveries
	if px != nil {
		st := px.Stats()
		res.cuts = &st
	}
	return res, nil
}

// startProxy starts a cutting proxy in front of the server dbURL names and
// returns the URL that reaches the server through it.
func startProxy(dbURL string, seed uint64) (*pgproxy.Proxy, string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return nil, "", fmt.Errorf("-postgres: %w", err)
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "5432"
	}
	if host == "" || strings.HasPrefix(host, "/") {
		return nil, "", fmt.Errorf("-cut-every needs a PostgreSQL URL with a TCP host, not %q", dbURL)
	}
	px, err := pgproxy.Start(net.JoinHostPort(host, port), seed)
	if err != nil {
		return nil, "", err
	}
	u.Host = px.Addr()
	q := u.Query()
	q.Set("sslmode", "disable") // the proxy reads the stream to find COMMITs
	u.RawQuery = q.Encode()
	return px, u.String(), nil
}

// recovery is what one crash of PostgreSQL cost.
type recovery struct {
	down    time.Duration // from the crash until the server accepted connections again (crash recovery included)
	working time.Duration // from then until the fleet completed a River job again; -1: not within recoverWithin
	open    int           // River jobs not yet completed when the fleet was not back in time
}

// recoverWithin bounds the wait for the fleet to work again after a restart.
const recoverWithin = time.Minute

// crasher crashes the soak's own server while units are fed.
type crasher struct {
	recoveries []recovery
}

// run starts crashing; the returned stop ends the crashes (a crash under
// way finishes, restart and measure included) and returns the first error.
func (c *crasher) run(ctx context.Context, cl *cluster, pool *pgxpool.Pool, cfg config, out io.Writer) (stop func() error) {
	rng := rand.New(rand.NewPCG(uint64(cfg.seed), 1))
	quit := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for {
			select {
			case <-quit:
				done <- nil
				return
			case <-time.After(jitter(rng, cfg.pgCrashEvery)):
			}
			r, err := crashOnce(ctx, cl, pool, cfg.pgDown)
			if err != nil {
				done <- err
				return
			}
			c.recoveries = append(c.recoveries, r)
			fmt.Fprintf(out, "soak: PostgreSQL crash %d: accepting again after %s, the fleet completing jobs %s later\n",
				len(c.recoveries), r.down.Round(time.Millisecond), r.workingString())
		}
	}()
	return func() error {
		close(quit)
		return <-done
	}
}

// crashOnce crashes the server, starts it again after down, and measures
// how long the fleet takes to complete a River job again.
func crashOnce(ctx context.Context, cl *cluster, pool *pgxpool.Pool, down time.Duration) (recovery, error) {
	var r recovery
	t0 := time.Now()
	if err := cl.crash(ctx); err != nil {
		return r, err
	}
	time.Sleep(down)
	if err := cl.start(ctx); err != nil {
		return r, fmt.Errorf("%w\n%s", err, cl.serverLogTail())
	}
	r.down = time.Since(t0)
	t1 := time.Now()
	base, err := completedJobs(ctx, pool, t1.Add(30*time.Second))
	if err != nil {
		return r, fmt.Errorf("after a restart: %w", err)
	}
	for {
		n, err := completedJobs(ctx, pool, time.Now().Add(5*time.Second))
		if err == nil && n > base {
			r.working = time.Since(t1)
			return r, nil
		}
		if time.Since(t1) > recoverWithin {
			r.working = -1
			// Not back in time: a failure unless there was nothing to do.
			var open int
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state <> 'completed'").Scan(&open); err != nil {
				open = -1
			}
			r.open = open
			return r, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// completedJobs counts the completed River jobs, retrying until deadline.
func completedJobs(ctx context.Context, pool *pgxpool.Pool, deadline time.Time) (int, error) {
	for {
		var n int
		err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE state = 'completed'").Scan(&n)
		if err == nil || time.Now().After(deadline) {
			return n, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r recovery) workingString() string {
	if r.working < 0 {
		return fmt.Sprintf("never within %s (%d jobs open)", recoverWithin, r.open)
	}
	return r.working.Round(time.Millisecond).String()
}

// enqueue inserts units in one transaction of the supervisor's, trying
// again for up to a minute while the server is down or restarting (River
// skips a repeat of a unit whose commit went through unanswered).
func enqueue(ctx context.Context, pool *pgxpool.Pool, client *riverClient, job *soakpay.PaymentJob, units []soakpay.Payment) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := enqueueOnce(ctx, pool, client, job, units)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// enqueueOnce inserts units in one transaction of the supervisor's.
func enqueueOnce(ctx context.Context, pool *pgxpool.Pool, client *riverClient, job *soakpay.PaymentJob, units []soakpay.Payment) error {
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
		(SELECT count(*) FROM soakpay_idem_ledger WHERE state = '`+idemrt.StoredParked+`')`).Scan(&res.rows, &res.keys, &res.done, &res.owed, &res.parked)
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
