package main

import (
	"errors"
	"flag"
	"io"
	"time"
)

// config is the soak's flags; a worker gets the supervisor's, plus -worker.
type config struct {
	postgres      string
	schema        string // set by the supervisor for its workers
	workers       int
	duration      time.Duration // how long units are fed and workers killed
	units         int           // units fed over duration
	killEvery     time.Duration // mean time between kills
	settle        time.Duration // how long the fleet may take to finish after the last kill
	seed          int64
	providerDelay time.Duration
	// PostgreSQL's own failures
	pgCrashEvery time.Duration // mean time between immediate shutdowns of the soak's own server (0: none)
	pgDown       time.Duration // how long the server stays down after a crash
	cutEvery     time.Duration // mean time between connection cuts at the proxy (0: no proxy)
	// worker mode
	worker   bool
	id       string
	provider string // the fake provider's URL
	bug      string // a planted bug, to show the soak catches it: "fresh-key" or "no-key"
}

func parseFlags(args []string, errOut io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.StringVar(&c.postgres, "postgres", "", "PostgreSQL URL (required); the soak works in a schema of its own and drops it")
	fs.IntVar(&c.workers, "workers", 4, "worker processes")
	fs.DurationVar(&c.duration, "duration", time.Minute, "how long units are fed and workers killed")
	fs.IntVar(&c.units, "units", 0, "units fed over -duration (default: 40 a second)")
	fs.DurationVar(&c.killEvery, "kill-every", 3*time.Second, "mean time between SIGKILLs of a random worker")
	fs.DurationVar(&c.settle, "settle", 3*time.Minute, "how long the fleet may take to finish after the last kill")
	fs.DurationVar(&c.providerDelay, "provider-delay", 25*time.Millisecond, "how long the provider takes to answer after applying (a kill in it makes a repeat)")
	fs.DurationVar(&c.pgCrashEvery, "pg-crash-every", 0, "mean time between crashes of PostgreSQL (an immediate shutdown, then a start with crash recovery); the soak then runs on a server of its own, started in a temporary directory (-postgres is not needed)")
	fs.DurationVar(&c.pgDown, "pg-down", time.Second, "how long PostgreSQL stays down after each crash")
	fs.DurationVar(&c.cutEvery, "cut-every", 0, "mean time between connection cuts: workers then reach PostgreSQL through a proxy on loopback that cuts, in turn at random, the connection right after a COMMIT (before its answer), a random one, or all")
	fs.Int64Var(&c.seed, "seed", 0, "random seed (default: the time)")
	fs.StringVar(&c.bug, "bug", "", "plant a bug in the workers to see the soak fail: fresh-key (a new idempotency key per provider call), no-key (no Idempotency-Key header)")
	fs.BoolVar(&c.worker, "worker", false, "run as a worker (the supervisor starts these)")
	fs.StringVar(&c.schema, "schema", "", "worker: the soak's schema")
	fs.StringVar(&c.id, "id", "", "worker: its name")
	fs.StringVar(&c.provider, "provider", "", "worker: the fake provider's URL")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.postgres == "" && (c.pgCrashEvery == 0 || c.worker):
		return c, errors.New("-postgres is required (or -pg-crash-every, which runs a server of its own)")
	case c.workers < 1:
		return c, errors.New("-workers must be at least 1")
	case c.worker && (c.schema == "" || c.provider == "" || c.id == ""):
		return c, errors.New("a worker needs -schema, -provider and -id")
	case c.bug != "" && c.bug != "fresh-key" && c.bug != "no-key":
		return c, errors.New(`-bug: "fresh-key" or "no-key"`)
	}
	if c.units == 0 {
		c.units = int(c.duration.Seconds() * 40)
	}
	if c.seed == 0 {
		c.seed = time.Now().UnixNano()
	}
	return c, nil
}
