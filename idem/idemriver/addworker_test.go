package idemriver

import (
	"context"
	"strings"
	"testing"

	"github.com/riverqueue/river"

	"github.com/idemgen/idemgen/idem"
)

// A job whose engine is not on PostgreSQL is refused at registration, once,
// by its name, and nothing is added to River's workers.
func TestAddWorkerRefusesAStoreWithoutPostgres(t *testing.T) {
	e := newOrderEngine(t) // no store
	workers := river.NewWorkers()
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), "River needs a PostgreSQL store") ||
			strings.Count(err.Error(), `job "order_job"`) != 1 {
			t.Fatalf("%s: %v; want the job named once and why", what, err)
		}
	}
	check("unit worker", AddUnitWorker(workers, e, fromArgs))
	check("periodic worker", AddPeriodicWorker[order, orderArgs](workers, e, func(context.Context) (idem.Report, error) {
		return idem.Report{}, nil
	}))
	// The kind is still free: the refused worker was never added.
	w := river.WorkFunc(func(context.Context, *river.Job[orderArgs]) error { return nil })
	if err := river.AddWorkerSafely(workers, w); err != nil {
		t.Fatalf("the refused worker's kind is taken: %v", err)
	}
}
