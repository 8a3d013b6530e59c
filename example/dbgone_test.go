package main

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/example/internal/pgproxy"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// A run that loses its database mid-way (PostgreSQL: its sessions
// terminated on the server; SQLite: its handle closed under it) at each
// step of the job: the error names the job and the step, nothing is
// half-applied (every invoice row has its notice in the ledger, no notice
// without its row, none sent twice), and the next run, on a new
// connection, finishes: every invoice written once, every notice sent
// once, nothing owed.
func TestRunThatLosesItsDatabase(t *testing.T) {
	steps := []struct {
		point idemtest.CrashPoint
		want  string // what the error must say failed before the run stopped
	}{
		{idemtest.PointBatchBegin, "write failed"},
		{idemtest.PointBatchWritten, "write failed"},
		{idemtest.PointUnitAfterCommit, `effect "notify_new_invoice"`},
		{idemtest.PointEffectClaimed, `effect "notify_new_invoice"`},
		{idemtest.PointEffectAfterCall, "record done"},
		{idemtest.PointProgressBefore, "save watermark"},
	}
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			for _, step := range steps {
				t.Run(string(step.point), func(t *testing.T) {
					ctx := context.Background()
					open, lose := lostDB(t, dialect)
					st := open()
					f := newFixture()
					for i := range 5 {
						f.invoice(fmt.Sprintf("inv-%d", i), int64(100+i), f.base.Add(-time.Duration(10-i)*time.Minute))
					}
					var once sync.Once
					hit := false
					hook := func(_ context.Context, p idemtest.CrashPoint, _ string) error {
						if p == step.point {
							once.Do(func() { hit = true; lose() })
						}
						return nil
					}
					j, err := billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
						idem.WithClock(f.clk.Now), idemtest.WithLeaseClock(f.clk.Now), idem.WithLogger(quiet),
						idem.WithStart(f.base.Add(-24*time.Hour)), idem.WithBatchSize(2), idemtest.WithCrashHook(hook))
					if err != nil {
						t.Fatal(err)
					}
					runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
					rep, err := j.Run(runCtx)
					cancel()
					if !hit {
						t.Fatalf("the run never reached %s: %s, %v", step.point, rep, err)
					}
					t.Logf("error: %v\n%s", err, rep)
					if err == nil {
						t.Fatalf("run without its database: nil error, %s", rep)
					}
					// The run stops where it needs the database to go on:
					// saving its watermark. Before that, each unit and
					// effect the lost database failed is named with the
					// step it was at.
					if msg := err.Error(); !strings.HasPrefix(msg, `job "invoice_sync": save watermark: `) || !strings.Contains(msg, step.want) {
						t.Fatalf("error %q: want the job, the step it stopped at (save watermark) and what failed before (%s)", msg, step.want)
					}

					// The next run, on a new connection.
					st = open()
					j, err = billing.NewInvoiceSync(st, f.api, billing.InvoiceSyncEffects{NotifyNewInvoice: f.mail},
						idem.WithClock(f.clk.Now), idemtest.WithLeaseClock(func() time.Time { return f.clk.Now().Add(10 * time.Minute) }),
						idem.WithLogger(quiet), idem.WithStart(f.base.Add(-24*time.Hour)), idem.WithBatchSize(2))
					if err != nil {
						t.Fatal(err)
					}
					rows, ledger := rowsAndLedger(t, st, j)
					for id := range rows {
						if _, ok := ledger["notify:new-invoice:v2:"+id]; !ok {
							t.Fatalf("invoice %s written without its notice in the ledger: half-applied", id)
						}
					}
					if len(ledger) != len(rows) {
						t.Fatalf("%d ledger rows for %d invoices: half-applied", len(ledger), len(rows))
					}
					if rep, err := j.Run(ctx); err != nil {
						t.Fatalf("the next run: %s, %v", rep, err)
					}
					rows, ledger = rowsAndLedger(t, st, j)
					if len(rows) != 5 || len(ledger) != 5 {
						t.Fatalf("after the next run: %d invoices, %d ledger rows; want 5 each", len(rows), len(ledger))
					}
					for key, state := range ledger {
						if state != idem.StateDone {
							t.Fatalf("notice %s %s after the next run; want done", key, state)
						}
						if applied := sentOf(f.mail, key); applied != 1 {
							t.Fatalf("notice %s sent %d times; want once", key, applied)
						}
					}
				})
			}
		})
	}
}

// lostDB returns, for dialect, open (a new store on the test's database,
// closed when the test ends) and lose (the database gone under every store
// open so far).
func lostDB(t *testing.T, dialect string) (open func() *billing.Store, lose func()) {
	ctx := context.Background()
	if dialect == "sqlite" {
		path := filepath.Join(t.TempDir(), "test.db")
		var closers []func()
		open = func() *billing.Store {
			st, closeDB, err := openSQLite(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			closers = append(closers, closeDB)
			t.Cleanup(closeDB)
			return st
		}
		return open, func() {
			for _, c := range closers {
				c()
			}
		}
	}
	// PostgreSQL: the first store dials through a proxy that then goes
	// down (every session cut, new ones refused), as a server that
	// crashed or a network that dropped it; later stores dial the server.
	pg := idemtest.OpenPostgres(t)
	schema := pg.NewSchema(t)
	cfg := pg.Config(schema)
	proxy, err := pgproxy.Start(net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	opened := 0
	open = func() *billing.Store {
		cfg := pg.Config(schema)
		if opened == 0 {
			host, port, _ := net.SplitHostPort(proxy.Addr())
			n, _ := strconv.Atoi(port)
			cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(n)
			cfg.ConnConfig.ConnectTimeout = 5 * time.Second
		}
		opened++
		st, pool, err := openPostgresConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return st
	}
	return open, func() { proxy.SetDown(true) }
}

// rowsAndLedger reads the invoices and the ledger's state by effect key.
func rowsAndLedger(t *testing.T, st *billing.Store, j *billing.InvoiceSync) (map[string]billing.Invoice, map[string]string) {
	t.Helper()
	invoices := rows(t, j)
	entries, err := st.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ledger := map[string]string{}
	for _, e := range entries {
		ledger[e.Key] = e.State
	}
	return invoices, ledger
}

// sentOf is how many times the notifier sent the notice under key.
func sentOf(n *notifier, key string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.applied[key]
}
