// Command soak runs a fleet of real worker processes on River and
// PostgreSQL, kills them at random with SIGKILL while units flow, and checks
// that every unit is written once and every receipt reaches the provider
// once. With -cut-every its workers reach PostgreSQL through a proxy that
// cuts connections (some right after a COMMIT, before its answer); with
// -pg-crash-every it runs on a PostgreSQL server of its own and crashes it
// (immediate shutdown, then crash recovery). go test ./example/soak runs
// short versions of it.
//
//	go run ./example/soak -postgres "$IDEMGEN_TEST_POSTGRES" -workers 4 -duration 10m
//	go run ./example/soak -workers 4 -duration 10m -pg-crash-every 45s -cut-every 1s
package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// run is the supervisor, or a worker when the args say -worker.
func run(ctx context.Context, args []string, out, errOut io.Writer) error {
	cfg, err := parseFlags(args, errOut)
	if err != nil {
		return err
	}
	if cfg.worker {
		return runWorker(ctx, cfg)
	}
	res, err := supervise(ctx, cfg, os.Args[0], out)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, res)
	return res.verdict()
}
