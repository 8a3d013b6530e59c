package idemriver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Exclusive lets one call run at a time per name across every pool on the
// database, releases the lock when the call ends, and keeps a
// *idem.FailuresError to the ledger instead of handing it to River.
func TestExclusiveRunsOneAtATime(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set")
	}
	ctx := context.Background()
	open := func() *pgxpool.Pool {
		p, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p
	}
	a, b := open(), open() // two workers
	name := "idemriver-test-" + t.Name()
	inside, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- Exclusive(ctx, a, name, quiet, func(context.Context) error {
			close(inside)
			<-release
			return nil
		})
	}()
	<-inside
	ran := false
	if err := Exclusive(ctx, b, name, quiet, func(context.Context) error { ran = true; return nil }); err != nil || ran {
		t.Fatalf("second worker while the first runs: ran=%v err=%v; want skipped", ran, err)
	}
	if err := Exclusive(ctx, b, name+"-other", quiet, func(context.Context) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("another name: ran=%v err=%v; want run", ran, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ran = false
	failures := &idem.FailuresError{Job: "j", Count: 1, Failures: []idem.Failure{{Key: "k", Err: idem.ErrWriteFailed}}}
	if err := Exclusive(ctx, b, name, quiet, func(context.Context) error { ran = true; return failures }); err != nil || !ran {
		t.Fatalf("after the first ended: ran=%v err=%v; want run, failures kept to the ledger", ran, err)
	}
	stopped := errors.New("database down")
	if err := Exclusive(ctx, a, name, quiet, func(context.Context) error { return stopped }); !errors.Is(err, stopped) {
		t.Fatalf("a call that stopped: %v; want its error, for River to retry", err)
	}
}
