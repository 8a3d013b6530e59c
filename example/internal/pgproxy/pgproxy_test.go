package pgproxy

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/idem/idemtest"
)

// through returns a connection config for the test's schema that dials
// the proxy instead of the server.
func through(t *testing.T, pg *idemtest.Postgres, schema string) (*pgx.ConnConfig, *Proxy) {
	t.Helper()
	cfg := pg.Config(schema).ConnConfig.Copy()
	p, err := Start(net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	host, port, _ := net.SplitHostPort(p.Addr())
	cfg.Host = host
	n, _ := strconv.Atoi(port)
	cfg.Port = uint16(n)
	return cfg, p
}

// A COMMIT cut after forwarding: the client gets an error, yet the server
// committed. A cut-all breaks the session; down refuses new ones.
func TestCommitCutCommitsButTheClientNeverHears(t *testing.T) {
	pg := idemtest.OpenPostgres(t)
	schema := pg.NewSchema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := pg.Admin().Exec(ctx, "CREATE TABLE "+schema+".t (n int)"); err != nil {
		t.Fatal(err)
	}
	cfg, p := through(t, pg, schema)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	p.CutNextCommit()
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("commit answered through a cut connection")
	}
	// The server runs the COMMIT after the client has heard the cut, on
	// its own time: under load it can come after a first look (CI,
	// 2026-12-06: "rows 0"). So the row is waited for, within a bound.
	var n int
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		err := pg.Admin().QueryRow(ctx, "SELECT count(*) FROM "+schema+".t").Scan(&n)
		if err == nil && n == 1 {
			break
		}
		if err != nil || n != 0 || time.Now().After(deadline) {
			t.Fatalf("rows %d, %v: want the cut commit applied on the server within 10 s", n, err)
		}
	}
	if s := p.Stats(); s.CommitCuts != 1 || s.Cut != 1 {
		t.Fatalf("stats %+v", s)
	}

	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// pgx may still hold a cancel request's connection open from the cut
	// commit: at least the session is cut.
	if got := p.CutAll(); got < 1 {
		t.Fatalf("cut %d connections, want the session", got)
	}
	if _, err := conn.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a query on a cut connection succeeded")
	}
	p.SetDown(true)
	short, cancelShort := context.WithTimeout(ctx, 5*time.Second)
	defer cancelShort()
	if c, err := pgx.ConnectConfig(short, cfg); err == nil {
		c.Close(ctx)
		t.Fatal("connected while the proxy was down")
	}
	p.SetDown(false)
	conn, err = pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("after down: %v", err)
	}
	conn.Close(ctx)
}
