package idemriver

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// order is a handed-in unit, as a generated package would declare it.
type order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
}

// orderArgs is its River job, as the generator emits it: unique by key.
type orderArgs struct {
	Key  string `json:"key" river:"unique"`
	Unit order  `json:"unit"`
}

func (orderArgs) Kind() string { return "test.order" }

func (orderArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: "orders", UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

func orderKey(u order) string { return "order:" + u.ID }

func newOrderEngine(t *testing.T) *idemrt.Engine[order] {
	t.Helper()
	def := &idemrt.Job[order]{
		Name:  "order_job",
		KeyOf: orderKey,
		CheckKey: func(u order) error {
			if u.ID == "" {
				return fmt.Errorf("field id is empty: %w", idem.ErrEmptyKey)
			}
			return nil
		},
		Canonical: func(u order) order { return u },
		CheckSeen: true,
	}
	e, err := idemrt.NewEngine(def, nil, []idem.Option{idem.WithLogger(quiet)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// riverSchema is a schema of its own with River's tables, and an
// insert-only River client on it.
func riverSchema(t *testing.T) (*pgxpool.Pool, *Client) {
	t.Helper()
	pg := idemtest.OpenPostgres(t)
	ctx := context.Background()
	pool, err := pgxpool.NewWithConfig(ctx, pg.Config(pg.NewSchema(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return pool, client
}

// queuedOrders reads River's table: each queued key and the unit its job holds.
func queuedOrders(t *testing.T, pool *pgxpool.Pool) (jobs int, byKey map[string]order) {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT args FROM river_job WHERE kind = $1", orderArgs{}.Kind())
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[orderArgs])
	if err != nil {
		t.Fatal(err)
	}
	byKey = map[string]order{}
	for _, a := range all {
		byKey[a.Key] = a.Unit
	}
	return len(all), byKey
}

func toArgs(u order) orderArgs   { return orderArgs{Key: orderKey(u), Unit: u} }
func fromArgs(a orderArgs) order { return a.Unit }

// InsertManyTx enqueues each key once in the caller's transaction: copies
// inside a call and copies of queued units are skipped, a copy with another
// payload is refused with ErrPayloadMismatch (inside a call before anything
// is enqueued), an empty key with ErrEmptyKey; a rolled-back call leaves
// nothing. InsertTx keeps the same rules.
func TestInsertManyTxUniqueByKey(t *testing.T) {
	pool, client := riverSchema(t)
	e := newOrderEngine(t)
	ctx := context.Background()
	insertMany := func(units ...order) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return InsertManyTx(ctx, client, tx, e, units, toArgs, fromArgs)
		})
	}
	o := func(i int, amount int64) order { return order{ID: fmt.Sprint("o", i), Amount: amount} }
	want := map[string]order{}
	expect := func(step string) {
		t.Helper()
		jobs, got := queuedOrders(t, pool)
		if jobs != len(want) || len(got) != len(want) {
			t.Fatalf("%s: %d River jobs under %d keys; want %d, one per key", step, jobs, len(got), len(want))
		}
		for k, u := range want {
			if got[k] != u {
				t.Fatalf("%s: key %s holds %+v; want %+v", step, k, got[k], u)
			}
		}
	}

	// Five units, the second given twice with the same payload.
	if err := insertMany(o(0, 10), o(1, 11), o(2, 12), o(1, 11), o(3, 13), o(4, 14)); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		want[orderKey(o(i, 0))] = o(i, int64(10+i))
	}
	expect("first call")

	// The same five again with a new one: only the new one is enqueued.
	if err := insertMany(o(4, 14), o(3, 13), o(5, 15), o(2, 12), o(1, 11), o(0, 10)); err != nil {
		t.Fatal(err)
	}
	want[orderKey(o(5, 0))] = o(5, 15)
	expect("copies of queued units")

	for _, c := range []struct {
		name  string
		units []order
		want  error
	}{
		{"a queued key with another payload", []order{o(6, 16), o(2, 99), o(7, 17)}, idem.ErrPayloadMismatch},
		{"one key twice in a call with two payloads", []order{o(8, 18), o(9, 19), o(8, 81)}, idem.ErrPayloadMismatch},
		{"an empty key", []order{o(10, 20), {ID: "", Amount: 1}}, idem.ErrEmptyKey},
	} {
		err := insertMany(c.units...)
		if !errors.Is(err, c.want) {
			t.Fatalf("%s: %v; want %v", c.name, err, c.want)
		}
		expect(c.name + " (rolled back)")
	}

	// Inside a call, a refused copy is found before River is asked: the
	// transaction holds nothing of the call.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := InsertManyTx(ctx, client, tx, e, []order{o(11, 21), o(11, 22)}, toArgs, fromArgs); !errors.Is(err, idem.ErrPayloadMismatch) {
			return fmt.Errorf("two payloads of one key: %v; want ErrPayloadMismatch", err)
		}
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE args->>'key' = $1", orderKey(o(11, 0))).Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return fmt.Errorf("a call refused before River was asked left %d jobs in the transaction", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// InsertTx, one at a time, skips the bulk call's units and refuses a changed one.
	insertOne := func(units ...order) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return InsertTx(ctx, client, tx, e, units, toArgs, fromArgs) })
	}
	if err := insertOne(o(3, 13), o(12, 22)); err != nil {
		t.Fatal(err)
	}
	want[orderKey(o(12, 0))] = o(12, 22)
	expect("InsertTx after InsertManyTx")
	if err := insertOne(o(3, 33)); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("InsertTx of a changed copy: %v; want ErrPayloadMismatch", err)
	}
	if err := insertMany(); err != nil {
		t.Fatalf("no units: %v", err)
	}
	expect("end")
}
