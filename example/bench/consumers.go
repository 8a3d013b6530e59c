package main

// The -only consumers measurement (issue 51, item 5): order_consumer
// (idemgen.yaml), a handed-in job whose generated ConsumeFrom reads a
// broker through its adapter's idembroker.Source, on PostgreSQL, per
// broker (JetStream, RabbitMQ, and Kafka in franz-go's in-process kfake).
// It writes each order, charges it through a provider and announces it on
// NATS (a publishing effect):
//
//   - a SIGKILL soak: the parent publishes -consumer-n order messages
//     (a tenth of them a second copy of an earlier order, same payload),
//     starts the consumer as a child process, kills it at random moments
//     -consumer-kills times (starting it again each time), then lets it
//     run until it owes nothing: every order written, both effects done
//     in the ledger, the broker's queue drained. The charge provider is a
//     simulator in the parent that honours Idempotency-Key (a repeat of an
//     applied key is answered, not applied again) and counts calls and
//     applications per key, and the parent reads the announcements back
//     as a downstream subscriber: dup is applications beyond one per
//     order (a double charge) plus announcements seen beyond one per
//     order, repeats is calls beyond one per order (the documented window:
//     calls in flight at a kill, which the key absorbs), missing is orders
//     not written, not charged or not announced;
//   - throughput side by side, each run over its own fresh lane and
//     schema, -consumer-rate-n messages: our consumer without kills, the
//     obvious hand-written idempotent consumer (one message at a time: a
//     transaction that inserts into processed_messages ON CONFLICT DO
//     NOTHING and, for a new order, writes it, calls the provider and
//     publishes its announcement; then the ack), and a bare consumer that
//     only acks, for scale.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// consumersRatioTarget: our consumer ≥ 2 × the hand-written one.
const consumersRatioTarget = 2.0

// consumersResult is the measurement: a line per broker.
type consumersResult struct {
	latency     time.Duration // the provider's time per applied call
	concurrency int           // our consumer's effect concurrency
	lines       []consumerLine
}

// consumerLine is one broker's soak and throughput runs.
type consumerLine struct {
	broker string
	soak   soakRun
	ours   throughputRun
	hand   throughputRun
	bare   throughputRun
}

// soakRun is a SIGKILL soak's figures.
type soakRun struct {
	msgs, orders int
	kills        int // SIGKILLs of a consumer that was running
	wantKills    int
	charges      keyTally // what the provider applied
	announced    keyTally // what the downstream subscriber saw
	calls        int      // provider calls, all told
	repeats      int      // provider calls beyond one per order
	missing      int      // orders not written, not charged or not announced
	rows         int      // orders written
	done         int      // effects done in the ledger (two per order)
	parked       int      // units and effects parked
	backlog      int      // messages the broker still held at the end
	elapsed      time.Duration
	owedNothing  bool // false: the deadline came first
	children     int  // consumer processes started
}

// dup is the line's D: double charges and double announcements.
func (s soakRun) dup() int { return s.charges.dup + s.announced.dup }

// throughputRun is one consumer's run over a fresh lane.
type throughputRun struct {
	msgs, orders int
	elapsed      time.Duration // from the consumer's start to the last message settled
}

func (r throughputRun) rate() float64 { return float64(r.msgs) / r.elapsed.Seconds() }

// keyTally is what one counter saw of a run's orders, by their effect
// keys: the provider's applications of charges, or the downstream
// subscriber's announcements by Nats-Msg-Id.
type keyTally struct {
	once    int // orders seen exactly once
	missing int // orders never seen
	dup     int // sightings beyond one per order, and of keys of no order
}

// tallyKeys reads counts (by key) against the orders' keys.
func tallyKeys(counts map[string]int, orderIDs []string, keyOf func(string) string) keyTally {
	counts = maps.Clone(counts)
	var t keyTally
	for _, id := range orderIDs {
		key := keyOf(id)
		switch c := counts[key]; {
		case c == 0:
			t.missing++
		case c == 1:
			t.once++
		default:
			t.dup += c - 1
		}
		delete(counts, key)
	}
	for _, c := range counts {
		t.dup += c
	}
	return t
}

// checkOnce fails unless every order was seen exactly once, and nothing else.
func (t keyTally) checkOnce(what string, orders int) error {
	if t.once != orders || t.dup != 0 {
		return fmt.Errorf("%s: %d of %d orders once, %d missing, %d beyond once or not ours", what, t.once, orders, t.missing, t.dup)
	}
	return nil
}

// repeatedCalls is the provider's calls beyond one per order, and all its
// calls.
func repeatedCalls(sim *simulator, orderIDs []string) (repeats, calls int) {
	counts := sim.callCounts()
	for _, id := range orderIDs {
		repeats += max(0, counts[chargeKey(id)]-1)
	}
	for _, c := range counts {
		calls += c
	}
	return repeats, calls
}

// checkApplied fails a throughput run unless the provider charged, and the
// downstream subscriber saw announced, each order exactly once.
func checkApplied(ctx context.Context, sim *simulator, l *lane, ids []string) error {
	if err := tallyKeys(sim.appliedCounts(), ids, chargeKey).checkOnce("charged", len(ids)); err != nil {
		return err
	}
	seen, err := l.announced(ctx)
	if err != nil {
		return err
	}
	return tallyKeys(seen, ids, announceKey).checkOnce("announced", len(ids))
}

// benchOrder is a message's body as the producer writes it: JSON by the
// unit's field names, as the generated consumer decodes it.
type benchOrder struct {
	OrderID     string `json:"order_id"`
	Customer    string `json:"customer"`
	AmountCents int64  `json:"amount_cents"`
}

// orderMessages is n message bodies: n - n/10 orders, and n/10 second
// copies of earlier ones (same payload), shuffled with a fixed seed so
// that every run and broker sees the same stream; it returns the orders'
// ids too, each named after the run's lane (l.ID), so that two runs'
// announcements never share a key in JetStream's dedupe window.
func orderMessages(n int, laneID string) (bodies [][]byte, ids []string) {
	r := rand.New(rand.NewPCG(51, uint64(n)))
	unique := n - n/10
	for i := range unique {
		o := benchOrder{OrderID: fmt.Sprintf("%s-%05d", laneID, i), Customer: "cus_" + strconv.Itoa(i%97), AmountCents: int64(100 + i%9000)}
		b, _ := json.Marshal(o) // strings and an integer: it cannot fail
		bodies, ids = append(bodies, b), append(ids, o.OrderID)
	}
	for range n / 10 {
		bodies = append(bodies, bodies[r.IntN(unique)])
	}
	r.Shuffle(len(bodies), func(i, j int) { bodies[i], bodies[j] = bodies[j], bodies[i] })
	return bodies, ids
}

// newChargeSimulator is the charge provider: no rate limit, latency a
// call it applies, Idempotency-Key honoured (providers.go's simulator).
func newChargeSimulator(latency time.Duration) *simulator {
	return newSimulator(1e9, 1<<30, latency)
}

func chargeClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute}}
}

// measureConsumers runs the soak and the three throughput runs per broker.
func measureConsumers(ctx context.Context, d *database, cfg *config) (*consumersResult, error) {
	res := &consumersResult{latency: cfg.consumerLatency, concurrency: cfg.concurrency}
	var kafkaSeeds string
	if slices.Contains(cfg.consumerBrokers, "kafka") {
		seeds, stop, err := startKafka()
		if err != nil {
			return nil, err
		}
		defer stop()
		kafkaSeeds = seeds
	}
	for _, b := range cfg.consumerBrokers {
		addr := brokerAddr(b)
		if b == "kafka" {
			addr = kafkaSeeds
		}
		line := consumerLine{broker: b}
		var err error
		steps := []struct {
			name string
			fn   func() error
		}{
			{"soak", func() (err error) { line.soak, err = runSoak(ctx, d, cfg, b, addr); return err }},
			{"ours", func() (err error) { line.ours, err = runOurs(ctx, d, cfg, b, addr); return err }},
			{"handwritten", func() (err error) { line.hand, err = runByHand(ctx, d, cfg, b, addr, false); return err }},
			{"bare", func() (err error) { line.bare, err = runByHand(ctx, d, cfg, b, addr, true); return err }},
		}
		for _, s := range steps {
			if err = s.fn(); err != nil {
				return res, fmt.Errorf("%s %s: %w", b, s.name, err)
			}
		}
		res.lines = append(res.lines, line)
	}
	return res, nil
}

// runByHand times the hand-written idempotent consumer (bare: the one that
// only acks) over a fresh lane of -consumer-rate-n messages.
func runByHand(ctx context.Context, d *database, cfg *config, broker, addr string, bare bool) (throughputRun, error) {
	what := "hand"
	if bare {
		what = "bare"
	}
	var run throughputRun
	l, err := newLane(ctx, broker, addr, brokerAddr("nats"), "consumers_"+what)
	if err != nil {
		return run, err
	}
	defer l.drop()
	bodies, ids := orderMessages(cfg.consumerRateN, l.ID)
	run = throughputRun{msgs: len(bodies), orders: len(ids)}
	if err := l.publish(ctx, bodies); err != nil {
		return run, err
	}
	sp, err := d.fresh(ctx, "consumers_"+what+"_"+broker, false)
	if err != nil {
		return run, err
	}
	defer sp.drop()
	// The hand-written consumer's tables: the orders, as order_consumer
	// writes them, and the processed messages, by order id (the duplicates
	// are separate messages with one order id).
	if err := sp.exec(ctx,
		"CREATE TABLE orders (order_id text PRIMARY KEY, customer text NOT NULL, amount_cents bigint NOT NULL)",
		"CREATE TABLE processed_messages (message_id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return run, err
	}
	sim := newChargeSimulator(cfg.consumerLatency)
	url, stop, err := sim.serve()
	if err != nil {
		return run, err
	}
	defer stop()
	client := chargeClient()
	nc, err := nats.Connect(l.NATS, nats.Timeout(5*time.Second))
	if err != nil {
		return run, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return run, err
	}

	handle := func(ctx context.Context, body []byte) error {
		if bare {
			return nil
		}
		var o benchOrder
		if err := json.Unmarshal(body, &o); err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, sp.pool, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "INSERT INTO processed_messages (message_id) VALUES ($1) ON CONFLICT DO NOTHING", o.OrderID)
			if err != nil || tag.RowsAffected() == 0 {
				return err // seen before: acknowledged without work
			}
			if _, err := tx.Exec(ctx, "INSERT INTO orders (order_id, customer, amount_cents) VALUES ($1, $2, $3)",
				o.OrderID, o.Customer, o.AmountCents); err != nil {
				return err
			}
			// A failed call or publish rolls the transaction back, and the
			// message is not acknowledged.
			if _, err := postIdempotent(ctx, client, url, chargeKey(o.OrderID), o); err != nil {
				return err
			}
			_, err = js.Publish(ctx, l.Announce, body, jetstream.WithMsgID(announceKey(o.OrderID)))
			return err
		})
	}
	var acked atomic.Int64
	runCtx, cancel := context.WithTimeout(ctx, cfg.consumerDeadline)
	defer cancel()
	start := time.Now()
	wait, err := l.consumeByHand(runCtx, handle, func() { acked.Add(1) })
	if err != nil {
		return run, err
	}
	errc := make(chan error, 1)
	go func() { errc <- wait() }()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for int(acked.Load()) < run.msgs {
		select {
		case <-tick.C:
		case err := <-errc:
			return run, fmt.Errorf("the consumer stopped after %d of %d messages: %v", acked.Load(), run.msgs, err)
		case <-runCtx.Done():
			return run, fmt.Errorf("%d of %d messages acknowledged within %v", acked.Load(), run.msgs, cfg.consumerDeadline)
		}
	}
	run.elapsed = time.Since(start)
	cancel()
	if err := <-errc; err != nil {
		return run, err
	}

	// The work was done: every message settled with the broker, and,
	// for the idempotent one, each order written, charged and announced
	// once.
	if err := checkDrained(ctx, l, run.msgs); err != nil {
		return run, err
	}
	if bare {
		return run, nil
	}
	rows, err := sp.count(ctx, "orders", "")
	if err != nil {
		return run, err
	}
	if err := want("orders written", rows, run.orders); err != nil {
		return run, err
	}
	return run, checkApplied(ctx, sim, l, ids)
}

// checkDrained fails unless the lane's broker holds none of its messages
// (a consumer that has stopped: RabbitMQ counts unacknowledged messages
// again once their consumer is gone).
func checkDrained(ctx context.Context, l *lane, published int) error {
	// JetStream settles acks asynchronously, and a Kafka commit or a
	// RabbitMQ requeue may land just after the consumer returns; a quorum
	// queue applies acks through its log, which on a loaded machine ran
	// more than 5 s behind (the bare consumer's 100 acks, go test ./...
	// beside it): look again for up to 15 s.
	var n int
	var err error
	for range 150 {
		if n, err = l.backlog(ctx, published); err != nil || n == 0 {
			return err
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("%s still holds %d of %d messages after the consumer stopped", l.From, n, published)
}

// print writes the measurement's lines: per broker the line with
// its targets' verdicts, then what each figure is.
func (r *consumersResult) print(out io.Writer) {
	fmt.Fprintln(out)
	for _, l := range r.lines {
		s := l.soak
		fmt.Fprintf(out, "consumers/%s msgs=%d kills=%d dup=%d missing=%d repeats=%d rate=%.0f ratio=%s bare=%.0f   %s\n",
			l.broker, s.msgs, s.kills, s.dup(), s.missing, s.repeats, l.ours.rate(),
			formatRatio(l.ratio()), l.bare.rate(), l.verdicts())
	}
	fmt.Fprintln(out)
	for _, l := range r.lines {
		s := l.soak
		ended := "owed nothing after"
		if !s.owedNothing {
			ended = "still owed at its deadline,"
		}
		fmt.Fprintf(out, "  consumers/%s soak: %d messages (%d orders) to %d consumer processes, %d killed; %s %v: %d orders written, %d effects done in the ledger, %d parked, %d messages left on the broker; the provider saw %d calls and charged %d orders once (%d twice or more), the downstream subscriber saw %d orders announced once (%d twice or more)\n",
			l.broker, s.msgs, s.orders, s.children, s.kills, ended, s.elapsed.Round(time.Millisecond), s.rows, s.done, s.parked, s.backlog,
			s.calls, s.charges.once, s.charges.dup, s.announced.once, s.announced.dup)
		fmt.Fprintf(out, "  consumers/%s throughput, %d messages (%d orders) each: ours %.0f/s (%v), hand-written %.0f/s (%v), bare %.0f/s (%v)\n",
			l.broker, l.ours.msgs, l.ours.orders, l.ours.rate(), l.ours.elapsed.Round(time.Millisecond),
			l.hand.rate(), l.hand.elapsed.Round(time.Millisecond), l.bare.rate(), l.bare.elapsed.Round(time.Millisecond))
	}
	fmt.Fprintln(out, "  dup = charges the provider applied beyond one per order, plus announcements a downstream subscriber of the NATS stream saw beyond one per order (by Nats-Msg-Id); repeats = provider calls beyond one per order (calls in flight at a kill, which the Idempotency-Key absorbs); missing = orders not written, not charged or not announced")
	fmt.Fprintf(out, "  rate = our consumer's messages/s without kills; ratio = ours / the hand-written idempotent consumer (per message: a transaction that inserts into processed_messages ON CONFLICT DO NOTHING and, for a new order, writes it, calls the provider and publishes the announcement with Nats-Msg-Id; then the ack); bare = a consumer that only acks. The provider takes %v a call; ours calls it with effect concurrency %d (-concurrency)\n",
		r.latency, r.concurrency)
}

func (l consumerLine) ratio() float64 { return ratio(l.ours.rate(), l.hand.rate()) }

// verdicts is the line's targets: kills, dup and missing from the soak,
// the ratio from the throughput runs.
func (l consumerLine) verdicts() string {
	v := func(ok bool) string {
		if ok {
			return "ok"
		}
		return "MISS"
	}
	s := l.soak
	parts := []string{
		fmt.Sprintf("kills ≥ %d %s", s.wantKills, v(s.kills >= s.wantKills)),
		"dup = 0 " + v(s.dup() == 0),
		"missing = 0 " + v(s.missing == 0 && s.owedNothing),
		fmt.Sprintf("ratio ≥ %g %s", consumersRatioTarget, v(l.ratio() >= consumersRatioTarget)),
	}
	return "targets: " + strings.Join(parts, ", ")
}
