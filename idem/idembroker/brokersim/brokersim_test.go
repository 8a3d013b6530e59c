package brokersim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idembroker"
)

func fetch(t *testing.T, s *Source, limit int) []idembroker.Delivery {
	t.Helper()
	ds, err := s.Fetch(context.Background(), limit)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func ids(ds []idembroker.Delivery) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Message().ID)
	}
	return out
}

// What the broker promises its consumer, one behaviour at a time.
func TestAtLeastOnce(t *testing.T) {
	ctx := context.Background()
	b := New(1)
	for i := range 4 {
		b.Publish(fmt.Appendf(nil, "m%d", i), nil)
	}
	src := b.Source()
	ds := fetch(t, src, 3)
	if got := ids(ds); !slices.Equal(got, []string{"sim/1", "sim/2", "sim/3"}) {
		t.Fatalf("fetched %v", got)
	}
	if err := ds[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ds[1].Dead(ctx, errors.New("poison")); err != nil {
		t.Fatal(err)
	}
	if err := ds[2].Retry(ctx, time.Hour); err != nil { // DelayScale 0: back at once
		t.Fatal(err)
	}
	if err := ds[0].Retry(ctx, 0); err == nil {
		t.Error("a message acked already was given back")
	}
	again := fetch(t, src, 10)
	if got := ids(again); !slices.Equal(got, []string{"sim/4", "sim/3"}) {
		t.Fatalf("then fetched %v", got)
	}
	if m := again[1].Message(); m.Deliveries != 2 || string(m.Body) != "m2" {
		t.Errorf("redelivery %+v", m)
	}
	// A killed consumer: what it held comes back, and its settles fail.
	src.Kill()
	if err := again[0].Ack(ctx); err == nil {
		t.Error("a killed consumer's ack reached the broker")
	}
	if _, err := src.Fetch(ctx, 1); !errors.Is(err, idembroker.ErrSourceClosed) {
		t.Errorf("fetch on a killed source: %v", err)
	}
	next := b.Source()
	last := fetch(t, next, 10)
	if got := ids(last); len(got) != 2 {
		t.Fatalf("after the kill %v", got)
	}
	b.LoseAcks(1)
	for _, d := range last {
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	lost := fetch(t, next, 10)
	if len(lost) != 1 || lost[0].Ack(ctx) != nil {
		t.Fatalf("the lost ack's message: %v", ids(lost))
	}
	if b.Unsettled() != 0 {
		t.Errorf("%d unsettled", b.Unsettled())
	}
	want := map[string]Stats{
		"sim/1": {ID: "sim/1", State: StateAcked, Deliveries: 1, Acks: 1, Retries: 1}, // the refused retry counts: a consumer that settles twice shows
		"sim/2": {ID: "sim/2", State: StateDead, Deliveries: 1, Deads: 1, DeadReason: "poison"},
	}
	for id, w := range want {
		if got := b.Stats(id); got != w {
			t.Errorf("%s: %+v, want %+v", id, got, w)
		}
	}
	lostAcks := 0
	for _, s := range b.All() {
		lostAcks += s.LostAcks
	}
	if lostAcks != 1 {
		t.Errorf("lost acks %d", lostAcks)
	}
}

// An unsettled delivery comes back after AckWait, unless kept alive.
func TestAckWait(t *testing.T) {
	b := New(2)
	b.AckWait = 250 * time.Millisecond
	b.FetchWait = 200 * time.Millisecond
	kept := b.Publish([]byte("kept"), nil)
	b.Publish([]byte("dropped"), nil)
	src := b.Source()
	ds := fetch(t, src, 2)
	deadline := time.Now().Add(600 * time.Millisecond)
	for time.Now().Before(deadline) {
		if err := ds[0].InProgress(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	again := fetch(t, b.Source(), 2)
	if got := ids(again); !slices.Equal(got, []string{"sim/2"}) {
		t.Errorf("redelivered %v, want only the one not kept alive", got)
	}
	if s := b.Stats(kept); s.State != StateInFlight || s.Progress == 0 {
		t.Errorf("kept alive: %+v", s)
	}
}

// With Shuffle, messages that go back come out in another order.
func TestShuffle(t *testing.T) {
	b := New(3)
	b.Shuffle(true)
	for i := range 20 {
		b.Publish(fmt.Appendf(nil, "m%d", i), nil)
	}
	src := b.Source()
	first := ids(fetch(t, src, 20))
	src.Close()
	second := ids(fetch(t, b.Source(), 20))
	if len(second) != 20 || slices.Equal(first, second) {
		t.Errorf("redelivered in the same order: %v", second)
	}
}
