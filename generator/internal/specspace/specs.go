// Package specspace checks the generator over the space of valid specs,
// not only the example's and the goldens' jobs: it draws specs that
// combine the spec's dimensions, requires each to pass vet without a
// finding, generate, build and pass its own generated crash simulation
// (the -short sample) on SQLite and PostgreSQL, and shrinks a spec that
// fails to the smallest one that still fails. docs/specspace.md says how
// to run it and what it covers.
package specspace

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/idemgen/idemgen/generator/internal/spec"
)

// A specCase is one drawn spec: one job and its options, as values the
// shrinker can take away one at a time. Its YAML is rendered by yaml.
type specCase struct {
	seed     uint64 // the draw's seed, printed with every failure
	index    int
	dialects []string // postgres, sqlite, or both
	source   string   // none, watermark, cursor
	stage    bool
	dest     bool
	adopt    bool   // the destination's table is the service's (adopt: true)
	write    string // upsert, insert_once
	// newerWins names the field that orders versions (upsert only).
	newerWins string
	keyShape  string // single, composite, hashed, unicode
	keys      []field
	data      []field
	unitMax   int // unit max_attempts; 0: not set
	effects   []effect
	// consume is the broker a handed-in job consumes from ("": none), and
	// headers the unit fields it reads from message headers.
	consume string
	headers []string
}

type field struct {
	name, typ string
	nullable  bool
}

type effect struct {
	name        string
	when        string // always, inserted, changed
	keepResult  bool
	maxAttempts int // 0: not set
	version     int
	jobVersion  bool // the key holds {job_version}
	retry       bool
	lease       string // "": the default (5m)
	timeout     string // "": none
	rate        string
	concurrency int
	retention   string // "": none
	circuit     string // "": none; else the circuit's flow map
	publish     string // the broker the effect publishes to; "": none
}

// The default run: defaultN specs cover every value of every dimension
// (the longest has six) in a couple of minutes on two cores.
const (
	defaultN    = 8
	defaultSeed = 38
)

// The values each dimension takes. A dimension with n values meets every
// one of them in any n consecutive specs (see draw).
var (
	dimDialects = [][]string{{"postgres", "sqlite"}, {"sqlite"}, {"postgres"}, {"postgres", "sqlite"}}
	dimSource   = []string{"none", "watermark", "cursor", "watermark+stage", "cursor+stage", "none+stage"}
	dimWrite    = []string{"upsert", "insert_once", "newer_wins", "nodest"}
	dimKey      = []string{"single", "composite", "hashed", "unicode"}
	dimEffects  = []int{0, 1, 2, 3}
	dimMax      = []int{0, 1, 2, 3, 4, 5}
	dimWhen     = []string{"always", "inserted", "changed"}
	keyTypes    = []string{"string", "int64", "int32", "uuid"}
	dataTypes   = []string{"string", "int32", "int64", "float64", "bool", "time", "bytes", "json", "uuid"}
	orderTypes  = []string{"time", "int64", "int32", "float64", "string"}
	dimAdopt    = []bool{false, true}
	// circuits are drawn from a generator of their own (circuitOf), so
	// that adding them changed no other draw of a seed.
	circuits = []string{"", "", "{failures: 1, cool_down: 1s}", "{failures: 3, cool_down: 30s}",
		"{failures: 5, cool_down: 2s, max_cool_down: 3s}", "{failures: 1, cool_down: 1s, max_cool_down: 24h}", "{failures: 10, cool_down: 24h}"}
)

// The values of an effect's options that span a range: each walks over
// the run's effects (effectOrdinal) from an offset of its own, so any run
// of as many consecutive effects as a dimension has values meets them
// all, whichever specs the effects are in.
var (
	// dimRetention spans from below a scenario's clock span (a scenario
	// moves its clock by hours: leases, backoffs, retries) to years; a
	// retention below the effect's lease is raised to it (fix).
	dimRetention = []string{"", "1s", "5m", "1h", "24h", "720h", "87600h"}
	// dimBounds are the lease and timeout: none, the minimums (a lease of
	// a second, a timeout under it), a timeout alone under the default
	// lease, a lease alone, a common pair and a long pair.
	dimBounds = [][2]string{{"", ""}, {"1s", "500ms"}, {"", "1s"}, {"1s", ""}, {"2m", "30s"}, {"720h", "1h"}}
	// dimRate is a rate in /s, /m and /h with small and large N.
	dimRate = []string{"", "1/s", "1000/s", "1/m", "600/m", "2/h", "3600/h", "2147483647/h"}
	// dimConcurrency draws concurrency 1 most often of all values, so it
	// meets every family.
	dimConcurrency = []int{0, 1, 3, 1, 8}
)

// effectOrdinal is how many effects the run's specs before index draw
// (effectsAt walks the effects dimension): the position of index's first
// effect in the run's walk of the effects' options.
func effectOrdinal(index int, effectsAt func(index int) int) int {
	n := 0
	for j := range index {
		n += dimEffects[effectsAt(j)]
	}
	return n
}

// walk is the value a dimension of n values takes at spec index: the
// specs of each block of n (0 to n-1, n to 2n-1, ...) meet every value
// once, from the run's offset, shifted in each later block by an amount
// of the block's own (blockShift). Without the shift two
// dimensions with as many values walked in step and paired the same
// values in every spec of a run: seed 38 never drew a handed-in
// newer_wins job with effects (write and effects, four values each).
func walk(seed uint64, dim, n, offset, index int) int {
	return (index + offset + blockShift(seed, dim, index/n, n)) % n
}

// blockShift is dimension dim's shift in block, drawn from a generator of
// its own: the run's generator draws what it drew before the shift came,
// and a block that begins inside the default run is not shifted, so that
// run (defaultN specs) is the one measured before.
func blockShift(seed uint64, dim, block, n int) int {
	if block*n < defaultN {
		return 0
	}
	return rand.New(rand.NewPCG(seed^0xb10c, uint64(dim)<<32|uint64(block))).IntN(n)
}

// draw returns spec index of the run seeded with seed. Each dimension
// walks its values (walk), so each block of specs covers every value of
// every dimension, in combinations that differ from block to block and
// from run to run; the rest (field types, options) comes from the spec's
// own generator. The same (seed, index) always gives the same spec.
func draw(seed uint64, index int) specCase {
	run := rand.New(rand.NewPCG(seed, 0))
	dims := 0
	at := func(n int) int {
		dims++
		return walk(seed, dims, n, run.IntN(n), index)
	}
	r := rand.New(rand.NewPCG(seed, uint64(index)+1))
	c := specCase{seed: seed, index: index}
	c.dialects = dimDialects[at(len(dimDialects))]
	src := dimSource[at(len(dimSource))]
	c.source, c.stage = strings.CutSuffix(src, "+stage")
	c.write = dimWrite[at(len(dimWrite))]
	c.keyShape = dimKey[at(len(dimKey))]
	effectsOffset := run.IntN(len(dimEffects))
	effectsAt := func(j int) int { return walk(seed, 0, len(dimEffects), effectsOffset, j) }
	nEffects := dimEffects[effectsAt(index)]
	c.unitMax = dimMax[at(len(dimMax))]
	effectMax := dimMax[at(len(dimMax))]
	when := at(len(dimWhen))
	c.adopt = dimAdopt[at(len(dimAdopt))]
	// The effects' options walk over the run's effects.
	ord := effectOrdinal(index, effectsAt)
	walk := func(n int) func(i int) int {
		off := run.IntN(n)
		return func(i int) int { return (ord + i + off) % n }
	}
	retentionAt, boundsAt, rateAt, concurrencyAt := walk(len(dimRetention)), walk(len(dimBounds)), walk(len(dimRate)), walk(len(dimConcurrency))

	// Key fields: one, or two for a composite or hashed key.
	nKeys := 1
	if c.keyShape != "single" {
		nKeys = 2
	}
	for i := range nKeys {
		c.keys = append(c.keys, field{name: fmt.Sprintf("k%d", i+1), typ: keyTypes[r.IntN(len(keyTypes))]})
	}
	// Data fields: zero to three of any type, some nullable, and the
	// watermark's time field or the newer_wins field when there is one.
	for i := range r.IntN(4) {
		c.data = append(c.data, field{name: fmt.Sprintf("d%d", i+1), typ: dataTypes[r.IntN(len(dataTypes))], nullable: r.IntN(3) == 0})
	}
	if c.source == "watermark" {
		c.data = append(c.data, field{name: "at", typ: "time"})
	}
	c.dest = c.write != "nodest"
	switch {
	case c.write == "nodest":
		c.write, c.stage = "", false // stage needs a destination
	case c.write == "newer_wins":
		c.write = "upsert"
		if c.source == "watermark" && r.IntN(2) == 0 {
			c.newerWins = "at"
		} else {
			c.newerWins = "rev"
			c.data = append(c.data, field{name: "rev", typ: orderTypes[r.IntN(len(orderTypes))]})
		}
	}
	for i := range nEffects {
		e := effect{
			name:        fmt.Sprintf("fx%d", i+1),
			when:        dimWhen[(when+i)%len(dimWhen)],
			keepResult:  r.IntN(2) == 0,
			maxAttempts: effectMax,
			version:     1 + r.IntN(2),
			jobVersion:  r.IntN(4) == 0,
			retry:       r.IntN(3) == 0,
			lease:       dimBounds[boundsAt(i)][0],
			timeout:     dimBounds[boundsAt(i)][1],
			rate:        dimRate[rateAt(i)],
			concurrency: dimConcurrency[concurrencyAt(i)],
			retention:   dimRetention[retentionAt(i)],
		}
		if i > 0 {
			e.maxAttempts = dimMax[r.IntN(len(dimMax))]
		}
		e.circuit = circuitOf(seed, index, i)
		c.effects = append(c.effects, e)
	}
	brokersOf(&c)
	c.fix()
	return c
}

// brokers are what consume and publish draw from; "" is none.
var brokers = []string{"", "nats", "rabbitmq", "kafka"}

// headerTypes are the field types a consumer may read from a header.
var headerTypes = []string{"string", "int32", "int64", "float64", "bool", "time", "uuid"}

// brokersOf draws a handed-in job's consumer, the fields it reads from
// headers and the effects that publish, from a generator of its own, so
// that adding them changed no other draw of a seed.
func brokersOf(c *specCase) {
	r := rand.New(rand.NewPCG(c.seed^0xb40c, uint64(c.index)))
	consume := brokers[r.IntN(len(brokers))]
	if c.source == "none" {
		c.consume = consume
	}
	for _, f := range slices.Concat(c.keys, c.data) {
		if r.IntN(3) == 0 && c.consume != "" && slices.Contains(headerTypes, f.typ) {
			c.headers = append(c.headers, f.name)
		}
	}
	for i := range c.effects {
		if r.IntN(4) == 0 {
			c.effects[i].publish = brokers[1+r.IntN(len(brokers)-1)]
		}
	}
}

// circuitOf draws the circuit of the index-th spec's i-th effect.
func circuitOf(seed uint64, index, i int) string {
	r := rand.New(rand.NewPCG(seed^0xc1c0, uint64(index)<<8|uint64(i)))
	return circuits[r.IntN(len(circuits))]
}

// fix turns a combination vet would warn about into the nearest valid one,
// so every drawn (and every shrunk) spec is one vet accepts silently.
func (c *specCase) fix() {
	for i := range c.effects {
		e := &c.effects[i]
		switch {
		case !c.dest:
			e.when = "always" // inserted and changed need a destination
		case c.write == "insert_once" && e.when == "changed":
			e.when = "inserted" // vet: changed can only mean inserted
		}
	}
	if c.write == "insert_once" {
		c.newerWins = "" // vet: newer_wins does nothing with insert_once
	}
	if !c.dest {
		c.stage, c.newerWins, c.adopt = false, "", false
	}
	if c.newerWins == "" {
		c.data = slices.DeleteFunc(c.data, func(f field) bool { return f.name == "rev" })
	}
	if c.source != "none" {
		c.consume = "" // vet: only a handed-in job consumes
	}
	// A header names a field that is still there, of a type a header carries.
	fields := slices.Concat(c.keys, c.data)
	c.headers = slices.DeleteFunc(slices.Clone(c.headers), func(name string) bool {
		i := slices.IndexFunc(fields, func(f field) bool { return f.name == name })
		return c.consume == "" || i < 0 || !slices.Contains(headerTypes, fields[i].typ)
	})
	for i := range c.effects {
		e := &c.effects[i]
		if e.publish != "" {
			e.keepResult = true // the broker's ack is the kept result
		}
		// vet: a timeout not shorter than the lease is refused (it goes),
		// a retention shorter than the lease is warned about (it is
		// raised to the lease).
		// vet: RabbitMQ's consumer_timeout (30m) must outlast a lease and
		// a timeout: a long lease goes (the default one does), then a
		// timeout that still does not fit.
		for _, drop := range []*string{&e.lease, &e.timeout} {
			if c.consume == "rabbitmq" && e.leaseValue()+e.timeoutValue() > spec.RabbitMQConsumerTimeout {
				*drop = ""
			}
		}
		lease := e.leaseValue()
		if e.timeout != "" && duration(e.timeout) >= lease {
			e.timeout = ""
		}
		if e.retention != "" && duration(e.retention) < lease {
			e.retention = cmp.Or(e.lease, "5m")
		}
	}
}

// leaseValue is the effect's lease: its own, or the default 5m.
func (e effect) leaseValue() time.Duration {
	if e.lease == "" {
		return spec.DefaultLease
	}
	return duration(e.lease)
}

// timeoutValue is the effect's timeout (0: none).
func (e effect) timeoutValue() time.Duration {
	if e.timeout == "" {
		return 0
	}
	return duration(e.timeout)
}

// duration parses one of the draw's own durations.
func duration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic("specspace: a drawn duration does not parse: " + s)
	}
	return d
}

// pkg is the spec's Go package (and directory) in the check's module.
func (c specCase) pkg() string { return fmt.Sprintf("s%03d", c.index) }

// yaml renders the spec: the contract's keys only, as a user writes them.
func (c specCase) yaml() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	w("# spec-space seed %d, spec %d", c.seed, c.index)
	w("version: 1")
	w("package: %s", c.pkg())
	w("out: .")
	w("dialects: [%s]", strings.Join(c.dialects, ", "))
	w("jobs:")
	w("  - name: space_job")
	w("    unit:")
	w("      type: SpaceUnit")
	w("      fields:")
	for _, f := range slices.Concat(c.keys, c.data) {
		q := ""
		if f.nullable {
			q = "?"
		}
		w("        - %s: %s%s", f.name, f.typ, q)
	}
	w("      key: %q", c.unitKey())
	if c.unitMax > 0 {
		w("      max_attempts: %d", c.unitMax)
	}
	w("    source:")
	switch c.source {
	case "watermark":
		w("      watermark: {field: at, overlap: 10m}")
	default:
		w("      %s: {}", c.source)
	}
	if c.consume != "" {
		var hs []string
		for _, h := range c.headers {
			hs = append(hs, h+": X-"+h)
		}
		headers := ""
		if len(hs) > 0 {
			headers = ", headers: {" + strings.Join(hs, ", ") + "}"
		}
		w("    consume: {broker: %s, from: space.units, group: space%s}", c.consume, headers)
	}
	if c.dest {
		w("    destination:")
		w("      table: space_rows")
		w("      write: %s", c.write)
		if c.newerWins != "" {
			w("      newer_wins: %s", c.newerWins)
		}
		if c.stage {
			w("      stage: true")
		}
		if c.adopt {
			w("      adopt: true")
		}
	}
	if len(c.effects) > 0 {
		w("    effects:")
	}
	for _, e := range c.effects {
		w("      - name: %s", e.name)
		w("        key: %q", c.effectKey(e))
		w("        version: %d", e.version)
		w("        when: %s", e.when)
		if e.keepResult {
			w("        keep_result: true")
		}
		if e.maxAttempts > 0 {
			w("        max_attempts: %d", e.maxAttempts)
		}
		if e.retry {
			w("        retry: {initial: 2s, max: 1m}")
		}
		if e.lease != "" {
			w("        lease: %s", e.lease)
		}
		if e.timeout != "" {
			w("        timeout: %s", e.timeout)
		}
		if e.rate != "" {
			w("        rate: %s", e.rate)
		}
		if e.concurrency > 0 {
			w("        concurrency: %d", e.concurrency)
		}
		if e.retention != "" {
			w("        retention: %s", e.retention)
		}
		if e.circuit != "" {
			w("        circuit: %s", e.circuit)
		}
		if e.publish != "" {
			w("        publish: {broker: %s, to: space.%s}", e.publish, e.name)
		}
	}
	return b.String()
}

// identity is the key's placeholders: the unit's identity, which every
// effect key carries too.
func (c specCase) identity() string {
	var names []string
	for _, f := range c.keys {
		names = append(names, f.name)
	}
	switch c.keyShape {
	case "hashed":
		return "{sha256(" + strings.Join(names, ",") + ")}"
	case "unicode":
		return "{" + strings.Join(names, "}·{") + "}"
	}
	return "{" + strings.Join(names, "}:{") + "}"
}

func (c specCase) unitKey() string {
	if c.keyShape == "unicode" {
		return "ünïcødé✓:" + c.identity()
	}
	return "space:" + c.identity()
}

func (c specCase) effectKey(e effect) string {
	k := e.name + ":v{version}:"
	if e.jobVersion {
		k += "j{job_version}:"
	}
	return k + c.identity()
}

// summary is one line naming the spec's dimensions, for logs.
func (c specCase) summary() string {
	src := c.source
	if c.stage {
		src += "+stage"
	}
	if c.consume != "" {
		src += fmt.Sprintf(" consumed from %s (%d headers)", c.consume, len(c.headers))
	}
	write := c.write
	if !c.dest {
		write = "no destination"
	} else if c.newerWins != "" {
		write += ", newer_wins " + c.newerWins
	}
	if c.adopt {
		write += ", adopt"
	}
	var fx []string
	for _, e := range c.effects {
		s := e.when
		if e.keepResult {
			s += " keep_result"
		}
		if e.maxAttempts > 0 {
			s += fmt.Sprintf(" max_attempts %d", e.maxAttempts)
		}
		for _, o := range [][2]string{{"lease", e.lease}, {"timeout", e.timeout}, {"rate", e.rate}, {"retention", e.retention}} {
			if o[1] != "" {
				s += " " + o[0] + " " + o[1]
			}
		}
		if e.concurrency > 0 {
			s += fmt.Sprintf(" concurrency %d", e.concurrency)
		}
		if e.circuit != "" {
			s += " circuit"
		}
		if e.publish != "" {
			s += " publish " + e.publish
		}
		fx = append(fx, s)
	}
	return fmt.Sprintf("%s: %s, %s, key %s, unit max_attempts %d, dialects %s, effects [%s]",
		c.pkg(), src, write, c.keyShape, c.unitMax, strings.Join(c.dialects, "+"), strings.Join(fx, "; "))
}
