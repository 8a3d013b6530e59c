package main

// Our consumer in the -only consumers measurement (consumers.go): the
// generated order_consumer's ConsumeFrom over each broker's adapter, in
// this process for the throughput run and in child processes (this binary
// again, with a hidden flag) for the SIGKILL soak.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemgen/idemgen/example/bench/benchjobs"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemamqp"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemkafka"
	"github.com/idemgen/idemgen/idem/idemnats"
)

// consumerChildFlag is the hidden flag of a soak's consumer process: its
// value is a consumerChildSpec as JSON.
const consumerChildFlag = "internal-consumer"

// consumerChildSpec is what a consumer process needs from the parent.
type consumerChildSpec struct {
	Lane        lane          `json:"lane"`
	Schema      string        `json:"schema"`
	Provider    string        `json:"provider"` // the charge simulator's URL
	Concurrency int           `json:"concurrency"`
	Deadline    time.Duration `json:"deadline"`
}

// killWithin is when the soak's kills come: at a random moment within this
// long after the consumer's first progress (an order or an effect it
// wrote), so that each kill lands in work, not in a consumer still
// connecting or waiting for its Kafka group's rebalance.
const killWithin = 500 * time.Millisecond

// chargeKey is the charge effect's key of an order: the key the provider
// counts by, for our consumer and the hand-written one alike.
func chargeKey(orderID string) string {
	return benchjobs.ChargeKey(benchjobs.Order{OrderID: orderID})
}

// announceKey is the announce_order effect's key of an order: the
// announcement's Nats-Msg-Id, ours and the hand-written one's alike.
func announceKey(orderID string) string {
	return benchjobs.AnnounceOrderKey(benchjobs.Order{OrderID: orderID})
}

// laneAnnouncer publishes announce_order to the lane's own subject rather
// than the spec's, through idemnats' Publisher (the effect key as
// Nats-Msg-Id), so that runs never share a stream or its dedupe window.
type laneAnnouncer struct {
	pub     *idemnats.Publisher
	subject string
}

func (a laneAnnouncer) Publish(ctx context.Context, _, key string, body []byte) ([]byte, error) {
	return a.pub.Publish(ctx, a.subject, key, body)
}

// newOrderConsumer is order_consumer over store, charging through the
// simulator at url and announcing on js to the lane's subject.
func newOrderConsumer(store *benchjobs.Store, url string, js jetstream.JetStream, l *lane, concurrency int, owner string, log *slog.Logger) (*benchjobs.OrderConsumer, error) {
	client := chargeClient()
	charge := benchjobs.ChargeFunc(func(ctx context.Context, key string, o benchjobs.Order) error {
		_, err := postIdempotent(ctx, client, url, key, o)
		return err
	})
	return benchjobs.NewOrderConsumer(store,
		benchjobs.OrderConsumerEffects{Charge: charge, AnnounceOrder: laneAnnouncer{idemnats.NewPublisher(js), l.Announce}},
		idem.WithLogger(log), idem.WithOwner(owner), idem.WithEffectConcurrency(concurrency))
}

// connectJetStream connects to the NATS at addr.
func connectJetStream(addr string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(addr, nats.Timeout(5*time.Second))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w", addr, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// openSource is the lane's broker adapter's Source for our consumer; done
// closes the connection under it once the consumer has returned.
func openSource(ctx context.Context, l *lane) (src idembroker.Source, done func(), err error) {
	switch l.Broker {
	case "nats":
		nc, js, err := connectJetStream(l.Addr)
		if err != nil {
			return nil, nil, err
		}
		src, err = idemnats.NewSource(ctx, js, idemnats.SourceConfig{Stream: l.Stream, Subject: l.From, Durable: l.Group, AckWait: natsAckWait})
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return src, nc.Close, nil
	case "rabbitmq":
		conn, err := amqp.DialConfig(l.Addr, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
		if err != nil {
			return nil, nil, err
		}
		src, err := idemamqp.NewSource(ctx, conn, idemamqp.SourceConfig{Queue: l.From, ConsumerTag: l.Group})
		if err != nil {
			conn.Close()
			return nil, nil, err
		}
		return src, func() { conn.Close() }, nil
	case "kafka":
		// A static member: a consumer started again after a kill takes
		// the killed one's place and partitions at once. Without it, kfake
		// sometimes kept a killed member, and its partitions, past its
		// session for good (3 soaks of 17), and the soak stalled.
		opts := append(kafkaGroupOpts(), kgo.SeedBrokers(strings.Split(l.Addr, ",")...), kgo.InstanceID("bench-"+l.ID))
		src, err := idemkafka.NewSource(ctx, idemkafka.SourceConfig{Topic: l.From, Group: l.Group}, opts...)
		if err != nil {
			return nil, nil, err
		}
		return src, func() {}, nil
	}
	return nil, nil, fmt.Errorf("no broker %q", l.Broker)
}

// owed is how far a run of our consumer is from owing nothing.
type owed struct {
	rows, done, parked int
	backlog            int // -1: not read (the database is not there yet)
}

func (o owed) nothing(orders int) bool {
	return o.rows == orders && o.done == orders*orderEffects && o.backlog == 0
}

// orderEffects is order_consumer's effects per order: charge and
// announce_order.
const orderEffects = 2

// readOwed reads the orders written, the effects done and the units and
// effects parked (readWritten); once every order and effect is there, the
// broker's backlog too.
func readOwed(ctx context.Context, sp *space, l *lane, msgs, orders int) (owed, error) {
	o, err := readWritten(ctx, sp)
	if err != nil || o.rows != orders || o.done != orders*orderEffects {
		return o, err
	}
	o.backlog, err = l.backlog(ctx, msgs)
	return o, err
}

// readWritten reads what order_consumer wrote: orders, effects done in
// the ledger, units and effects parked; the backlog is left unread (-1).
func readWritten(ctx context.Context, sp *space) (owed, error) {
	o := owed{backlog: -1}
	err := sp.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM orders),
		(SELECT count(*) FROM benchjobs_idem_ledger WHERE job = 'order_consumer' AND state = 'done'),
		(SELECT count(*) FROM benchjobs_idem_ledger WHERE job = 'order_consumer' AND state = 'failed')
		  + (SELECT count(*) FROM benchjobs_idem_parked WHERE job = 'order_consumer')`).Scan(&o.rows, &o.done, &o.parked)
	return o, err
}

// runOurs times order_consumer's ConsumeFrom, in this process and without
// kills, over a fresh lane of -consumer-rate-n messages, until it owes
// nothing.
func runOurs(ctx context.Context, d *database, cfg *config, broker, addr string) (throughputRun, error) {
	var run throughputRun
	l, err := newLane(ctx, broker, addr, brokerAddr("nats"), "consumers_ours")
	if err != nil {
		return run, err
	}
	defer l.drop()
	bodies, ids := orderMessages(cfg.consumerRateN, l.ID)
	run = throughputRun{msgs: len(bodies), orders: len(ids)}
	if err := l.publish(ctx, bodies); err != nil {
		return run, err
	}
	sp, err := d.fresh(ctx, "consumers_ours_"+broker, true)
	if err != nil {
		return run, err
	}
	defer sp.drop()
	sim := newChargeSimulator(cfg.consumerLatency)
	url, stop, err := sim.serve()
	if err != nil {
		return run, err
	}
	defer stop()
	nc, js, err := connectJetStream(l.NATS)
	if err != nil {
		return run, err
	}
	defer nc.Close()
	job, err := newOrderConsumer(sp.store, url, js, l, cfg.concurrency, "bench-ours", slog.New(slog.DiscardHandler))
	if err != nil {
		return run, err
	}

	runCtx, cancel := context.WithTimeout(ctx, cfg.consumerDeadline)
	defer cancel()
	start := time.Now()
	src, closeConn, err := openSource(runCtx, l)
	if err != nil {
		return run, err
	}
	defer closeConn()
	errc := make(chan error, 1)
	go func() { errc <- job.ConsumeFrom(runCtx, src) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var o owed
	for {
		if o, err = readOwed(runCtx, sp, l, run.msgs, run.orders); err != nil && runCtx.Err() == nil {
			return run, err
		}
		if o.nothing(run.orders) {
			break
		}
		select {
		case <-tick.C:
		case err := <-errc:
			return run, fmt.Errorf("the consumer returned (%v) owing: %d of %d orders written, %d charges done, backlog %d", err, o.rows, run.orders, o.done, o.backlog)
		case <-runCtx.Done():
			return run, fmt.Errorf("within %v: %d of %d orders written, %d charges done, backlog %d", cfg.consumerDeadline, o.rows, run.orders, o.done, o.backlog)
		}
	}
	run.elapsed = time.Since(start)
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			return run, fmt.Errorf("the consumer's stop: %w", err)
		}
	case <-time.After(45 * time.Second):
		return run, errors.New("the consumer did not return within 45 s of its context's end")
	}
	closeConn()

	if err := checkDrained(ctx, l, run.msgs); err != nil {
		return run, err
	}
	if o.parked != 0 {
		return run, fmt.Errorf("%d units or effects parked", o.parked)
	}
	return run, checkApplied(ctx, sim, l, ids)
}

// runSoak publishes -consumer-n messages, runs order_consumer in child
// processes killed -consumer-kills times at random moments, then lets the
// last run until it owes nothing (within -consumer-deadline), and counts
// what the provider saw.
func runSoak(ctx context.Context, d *database, cfg *config, broker, addr string) (soakRun, error) {
	run := soakRun{wantKills: cfg.consumerKills, backlog: -1}
	l, err := newLane(ctx, broker, addr, brokerAddr("nats"), "consumers_soak")
	if err != nil {
		return run, err
	}
	defer l.drop()
	bodies, ids := orderMessages(cfg.consumerN, l.ID)
	run.msgs, run.orders = len(bodies), len(ids)
	if err := l.publish(ctx, bodies); err != nil {
		return run, err
	}
	sp, err := d.fresh(ctx, "consumers_soak_"+broker, true)
	if err != nil {
		return run, err
	}
	defer sp.drop()
	sim := newChargeSimulator(cfg.consumerLatency)
	url, stop, err := sim.serve()
	if err != nil {
		return run, err
	}
	defer stop()
	spec := consumerChildSpec{Lane: *l, Schema: sp.name, Provider: url, Concurrency: cfg.concurrency, Deadline: cfg.consumerDeadline + time.Minute}

	ctx, cancel := context.WithTimeout(ctx, cfg.consumerDeadline)
	defer cancel()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	start := time.Now()
	var o owed
	for run.kills < cfg.consumerKills {
		c, err := startConsumer(ctx, cfg, spec)
		if err != nil {
			return run, err
		}
		run.children++
		if err := awaitProgress(ctx, sp, c, run.orders); err != nil {
			_ = c.kill() // the error at hand says more
			return run, fmt.Errorf("consumer %d: %w", run.children, err)
		}
		select {
		case <-time.After(time.Duration(r.Int64N(int64(killWithin)))):
		case err := <-c.exited:
			return run, fmt.Errorf("consumer %d exited before its kill: %v\n%s", run.children, err, c.stderr())
		case <-ctx.Done():
			_ = c.kill() // the error at hand says more
			return run, fmt.Errorf("consumer %d: %w", run.children, ctx.Err())
		}
		if o, err = readOwed(ctx, sp, l, run.msgs, run.orders); err != nil {
			_ = c.kill() // the error at hand says more
			return run, err
		}
		if o.nothing(run.orders) {
			// Nothing left to kill it in: the line says kills < wanted.
			if err := c.stop(); err != nil {
				return run, err
			}
			break
		}
		if err := c.kill(); err != nil {
			return run, err
		}
		run.kills++
	}

	if !o.nothing(run.orders) {
		c, err := startConsumer(ctx, cfg, spec)
		if err != nil {
			return run, err
		}
		run.children++
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
	wait:
		for {
			if o, err = readOwed(ctx, sp, l, run.msgs, run.orders); err != nil && ctx.Err() == nil {
				_ = c.kill() // the error at hand says more
				return run, err
			}
			if o.nothing(run.orders) {
				break
			}
			select {
			case <-tick.C:
			case err := <-c.exited:
				return run, fmt.Errorf("the last consumer exited owing (%v)\n%s", err, c.stderr())
			case <-ctx.Done():
				break wait // the line reports what is missing
			}
		}
		if ctx.Err() != nil {
			_ = c.kill() // the deadline: the line reports what is owed
			fmt.Fprintf(os.Stderr, "bench: consumers/%s soak: still owed at its deadline; the last consumer's log:\n%s\n", broker, c.stderr())
		} else if err := c.stop(); err != nil {
			return run, err
		}
	}
	run.owedNothing = o.nothing(run.orders)
	run.elapsed = time.Since(start)

	// The figures, read after every consumer has stopped.
	final := context.WithoutCancel(ctx)
	if o, err = readWritten(final, sp); err != nil {
		return run, err
	}
	run.rows, run.done, run.parked = o.rows, o.done, o.parked
	if run.backlog, err = l.backlog(final, run.msgs); err != nil {
		return run, err
	}
	if run.owedNothing {
		if err := checkDrained(final, l, run.msgs); err != nil {
			return run, err
		}
		run.backlog = 0
	}
	charged := sim.appliedCounts()
	seen, err := l.announced(final)
	if err != nil {
		return run, err
	}
	run.charges, run.announced = tallyKeys(charged, ids, chargeKey), tallyKeys(seen, ids, announceKey)
	run.repeats, run.calls = repeatedCalls(sim, ids)
	written, err := orderIDs(final, sp)
	if err != nil {
		return run, err
	}
	for _, id := range ids {
		if !written[id] || charged[chargeKey(id)] == 0 || seen[announceKey(id)] == 0 {
			run.missing++
		}
	}
	return run, nil
}

// orderIDs is the orders order_consumer wrote.
func orderIDs(ctx context.Context, sp *space) (map[string]bool, error) {
	rows, err := sp.pool.Query(ctx, "SELECT order_id FROM orders")
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(ids))
	for _, id := range ids {
		out[id] = true
	}
	return out, nil
}

// awaitProgress waits until consumer c has written an order or finished
// an effect since it started, or nothing is left to write.
func awaitProgress(ctx context.Context, sp *space, c *consumerProc, orders int) error {
	base, err := readWritten(ctx, sp)
	if err != nil {
		return err
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		o, err := readWritten(ctx, sp)
		if err != nil {
			return err
		}
		if o.rows+o.done > base.rows+base.done || (o.rows == orders && o.done == orders*orderEffects) {
			return nil
		}
		select {
		case <-tick.C:
		case err := <-c.exited:
			return fmt.Errorf("exited before it wrote anything: %v\n%s", err, c.stderr())
		case <-ctx.Done():
			return fmt.Errorf("no progress: %w", ctx.Err())
		}
	}
}

// consumerProc is one consumer child process of a soak.
type consumerProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	exited chan error // its exit, once
	mu     sync.Mutex
	errOut strings.Builder
	last   chan string // its stdout's last line, once it ended
}

func (c *consumerProc) stderr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.errOut.String()
}

// startConsumer starts a consumer process and waits, at most 30 s, for it
// to say it is consuming.
func startConsumer(ctx context.Context, cfg *config, spec consumerChildSpec) (*consumerProc, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, os.Args[0], "-"+consumerChildFlag, string(js), "-db", cfg.db)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	c := &consumerProc{cmd: cmd, exited: make(chan error, 1), last: make(chan string, 1)}
	cmd.Stderr = &lockedWriter{mu: &c.mu, b: &c.errOut}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a consumer: %w", err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		last := ""
		for sc.Scan() {
			if last = sc.Text(); last == "ready" {
				close(ready)
			}
		}
		c.last <- last
		c.exited <- cmd.Wait() // once stdout is read to its end (exec's rule for pipes)
	}()
	select {
	case <-ready:
		return c, nil
	case err := <-c.exited:
		return nil, fmt.Errorf("a consumer exited before it was ready: %v\n%s", err, c.stderr())
	case <-time.After(30 * time.Second):
		_ = c.kill() // the error at hand says more
		return nil, fmt.Errorf("a consumer was not ready within 30 s\n%s", c.stderr())
	}
}

// kill SIGKILLs the consumer and waits, at most 10 s, for it to be gone.
func (c *consumerProc) kill() error {
	if err := c.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill a consumer: %w", err)
	}
	select {
	case err := <-c.exited:
		_ = err // "signal: killed", as it should
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("a killed consumer was still there after 10 s")
	}
}

// stop tells the consumer to stop (its stdin closes) and waits, at most
// 45 s, for it to settle what it fetched and exit saying "stopped".
func (c *consumerProc) stop() error {
	c.stdin.Close()
	select {
	case err := <-c.exited:
		if last := <-c.last; err != nil || last != "stopped" {
			return fmt.Errorf("a consumer's stop: %v, last line %q\n%s", err, last, c.stderr())
		}
		return nil
	case <-time.After(45 * time.Second):
		_ = c.kill() // the error at hand says more
		return fmt.Errorf("a consumer did not stop within 45 s\n%s", c.stderr())
	}
}

// consumerChild is a soak's consumer process: order_consumer's ConsumeFrom
// over the lane's adapter until its stdin closes (then it settles what it
// fetched, says "stopped" and exits) or it is killed.
func consumerChild(ctx context.Context, cfg *config, out io.Writer) error {
	var spec consumerChildSpec
	if err := json.Unmarshal([]byte(cfg.consumerChild), &spec); err != nil {
		return fmt.Errorf("-%s: %w", consumerChildFlag, err)
	}
	ctx, cancel := context.WithTimeout(ctx, spec.Deadline)
	defer cancel()
	pool, err := schemaPool(ctx, cfg.db, spec.Schema, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	nc, js, err := connectJetStream(spec.Lane.NATS)
	if err != nil {
		return err
	}
	defer nc.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	job, err := newOrderConsumer(benchjobs.NewPostgresStore(pool), spec.Provider, js, &spec.Lane, spec.Concurrency, fmt.Sprintf("consumer-%d", os.Getpid()), log)
	if err != nil {
		return err
	}
	src, closeConn, err := openSource(ctx, &spec.Lane)
	if err != nil {
		return err
	}
	defer closeConn()
	fmt.Fprintln(out, "ready")
	consuming, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin) // the parent closes it to stop us
		stop()
	}()
	if err := job.ConsumeFrom(consuming, src); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("the consumer's deadline of %v passed", spec.Deadline)
	}
	fmt.Fprintln(out, "stopped")
	return nil
}
