package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The soak's own server: it starts, takes a write, survives an immediate
// shutdown with the write (crash recovery) and stops.
func TestThrowawayClusterRecoversFromACrash(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := startCluster(ctx)
	if errors.Is(err, errNoPostgres) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.stop()
	exec := func(sql string) {
		t.Helper()
		conn, err := pgx.Connect(ctx, c.url())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE t (n int); INSERT INTO t VALUES (1)")
	if err := c.crash(ctx); err != nil {
		t.Fatal(err)
	}
	if conn, err := pgx.Connect(ctx, c.url()); err == nil {
		conn.Close(ctx)
		t.Fatal("connected to a crashed server")
	}
	if err := c.start(ctx); err != nil {
		t.Fatalf("%v\n%s", err, c.serverLogTail())
	}
	conn, err := pgx.Connect(ctx, c.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after crash recovery: %d rows, %v", n, err)
	}
	if log := c.serverLogTail(); !strings.Contains(log, "not properly shut down; automatic recovery in progress") {
		t.Fatalf("no crash recovery in the server's log:\n%s", log)
	}
}
