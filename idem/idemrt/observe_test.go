package idemrt

import (
	"context"
	"testing"
)

// listingQuerier is the querier of a package generated before the backlog
// count: only the listing methods answer (the embedded nil Querier panics).
type listingQuerier struct {
	Querier
	ledger []LedgerEntry
	units  []ParkedUnit
}

func (q listingQuerier) Ledger(context.Context) ([]LedgerEntry, error)      { return q.ledger, nil }
func (q listingQuerier) UnitFailures(context.Context) ([]ParkedUnit, error) { return q.units, nil }

// countingQuerier counts in the database; it must be asked, not listed.
type countingQuerier struct {
	Querier
	job string
}

func (q *countingQuerier) Backlog(_ context.Context, job string) (int64, int64, int64, error) {
	q.job = job
	return 3, 2, 1, nil
}

func TestBacklogCountsOrLists(t *testing.T) {
	ctx := context.Background()
	c := &countingQuerier{}
	if b, err := readBacklog(ctx, c, "sync"); err != nil || b != (Backlog{OwedEffects: 3, ParkedEffects: 2, ParkedUnits: 1}) || c.job != "sync" {
		t.Fatalf("counted backlog %+v, %v for job %q", b, err, c.job)
	}

	// Listed: only the job's pending and failed rows and parked units.
	l := listingQuerier{
		ledger: []LedgerEntry{
			{Job: "sync", State: StatePending}, {Job: "sync", State: StatePending, LeaseOwner: "w1"},
			{Job: "sync", State: StateParked}, {Job: "sync", State: StateDone},
			{Job: "other", State: StatePending}, {Job: "other", State: StateParked},
		},
		units: []ParkedUnit{
			{Job: "sync", State: UnitStateParked}, {Job: "sync", State: UnitStateParked},
			{Job: "sync", State: UnitStateFailing}, {Job: "sync", State: UnitStateRetry},
			{Job: "other", State: UnitStateParked},
		},
	}
	if b, err := readBacklog(ctx, l, "sync"); err != nil || b != (Backlog{OwedEffects: 2, ParkedEffects: 1, ParkedUnits: 2}) {
		t.Fatalf("listed backlog %+v, %v; want owed 2, parked effects 1, parked units 2", b, err)
	}
}
