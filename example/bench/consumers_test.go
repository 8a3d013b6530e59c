package main

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// consumersRun runs the consumers measurement alone for one broker, small:
// 400 messages in the soak, killed twice, 100 in each throughput run. The
// provider is slow and our consumer calls it two at a time, so that the
// soak's kills land while there is work left.
func consumersRun(t *testing.T, broker string) *results {
	t.Helper()
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the consumers measurement")
	}
	// The announcements go to NATS whatever the broker.
	for _, env := range []string{"IDEMGEN_TEST_NATS", map[string]string{"rabbitmq": "IDEMGEN_TEST_AMQP"}[broker]} {
		if env != "" && os.Getenv(env) == "" {
			t.Skipf("%s is not set; set it to run the consumers measurement on %s", env, broker)
		}
	}
	args := []string{"-db", url, "-only", "consumers", "-no-gen", "-consumer-brokers", broker, "-consumer-n", "400",
		"-consumer-kills", "2", "-consumer-rate-n", "100", "-consumer-latency", "20ms", "-concurrency", "2", "-consumer-deadline", "60s"}
	var out bytes.Buffer
	res, err := run(t.Context(), args, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.consumers == nil || len(res.consumers.lines) != 1 || res.consumers.lines[0].broker != broker {
		t.Fatalf("consumers result %+v; want one line, for %s", res.consumers, broker)
	}
	l := res.consumers.lines[0]
	s := l.soak
	// 400 messages: 360 orders and 40 second copies.
	if s.msgs != 400 || s.orders != 360 || s.kills != 2 || s.children != 3 || !s.owedNothing {
		t.Errorf("soak: %d messages, %d orders, %d kills of %d consumers, owed nothing %v; want 400, 360, 2 kills of 3, true",
			s.msgs, s.orders, s.kills, s.children, s.owedNothing)
	}
	if s.dup() != 0 || s.missing != 0 || s.charges.once != 360 || s.announced.once != 360 ||
		s.rows != 360 || s.done != 720 || s.parked != 0 || s.backlog != 0 {
		t.Errorf("soak: dup %d, missing %d, charged once %d, announced once %d, %d rows, %d effects done, %d parked, backlog %d; want 0, 0, 360, 360, 360, 720, 0, 0",
			s.dup(), s.missing, s.charges.once, s.announced.once, s.rows, s.done, s.parked, s.backlog)
	}
	if s.calls != 360+s.repeats {
		t.Errorf("soak: %d provider calls, %d repeats; want 360 + repeats", s.calls, s.repeats)
	}
	for name, r := range map[string]throughputRun{"ours": l.ours, "hand-written": l.hand, "bare": l.bare} {
		if r.msgs != 100 || r.orders != 90 || r.elapsed <= 0 {
			t.Errorf("%s: %d messages, %d orders in %v; want 100, 90, timed", name, r.msgs, r.orders, r.elapsed)
		}
	}
	line := regexp.MustCompile(`(?m)^consumers/` + broker + ` msgs=400 kills=2 dup=0 missing=0 repeats=\d+ rate=\d+ ratio=\S+ bare=\d+   targets: kills ≥ 2 ok, dup = 0 ok, missing = 0 ok, ratio ≥ 2 (ok|MISS)$`)
	if !line.MatchString(out.String()) {
		t.Errorf("no consumers/%s line of the issue's shape", broker)
	}
	if !regexp.MustCompile(`(?m)^ratios: .* consumers_` + broker + `/handwritten=[0-9.e+-]+$`).MatchString(out.String()) {
		t.Errorf("the ratios line has no consumers_%s/handwritten figure", broker)
	}
	return res
}

func TestConsumersNATS(t *testing.T)     { consumersRun(t, "nats") }
func TestConsumersRabbitMQ(t *testing.T) { consumersRun(t, "rabbitmq") }
func TestConsumersKafka(t *testing.T)    { consumersRun(t, "kafka") }

// On SQLite the measurement is skipped and says so.
func TestConsumersSkippedOnSQLite(t *testing.T) {
	var out bytes.Buffer
	res, err := run(t.Context(), []string{"-only", "consumers", "-no-gen"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.consumers != nil || !res.consumersSkipped || !strings.Contains(out.String(), "consumers: skipped") {
		t.Errorf("consumers on SQLite: result %+v, skipped %v, output:\n%s\nwant skipped, and said", res.consumers, res.consumersSkipped, out.String())
	}
}

// The counters the soak's dup, repeats and missing come from: the
// simulator honours the key (a second call is answered, not applied) and
// counts both calls; a key applied twice, a key of no order and an order
// never seen each count.
func TestConsumersCounters(t *testing.T) {
	sim := newChargeSimulator(0)
	url, stop, err := sim.serve()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	client := chargeClient()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, id := range []string{"a", "a", "b"} { // a twice: a repeat, absorbed by its key
		if _, err := postIdempotent(ctx, client, url, chargeKey(id), benchOrder{OrderID: id}); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"a", "b", "c"}
	if c := tallyKeys(sim.appliedCounts(), ids, chargeKey); c != (keyTally{once: 2, missing: 1}) {
		t.Errorf("charges %+v; want a and b once, c missing", c)
	}
	if repeats, calls := repeatedCalls(sim, ids); repeats != 1 || calls != 3 {
		t.Errorf("%d repeats of %d calls; want 1 of 3", repeats, calls)
	}
	// A provider that did not honour the key, and a stray announcement.
	seen := map[string]int{announceKey("a"): 2, announceKey("b"): 1, announceKey("c"): 1, "stray": 1}
	if a := tallyKeys(seen, ids, announceKey); a != (keyTally{once: 2, dup: 2}) {
		t.Errorf("announcements %+v; want b and c once, 2 beyond once (a's second, the stray)", a)
	}
	if err := (keyTally{once: 2, dup: 2}).checkOnce("announced", 3); err == nil {
		t.Error("checkOnce passed a tally with a double and a stray")
	}
}

// The line's verdicts: each target says MISS when it is missed.
func TestConsumersVerdicts(t *testing.T) {
	met := consumerLine{broker: "nats",
		soak: soakRun{kills: 3, wantKills: 3, owedNothing: true},
		ours: throughputRun{msgs: 100, elapsed: time.Second}, hand: throughputRun{msgs: 100, elapsed: 3 * time.Second}}
	if v := met.verdicts(); strings.Contains(v, "MISS") {
		t.Errorf("all met: %s", v)
	}
	for name, edit := range map[string]func(*consumerLine){
		"kills":   func(l *consumerLine) { l.soak.kills = 2 },
		"dup":     func(l *consumerLine) { l.soak.announced.dup = 1 },
		"missing": func(l *consumerLine) { l.soak.missing = 1 },
		"owed":    func(l *consumerLine) { l.soak.owedNothing = false },
		"ratio":   func(l *consumerLine) { l.hand.elapsed = time.Second },
	} {
		l := met
		edit(&l)
		if v := l.verdicts(); strings.Count(v, "MISS") != 1 {
			t.Errorf("%s missed: %s; want one MISS", name, v)
		}
	}
}
