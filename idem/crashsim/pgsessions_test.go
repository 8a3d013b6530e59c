package crashsim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// The splitter finds each message however the bytes arrive: the client's
// untyped startup message first, then typed ones, cut anywhere.
func TestFramesSplitAnywhere(t *testing.T) {
	var stream bytes.Buffer
	startup := []byte{0, 3, 0, 0, 'u', 's', 'e', 'r', 0, 'x', 0, 0}
	stream.Write([]byte{0, 0, 0, byte(4 + len(startup))})
	stream.Write(startup)
	writeMessage(&stream, 'Q', []byte("SELECT 1\x00"))
	writeMessage(&stream, 'S', nil)
	writeMessage(&stream, 'Z', []byte{'T'})
	want := "0:kept Q S Z:kept"
	for cut := 1; cut <= stream.Len(); cut++ {
		var got []string
		f := pgFrames{untyped: true, keep: func(typ byte) bool { return typ == 0 || typ == 'Z' },
			msg: func(typ byte, body []byte) {
				s := string(typ)
				if typ == 0 {
					s = "0"
				}
				if body != nil {
					s += ":kept"
				}
				got = append(got, s)
			}}
		for p := stream.Bytes(); len(p) > 0; p = p[min(cut, len(p)):] {
			f.feed(p[:min(cut, len(p))])
		}
		if g := fmt.Sprint(got); g != "["+want+"]" || f.partial() {
			t.Fatalf("cut every %d bytes: messages %s (partial %t), want [%s]", cut, g, f.partial(), want)
		}
	}
}

// A crash hands on, as a pooler does, the sessions its incarnation left
// idle between statements: the transaction one left open is rolled back
// (its row lock free at once), the dead client can no longer use it, and
// the next incarnation's pool gets it, renamed and reset (a statement the
// dead one prepared is prepared again). A session in the middle of a
// statement is killed.
func TestCrashHandsOnIdleSessions(t *testing.T) {
	db := idemtest.OpenPostgres(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := &simPostgres{db: db}
	schema := db.NewSchema(t)
	if _, err := db.Admin().Exec(ctx, fmt.Sprintf("CREATE TABLE %s.item (id int PRIMARY KEY); INSERT INTO %s.item VALUES (1)", schema, schema)); err != nil {
		t.Fatal(err)
	}
	s := &simSchema{name: schema}
	defer s.closeIdle()
	quiet := idemtest.CrashHook(func(context.Context, idemtest.CrashPoint, string) error { return nil })
	const lockRow = "SELECT id FROM item WHERE id = $1 FOR UPDATE"
	pid := func(c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int32 {
		var pid int32
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatal(err)
		}
		return pid
	}

	dead := e.newIncPool(t, s, "idemsim_"+schema+"_1", 2, quiet)
	held, err := dead.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	heldPID := pid(held)
	tx, err := held.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id int
	if err := tx.QueryRow(ctx, lockRow, 1).Scan(&id); err != nil {
		t.Fatal(err)
	}
	busy, err := dead.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	busyPID := pid(busy)
	sleeping := make(chan error, 1)
	go func() { _, err := busy.Exec(ctx, "SELECT pg_sleep(30)"); sleeping <- err }()
	for range 500 { // until the server runs the sleep
		var n int
		_ = db.Admin().QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", busyPID).Scan(&n)
		if n == 1 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	dead.sessions.kill()
	if err := e.terminate(ctx, "application_name = $1", "idemsim_"+schema+"_1"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-sleeping:
		if err == nil {
			t.Error("the statement under way at the kill succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the statement under way at the kill still runs")
	}
	lockCtx, lockCancel := context.WithTimeout(ctx, 2*time.Second)
	defer lockCancel()
	if _, err := db.Admin().Exec(lockCtx, "BEGIN; SET LOCAL lock_timeout = 100; "+fmt.Sprintf("SELECT id FROM %s.item WHERE id = 1 FOR UPDATE", schema)+"; COMMIT"); err != nil {
		t.Errorf("the dead incarnation's row lock is still held: %v", err)
	}
	var alive []int32
	rows, err := db.Admin().Query(ctx, "SELECT pid FROM pg_stat_activity WHERE pid = ANY($1) AND application_name = $2 AND state = 'idle'", []int32{heldPID, busyPID}, "idembin_"+schema)
	if err != nil {
		t.Fatal(err)
	}
	alive, err = pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(alive) != fmt.Sprint([]int32{heldPID}) {
		t.Errorf("sessions binned %v, want the idle one only (%d; %d was mid-statement)", alive, heldPID, busyPID)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); !errors.Is(err, context.Canceled) && err == nil {
		t.Error("the dead incarnation still runs statements on its session")
	}

	next := e.newIncPool(t, s, "idemsim_"+schema+"_2", 2, quiet)
	defer next.pool.Close()
	c, err := next.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	if got := pid(c); got != heldPID {
		t.Errorf("the next incarnation's session is %d, want the binned %d", got, heldPID)
	}
	var app, state string
	if err := db.Admin().QueryRow(ctx, "SELECT application_name, state FROM pg_stat_activity WHERE pid = $1", heldPID).Scan(&app, &state); err != nil {
		t.Fatal(err)
	}
	if app != "idemsim_"+schema+"_2" || state != "idle" {
		t.Errorf("the handed-on session is named %q, %s; want %q, idle", app, state, "idemsim_"+schema+"_2")
	}
	if err := c.QueryRow(ctx, lockRow, 1).Scan(&id); err != nil {
		t.Errorf("a statement the dead incarnation prepared, run again: %v", err)
	}
}
