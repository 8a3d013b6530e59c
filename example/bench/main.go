// Command bench measures the generated jobs' throughput against hand-written
// baselines on one database, in one run (issue 10, item 6):
//
//	go run ./example/bench                       # embedded SQLite in a temporary directory
//	go run ./example/bench -db postgres://...    # PostgreSQL: a schema per measurement, dropped after it
//	go run ./example/bench -mem                  # also peak memory at 100,000 and 1,000,000 units
//	go run ./example/bench -db postgres://... -only providers   # effects against a throttling provider (providers.go)
//	go run ./example/bench -db postgres://... -only river       # River with a no-op worker beside the generated worker (river.go)
//	go run ./example/bench -db postgres://... -only consumers   # the generated broker consumer: a SIGKILL soak and throughput per broker (consumers.go)
//	go run ./example/bench -only coldbuild                      # the first go tool idemgen generate of a new module, empty build cache (coldbuild.go)
//	go run ./example/bench -only crashsim                       # the crash matrices' seconds per job, before and after issue 39 (crashsim.go)
//
// It prints a table of the figures, each target of the issue with ok or
// MISS, and ends with one line:
//
//	ratios: copyjob/copy=… fxjob/handset=… fxjob/per_row_tx=… rerun/first=… effects/bound=… gen/sqlc=… providers1/R=… providers4/R=… river/bare=…
//
// The jobs come from idemgen.yaml (package benchjobs) and run only through
// the generated package's API and idem options; the baselines write tables
// of the same shape by hand. Every measurement checks its counts (rows
// written, provider calls, ledger rows done) and fails rather than report
// a figure for work that was not done.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if _, err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type config struct {
	rows, batch, concurrency  int
	writeAhead                bool
	latency                   time.Duration
	db                        string
	effectsN                  int
	mem                       bool
	only                      []string // measurements to run; empty: all
	kills                     bool     // -only crashsim: also run the mutation check and print its kills per tier
	cpuProfile                string   // file prefix of per-measurement CPU profiles
	memRows                   []int
	genJobs, genRuns          int
	noGen                     bool
	history                   int // -history: rows of history for the flat-cost measurement (history.go); 0: off
	uiRows                    int // -ui: rows of history for the operations page's measurement (ui.go); 0: off
	uiKeep                    bool
	uiSpace                   string
	historyKeep               bool
	statusExact, statusSample int // ops.DB.SetDoneCounting of the -history status reads (0: its defaults)

	// The -providers measurement (providers.go): the simulator's rate R,
	// the effect's rate in the workers (-1: R), the simulator's burst (0:
	// R/20, at least 2), its latency, the run's length (units: R per
	// second outside the outage, unless providerN), its deadline (0: from
	// the units), the worker counts, and the simulator's 503 window.
	providers          bool
	providerRate       int
	providerClientRate int
	providerBurst      int
	providerLatency    time.Duration
	providerDuration   time.Duration
	providerDeadline   time.Duration
	providerN          int
	providerWorkers    []int
	// providerGates: each providers run with the effect's gate off (as
	// before: every row on its own backoff) and/or on (a circuit, and the
	// provider's Retry-After as idem.PauseEffect), side by side.
	providerGates []bool
	// workerGate: the worker's effect has its gate on.
	workerGate bool
	outage     time.Duration
	// throttle: the simulator answers 429 with Retry-After to every call
	// for this long in the middle of each run (an account throttled
	// after a burst).
	throttle time.Duration

	// The -river measurement (river.go): units a run, the queue's River
	// workers (MaxWorkers), and the most the measurement may take.
	river                bool
	coldBuild            bool // -coldbuild (coldbuild.go)
	riverN, riverWorkers int
	riverDeadline        time.Duration

	// The -consumers measurement (consumers.go): the brokers, the soak's
	// messages and kills, each throughput run's messages, the charge
	// provider's latency, and the most one run may take.
	consumers        bool
	consumerBrokers  []string
	consumerN        int
	consumerKills    int
	consumerRateN    int
	consumerLatency  time.Duration
	consumerDeadline time.Duration
	// consumerChild is the hidden mode of a soak's consumer process: its
	// consumerChildSpec as JSON (consumers_ours.go).
	consumerChild string

	// childCopyJob is the hidden mode of the peak-memory runs: run
	// copy_job over this many units and exit (mem.go).
	childCopyJob int

	// worker is the hidden mode of a provider worker process (its number
	// from 1): drain call_job in workerSchema against the simulator at
	// workerURL, within workerDeadline, and exit (providers.go).
	worker         int
	workerSchema   string
	workerURL      string
	workerDeadline time.Duration
}

func parseFlags(args []string, out io.Writer) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.IntVar(&cfg.rows, "rows", 100000, "units per throughput measurement")
	fs.IntVar(&cfg.batch, "batch", 1000, "page size of the source, batch size of the engine (idem.WithBatchSize) and of the hand-written set-based baseline")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "effect concurrency of the engine (idem.WithEffectConcurrency)")
	fs.BoolVar(&cfg.writeAhead, "write-ahead", true, "commit a batch of copy_job while the next is prepared and written (idem.WithWriteAhead)")
	fs.DurationVar(&cfg.latency, "latency", 5*time.Millisecond, "provider latency of the effects/s measurement")
	fs.StringVar(&cfg.db, "db", "", "PostgreSQL URL (postgres://...); default: embedded SQLite in a temporary directory")
	fs.IntVar(&cfg.effectsN, "effects-n", 10000, "units of the effects/s measurement")
	fs.BoolVar(&cfg.mem, "mem", false, "also measure peak memory of copy_job in a child process at each -mem-rows size")
	memRows := fs.String("mem-rows", "100000,1000000", "unit counts of the peak-memory runs (-mem)")
	fs.IntVar(&cfg.genJobs, "gen-jobs", 50, "jobs in the spec of the generation measurement")
	fs.IntVar(&cfg.genRuns, "gen-runs", 5, "timed runs of idemgen and of sqlc (the median counts)")
	fs.IntVar(&cfg.history, "history", 0, "also measure copy_job, fx_job, Process latency, the backlog gauge, status and Purge on tables filled with this many rows of history, against empty tables (history.go; 0: off)")
	fs.IntVar(&cfg.uiRows, "ui", 0, "also time the operations page's pages (idem/idemui) on a ledger filled with this many rows of history, as -history fills it (ui.go; 0: off)")
	fs.BoolVar(&cfg.uiKeep, "ui-keep", false, "leave the -ui measurement's filled schema (PostgreSQL) or file (SQLite) in place; it prints its name")
	fs.StringVar(&cfg.uiSpace, "ui-space", "", "-ui: time the pages on this schema or SQLite file that -ui-keep left, filled with -ui rows, instead of filling one")
	fs.IntVar(&cfg.statusExact, "status-exact", 0, "-history: done rows per effect that status counts exactly (0: ops.ExactDoneLimit)")
	fs.IntVar(&cfg.statusSample, "status-sample", 0, "-history: ledger rows that status samples above -status-exact (0: ops.DoneSampleRows)")
	fs.BoolVar(&cfg.historyKeep, "history-keep", false, "leave the -history measurement's filled schema (PostgreSQL) or file (SQLite) in place, for EXPLAIN; it prints its name")
	fs.BoolVar(&cfg.kills, "kills", false, "-only crashsim: also run the mutation check (IDEMGEN_MUTATION=1, half an hour) and print the planted bugs each tier kills")
	fs.BoolVar(&cfg.noGen, "no-gen", false, "skip the generation measurement (it builds idemgen and sqlc)")
	only := fs.String("only", "", "run only these measurements (comma-separated: copyjob,copy,fxjob,per_row_tx,handset,effects,mem,gen,providers,history,ui,river,consumers,coldbuild; crashsim runs alone); the ratios need all")
	fs.BoolVar(&cfg.providers, "providers", false, "also measure effects against a provider simulator that serves -provider-rate calls/s and answers 429 above it (PostgreSQL; -only providers runs it alone)")
	fs.IntVar(&cfg.providerRate, "provider-rate", 200, "R: calls per second the simulated provider serves")
	fs.IntVar(&cfg.providerClientRate, "provider-client-rate", -1, "the effect's rate in the workers, calls/s across the fleet (-1: R; 0: no rate)")
	fs.IntVar(&cfg.providerBurst, "provider-burst", 0, "calls the simulator's token bucket holds (0: R/20, at least 2)")
	fs.DurationVar(&cfg.providerLatency, "provider-latency", 20*time.Millisecond, "how long the simulator takes over a call it applies")
	fs.DurationVar(&cfg.providerDuration, "provider-duration", 20*time.Second, "how long a providers run should last at R: it reserves R units per second of it outside the outage")
	fs.IntVar(&cfg.providerN, "provider-n", 0, "units of a providers run (0: from -provider-duration)")
	fs.DurationVar(&cfg.providerDeadline, "provider-deadline", 0, "the most a providers run may take (0: twice its expected time, plus twice the outage, plus a minute)")
	providerWorkers := fs.String("provider-workers", "1,4", "worker processes of each providers run (comma-separated counts)")
	fs.DurationVar(&cfg.outage, "outage", 0, "the simulator answers 503 (no Retry-After) for this long in the middle of each providers run")
	fs.DurationVar(&cfg.throttle, "throttle", 0, "the simulator answers 429 with Retry-After (to the window's end) to every call for this long in the middle of each providers run")
	fs.BoolVar(&cfg.river, "river", false, "also measure River with a no-op worker beside River with the generated worker (PostgreSQL; -only river runs it alone)")
	fs.BoolVar(&cfg.coldBuild, "coldbuild", false, "also measure the first go tool idemgen generate of a new module with an empty build cache (minutes; -only coldbuild runs it alone)")
	fs.IntVar(&cfg.riverN, "river-n", 20000, "units of each run of the river measurement")
	fs.IntVar(&cfg.riverWorkers, "river-workers", 1000, "River workers (MaxWorkers) of the river measurement's queue, both sides (a group of the generated worker holds at most as many jobs as are being worked)")
	fs.DurationVar(&cfg.riverDeadline, "river-deadline", 10*time.Minute, "the most the river measurement may take")
	fs.BoolVar(&cfg.consumers, "consumers", false, "also measure the generated broker consumer: a SIGKILL soak and throughput against a hand-written idempotent consumer, per broker (PostgreSQL; -only consumers runs it alone)")
	brokersFlag := fs.String("consumer-brokers", strings.Join(consumerBrokers, ","), "brokers of the consumers measurement (comma-separated: nats,rabbitmq,kafka; Kafka is an in-process kfake cluster)")
	fs.IntVar(&cfg.consumerN, "consumer-n", 2000, "messages of each consumers soak (a tenth of them second copies of earlier orders)")
	fs.IntVar(&cfg.consumerKills, "consumer-kills", 3, "SIGKILLs of the consumer process in each consumers soak")
	fs.IntVar(&cfg.consumerRateN, "consumer-rate-n", 1000, "messages of each consumers throughput run (ours, hand-written, bare)")
	fs.DurationVar(&cfg.consumerLatency, "consumer-latency", 5*time.Millisecond, "how long the consumers measurement's charge provider takes over a call it applies")
	fs.DurationVar(&cfg.consumerDeadline, "consumer-deadline", 90*time.Second, "the most one consumers run (a soak, a throughput run) may take")
	fs.StringVar(&cfg.consumerChild, consumerChildFlag, "", "internal: a consumers soak's consumer process")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of each measurement to PREFIX.<measurement>.pprof")
	fs.IntVar(&cfg.childCopyJob, childFlag, 0, "internal: peak-memory child mode")
	fs.IntVar(&cfg.worker, workerFlag, 0, "internal: provider worker mode")
	fs.BoolVar(&cfg.workerGate, workerGateFlag, false, "internal: provider worker's effect has a circuit and pauses on Retry-After")
	providerGates := fs.String("provider-gate", "off", "each providers run with the effect's circuit and pause off, on, or both (off,on) side by side")
	fs.StringVar(&cfg.workerSchema, workerSchemaFlag, "", "internal: provider worker's schema")
	fs.StringVar(&cfg.workerURL, workerURLFlag, "", "internal: provider worker's simulator")
	fs.DurationVar(&cfg.workerDeadline, workerLimitFlag, time.Minute, "internal: provider worker's deadline")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	for f := range strings.SplitSeq(*only, ",") {
		if f = strings.TrimSpace(f); f != "" {
			cfg.only = append(cfg.only, f)
		}
	}
	for f := range strings.SplitSeq(*brokersFlag, ",") {
		if f = strings.TrimSpace(f); f != "" {
			if !slices.Contains(consumerBrokers, f) {
				return nil, fmt.Errorf("-consumer-brokers: %q is not one of %s", f, strings.Join(consumerBrokers, ", "))
			}
			cfg.consumerBrokers = append(cfg.consumerBrokers, f)
		}
	}
	for f := range strings.SplitSeq(*memRows, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-mem-rows: bad count %q", f)
		}
		cfg.memRows = append(cfg.memRows, n)
	}
	for g := range strings.SplitSeq(*providerGates, ",") {
		switch g {
		case "off", "on":
			cfg.providerGates = append(cfg.providerGates, g == "on")
		default:
			return nil, fmt.Errorf("-provider-gate: %q is not off or on", g)
		}
	}
	for f := range strings.SplitSeq(*providerWorkers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-provider-workers: bad count %q", f)
		}
		cfg.providerWorkers = append(cfg.providerWorkers, n)
	}
	switch {
	case cfg.providerRate <= 0, cfg.providerN < 0, cfg.providerBurst < 0, cfg.providerLatency < 0, cfg.outage < 0, cfg.throttle < 0, cfg.providerDeadline < 0:
		return nil, errors.New("-provider-rate must be positive, and -provider-n, -provider-burst, -provider-latency, -outage, -throttle and -provider-deadline not negative")
	case cfg.outage > 0 && cfg.throttle > 0:
		return nil, errors.New("-outage and -throttle: one window a run, not both")
	case cfg.providerN == 0 && cfg.providerDuration <= cfg.outage+cfg.throttle:
		return nil, errors.New("-provider-duration must be longer than -outage (or -throttle)")
	case cfg.history < 0, cfg.uiRows < 0:
		return nil, errors.New("-history and -ui must not be negative")
	case cfg.consumerN < 10, cfg.consumerRateN < 10, cfg.consumerKills < 0, cfg.consumerLatency < 0, cfg.consumerDeadline <= 0:
		return nil, errors.New("-consumer-n and -consumer-rate-n must be at least 10, -consumer-kills and -consumer-latency not negative, -consumer-deadline positive")
	case cfg.riverN <= 0, cfg.riverWorkers <= 0, cfg.riverDeadline <= 0:
		return nil, errors.New("-river-n, -river-workers and -river-deadline must be positive")
	case cfg.rows <= 0, cfg.batch <= 0, cfg.concurrency <= 0, cfg.effectsN <= 0, cfg.genRuns <= 0, cfg.genJobs <= 0:
		return nil, errors.New("-rows, -batch, -concurrency, -effects-n, -gen-jobs and -gen-runs must be positive")
	case cfg.latency < 0:
		return nil, errors.New("-latency must not be negative")
	case cfg.db != "" && !strings.HasPrefix(cfg.db, "postgres://") && !strings.HasPrefix(cfg.db, "postgresql://"):
		return nil, errors.New("-db takes a PostgreSQL URL (postgres://...); SQLite is the default")
	}
	return cfg, nil
}

// result is one measurement.
type result struct {
	name, what string
	units      int
	elapsed    time.Duration
	cpu        time.Duration // user + system time of this process
	check      string        // the counts the measurement verified

	// rows is how many rows the destination held afterwards; calls, how
	// many provider calls the measurement made (-1: no provider).
	rows, calls int
}

func (r result) rate() float64 { return float64(r.units) / r.elapsed.Seconds() }

func (r result) cpuPerUnit() time.Duration { return r.cpu / time.Duration(max(r.units, 1)) }

// results is everything one run measured, for the report and the smoke test.
type results struct {
	postgres                                     bool
	copyJob, copy, fxJob, rerun, perRow, handSet result
	effects                                      result
	effectsPeak                                  int // most provider calls in flight at once
	providers                                    []providerRun
	providersSkipped                             bool // asked for on SQLite
	bound                                        float64
	mem                                          []memResult
	gen                                          *genResult
	history                                      *historyResult
	ui                                           *uiResult
	river                                        *riverResult
	riverSkipped                                 bool // asked for on SQLite
	consumers                                    *consumersResult
	consumersSkipped                             bool // asked for on SQLite
	coldBuild                                    *coldBuild
}

// measure runs fn and returns its wall time and the process's CPU time
// (user + system, getrusage) it took.
func measure(fn func() error) (wall, cpu time.Duration, err error) {
	runtime.GC() // do not bill this measurement for the last one's garbage
	before := cpuTime()
	start := time.Now()
	err = fn()
	return time.Since(start), cpuTime() - before, err
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func run(ctx context.Context, args []string, out io.Writer) (*results, error) {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return nil, err
	}
	if cfg.childCopyJob > 0 {
		return nil, memChild(ctx, cfg, out)
	}
	if cfg.worker > 0 {
		return nil, providerWorker(ctx, cfg, out)
	}
	if cfg.consumerChild != "" {
		return nil, consumerChild(ctx, cfg, out)
	}
	if slices.Equal(cfg.only, []string{"crashsim"}) {
		return nil, measureCrashSim(ctx, cfg, out) // crashsim.go
	}
	d, err := openDatabase(cfg.db, cfg.concurrency+4)
	if err != nil {
		return nil, err
	}
	defer d.close()
	res := &results{postgres: d.postgres()}
	if cfg.latency > 0 {
		res.bound = float64(cfg.concurrency) / cfg.latency.Seconds()
	}
	fmt.Fprintf(out, "idemgen bench: %s\n", d.describe())
	fmt.Fprintf(out, "rows %d, batch %d, effect concurrency %d, provider latency %v, effects-n %d, %d CPUs, %s\n",
		cfg.rows, cfg.batch, cfg.concurrency, cfg.latency, cfg.effectsN, runtime.NumCPU(), runtime.Version())
	if !d.postgres() {
		fmt.Fprintln(out, "SQLite runs in this process: the client CPU figures include the database's own work")
	}
	fmt.Fprintln(out)

	steps := []struct {
		name string
		fn   func() error
	}{
		{"copyjob", func() (err error) { res.copyJob, err = measureCopyJob(ctx, d, cfg); return err }},
		{"copy", func() (err error) { res.copy, err = measureCopy(ctx, d, cfg); return err }},
		{"fxjob", func() (err error) { res.fxJob, res.rerun, err = measureFxJob(ctx, d, cfg); return err }},
		{"per_row_tx", func() (err error) { res.perRow, err = measurePerRowTx(ctx, d, cfg); return err }},
		{"handset", func() (err error) { res.handSet, err = measureHandSet(ctx, d, cfg); return err }},
		{"effects", func() (err error) { res.effects, res.effectsPeak, err = measureEffects(ctx, d, cfg); return err }},
	}
	if cfg.mem {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"mem", func() (err error) { res.mem, err = measureMemory(ctx, cfg); return err }})
	}
	if cfg.providers || slices.Contains(cfg.only, "providers") {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"providers", func() (err error) {
			if !d.postgres() {
				res.providersSkipped = true // a fleet of processes shares one PostgreSQL; the targets are set for it
				return nil
			}
			res.providers, err = measureProviders(ctx, d, cfg)
			return err
		}})
	}
	if cfg.history > 0 {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"history", func() (err error) { res.history, err = measureHistory(ctx, d, cfg); return err }})
	}
	if cfg.uiRows > 0 {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"ui", func() (err error) { res.ui, err = measureUI(ctx, d, cfg); return err }})
	}
	if cfg.river || slices.Contains(cfg.only, "river") {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"river", func() (err error) {
			if !d.postgres() {
				res.riverSkipped = true // River runs on PostgreSQL
				return nil
			}
			res.river, err = measureRiver(ctx, d, cfg)
			return err
		}})
	}
	if cfg.consumers || slices.Contains(cfg.only, "consumers") {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"consumers", func() (err error) {
			if !d.postgres() {
				res.consumersSkipped = true // the consumer processes share one PostgreSQL
				return nil
			}
			res.consumers, err = measureConsumers(ctx, d, cfg)
			return err
		}})
	}
	if cfg.coldBuild || slices.Contains(cfg.only, "coldbuild") {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"coldbuild", func() (err error) { res.coldBuild, err = measureColdBuild(ctx); return err }})
	}
	if !cfg.noGen {
		steps = append(steps, struct {
			name string
			fn   func() error
		}{"gen", func() (err error) { res.gen, err = measureGenerate(ctx, cfg); return err }})
	}
	for _, s := range steps {
		if len(cfg.only) > 0 && !slices.Contains(cfg.only, s.name) {
			continue
		}
		if cfg.cpuProfile != "" {
			f, err := os.Create(cfg.cpuProfile + "." + s.name + ".pprof")
			if err != nil {
				return res, err
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				return res, err
			}
		}
		start := time.Now()
		err := s.fn()
		if cfg.cpuProfile != "" {
			pprof.StopCPUProfile()
		}
		if err != nil {
			return res, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(os.Stderr, "bench: %s done in %v\n", s.name, time.Since(start).Round(time.Millisecond))
	}
	res.print(out, cfg)
	return res, nil
}

// target is one of the targets: a figure, the bound it must meet,
// and whether higher or lower is better.
type target struct {
	label   string
	value   float64
	bound   float64
	atMost  bool // lower is better
	applies bool // false: not measured, or the target is for another database
}

func (t target) String() string {
	if !t.applies || math.IsNaN(t.value) {
		return "-"
	}
	op, ok := "≥", t.value >= t.bound
	if t.atMost {
		op, ok = "≤", t.value <= t.bound
	}
	verdict := "MISS"
	if ok {
		verdict = "ok"
	}
	return fmt.Sprintf("%s %g %s", op, t.bound, verdict)
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsInf(b, 0) {
		return math.NaN()
	}
	return a / b
}

func (r *results) print(out io.Writer, cfg *config) {
	copyTarget := 0.3 // PostgreSQL: the job without effects ≥ 0.3 × COPY
	if !r.postgres {
		copyTarget = 0.5 // SQLite: ≥ 0.5 × one transaction of prepared inserts
	}
	ratios := []target{
		{label: "copyjob/copy", value: ratio(r.copyJob.rate(), r.copy.rate()), bound: copyTarget, applies: true},
		{label: "fxjob/handset", value: ratio(r.fxJob.rate(), r.handSet.rate()), bound: 0.8, applies: true},
		{label: "fxjob/per_row_tx", value: ratio(r.fxJob.rate(), r.perRow.rate()), bound: 15, applies: true},
		{label: "rerun/first", value: ratio(r.rerun.rate(), r.fxJob.rate()), bound: 1, applies: true},
		{label: "effects/bound", value: ratio(r.effects.rate(), r.bound), bound: 0.8, applies: r.bound > 0},
		{label: "gen/sqlc", value: math.NaN(), bound: 1.5, atMost: true, applies: r.gen != nil},
	}
	if r.gen != nil {
		ratios[5].value = ratio(r.gen.idemgen.Seconds(), r.gen.sqlc.Seconds())
	}
	cpuTarget := target{label: "cpu/unit", value: float64(r.copyJob.cpuPerUnit()) / float64(time.Microsecond), bound: 10, atMost: true, applies: true}

	const row = "%-11s %8s %8s %9s %9s   %-26s %-11s %s\n"
	fmt.Fprintf(out, row, "measurement", "units", "seconds", "units/s", "CPU/unit", "figure", "target", "checked")
	line := func(r result, figure string, t target) {
		if r.name == "" {
			return // not measured (-only)
		}
		fmt.Fprintf(out, row, r.name, strconv.Itoa(r.units), fmt.Sprintf("%.2f", r.elapsed.Seconds()), fmt.Sprintf("%.0f", r.rate()),
			r.cpuPerUnit().Round(100*time.Nanosecond).String(), figure, t, r.check)
	}
	figure := func(t target) string {
		if math.IsNaN(t.value) {
			return "-"
		}
		return fmt.Sprintf("%s=%.3g", t.label, t.value)
	}
	line(r.copyJob, fmt.Sprintf("cpu/unit=%.3gµs", cpuTarget.value), cpuTarget)
	line(r.copy, figure(ratios[0]), ratios[0])
	line(r.fxJob, figure(ratios[2]), ratios[2])
	line(r.rerun, figure(ratios[3]), ratios[3])
	line(r.perRow, "", target{})
	line(r.handSet, figure(ratios[1]), ratios[1])
	line(r.effects, figure(ratios[4]), ratios[4])
	for _, p := range r.providers {
		t := p.rateTarget()
		fmt.Fprintf(out, row, p.name(), strconv.Itoa(p.units), fmt.Sprintf("%.2f", p.elapsed.Seconds()), fmt.Sprintf("%.0f", p.effectsPerSecond()),
			(p.cpu / time.Duration(max(p.units, 1))).Round(100*time.Nanosecond).String(), figure(t), t, p.checked())
	}
	fmt.Fprintln(out)
	for _, r := range []result{r.copyJob, r.copy, r.fxJob, r.rerun, r.perRow, r.handSet, r.effects} {
		if r.name != "" {
			fmt.Fprintf(out, "  %-11s %s\n", r.name, r.what)
		}
	}
	if r.effects.name != "" {
		fmt.Fprintf(out, "  effects bound = concurrency/latency = %d/%v = %.0f/s; most provider calls in flight at once: %d\n",
			cfg.concurrency, cfg.latency, r.bound, r.effectsPeak)
	}
	for _, p := range r.providers {
		fmt.Fprintf(out, "  %-11s %s\n", p.name(), p.what(cfg))
	}
	if r.providersSkipped {
		fmt.Fprintln(out, "  providers   skipped: it runs on PostgreSQL (-db), which its worker processes share")
	}

	if len(r.mem) > 0 {
		fmt.Fprintln(out)
		for _, m := range r.mem {
			fmt.Fprintf(out, "copy_job %9d units in a child process: peak RSS %7.1f MiB (VmHWM; its ru_maxrss %.1f MiB includes this process's), peak live Go heap %6.1f MiB (%s)\n",
				m.units, mib(m.maxRSS), mib(m.rusageMaxRSS), mib(m.peakHeap), m.elapsed.Round(time.Millisecond))
		}
		first, last := r.mem[0], r.mem[len(r.mem)-1]
		t := target{label: "mem", value: float64(last.maxRSS) / float64(first.maxRSS), bound: 1.2, atMost: true, applies: len(r.mem) > 1}
		fmt.Fprintf(out, "peak RSS %d/%d units = %.3g   target %s   (peak live Go heap %.3g)\n", last.units, first.units, t.value, t,
			float64(last.peakHeap)/float64(first.peakHeap))
	} else {
		fmt.Fprintln(out, "\npeak memory: not measured (-mem runs copy_job at 100,000 and 1,000,000 units in a child process)")
	}
	if r.gen != nil {
		fmt.Fprintln(out)
		fmt.Fprintf(out, "generate %d-job spec, median of %d: idemgen %s, sqlc alone %s (same sqlc.yaml and SQL)   gen/sqlc=%.3g  target %s\n",
			r.gen.jobs, r.gen.runs, r.gen.idemgen.Round(time.Millisecond), r.gen.sqlc.Round(time.Millisecond), ratios[5].value, ratios[5])
	} else {
		fmt.Fprintln(out, "\ngenerate: not measured (-no-gen)")
	}
	if r.history != nil {
		r.history.print(out)
	}
	if r.ui != nil {
		r.ui.print(out)
	}
	if r.river != nil {
		r.river.print(out)
	} else if r.riverSkipped {
		fmt.Fprintln(out, "\nriver: skipped: River runs on PostgreSQL (-db)")
	}
	if r.consumers != nil {
		r.consumers.print(out)
	} else if r.consumersSkipped {
		fmt.Fprintln(out, "\nconsumers: skipped: the consumer processes share one PostgreSQL (-db)")
	}
	if r.coldBuild != nil {
		r.coldBuild.print(out)
	}
	if !r.postgres {
		fmt.Fprintln(out, "\nThe issue sets its targets for PostgreSQL, and copyjob/copy ≥ 0.5 for SQLite; the others are shown here against the PostgreSQL bounds.")
	}
	fmt.Fprintln(out)
	parts := make([]string, len(ratios))
	for i, t := range ratios {
		parts[i] = fmt.Sprintf("%s=%s", t.label, formatRatio(t.value))
	}
	for _, w := range cfg.providerWorkers {
		v := math.NaN()
		for _, p := range r.providers {
			if p.workers == w && !p.gate {
				v = p.rateRatio()
			}
		}
		parts = append(parts, fmt.Sprintf("providers%d/R=%s", w, formatRatio(v)))
	}
	riverRatio := math.NaN()
	if r.river != nil {
		riverRatio = r.river.ratio()
	}
	parts = append(parts, "river/bare="+formatRatio(riverRatio))
	if r.consumers != nil {
		for _, l := range r.consumers.lines {
			parts = append(parts, fmt.Sprintf("consumers_%s/handwritten=%s", l.broker, formatRatio(l.ratio())))
		}
	}
	if r.coldBuild != nil {
		parts = append(parts, fmt.Sprintf("coldbuild_s=%s", formatRatio(r.coldBuild.wall.Seconds())))
	}
	if r.history != nil {
		for _, t := range r.history.targets() {
			parts = append(parts, fmt.Sprintf("%s=%s", t.label, formatRatio(t.value)))
		}
	}
	fmt.Fprintf(out, "ratios: %s\n", strings.Join(parts, " "))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func formatRatio(v float64) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}
