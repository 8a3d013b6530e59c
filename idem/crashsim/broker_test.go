package crashsim

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/idem/idembroker"
)

// A dead incarnation fetches nothing after its messages were requeued: its
// consumer loop may call Fetch once more before it sees its context end,
// and a message it took then would stay out to a process that is gone.
func TestRequeuedIncarnationFetchesNothing(t *testing.T) {
	ctx := context.Background()
	b := newSimBroker([]*simMsg{{msg: idembroker.Message{ID: "sim/1"}, unit: -1}})
	first, err := b.source(0).Fetch(ctx, 1)
	if err != nil || len(first) != 1 {
		t.Fatalf("first fetch: %d deliveries, %v; want 1", len(first), err)
	}
	b.requeue(0)
	if late, _ := b.source(0).Fetch(ctx, 1); len(late) != 0 {
		t.Fatalf("the dead incarnation fetched %d messages after its requeue; want none", len(late))
	}
	if next, _ := b.source(1).Fetch(ctx, 1); len(next) != 1 {
		t.Fatalf("the next incarnation fetched %d messages; want the requeued one", len(next))
	}
}
