package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemops"
	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/idemui"
)

// What the operations page's browser test (ui_browser_test.go) stands on:
// the billing package's database with the page's view of it, and the
// scenario the page shows. The page's own tests are idem/idemui's; this
// one stays here because CI runs it by name in ./example with Chromium.

// billingOps describes the billing package (example/idemgen.yaml) as a
// service hands it to idemops.New: as the generated package describes it.
var billingOps = billing.OpsPackage()

// uiDB is a billing database with the operations page's view of it.
type uiDB struct {
	store *billing.Store
	ops   *idemops.DB
	raw   rawDB
	// leasedSQL puts an effect under a lease live for years (worker-7's).
	leasedSQL func(key string) (sqlite, postgres string)
}

// eachUIDB runs fn on SQLite and on PostgreSQL.
func eachUIDB(t *testing.T, fn func(t *testing.T, db uiDB)) {
	leased := func(key string) (string, string) {
		set := "UPDATE billing_idem_ledger SET state = 'pending', lease_owner = 'worker-7', lease_until = %s WHERE effect_key = '" + key + "'"
		return strings.Replace(set, "%s", "'2999-01-01T00:00:00.000000000Z'", 1), strings.Replace(set, "%s", "'2999-01-01'::timestamptz", 1)
	}
	t.Run("sqlite", func(t *testing.T) {
		ctx := context.Background()
		db, err := openSQLiteDB(filepath.Join(t.TempDir(), "ui.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		st := billing.NewSQLiteStore(db)
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		ops, err := idemops.New(ctx, db, st.Runtime(), idemops.SQLite, billingOps, quiet)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, uiDB{store: st, ops: ops, leasedSQL: leased, raw: func(t *testing.T, sqlite, _ string) {
			t.Helper()
			if _, err := db.ExecContext(ctx, sqlite); err != nil {
				t.Fatalf("sqlite: %v", err)
			}
		}})
	})
	t.Run("postgres", func(t *testing.T) {
		ctx := context.Background()
		pg := idemtest.OpenPostgres(t)
		st, pool, err := openPostgresConfig(ctx, pg.Config(pg.NewSchema(t)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		db := stdlib.OpenDBFromPool(pool)
		t.Cleanup(func() { db.Close() })
		ops, err := idemops.New(ctx, db, st.Runtime(), idemops.Postgres, billingOps, quiet)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, uiDB{store: st, ops: ops, leasedSQL: leased, raw: func(t *testing.T, _, postgres string) {
			t.Helper()
			if _, err := pool.Exec(ctx, postgres); err != nil {
				t.Fatalf("postgres: %v", err)
			}
		}})
	})
}

// The effect keys of the scenario's invoices (notify_new_invoice, v2).
const (
	parkedKey = "notify:new-invoice:v2:inv-1" // bounced: parked at its first attempt
	doneKey   = "notify:new-invoice:v2:inv-2" // sent
	leasedKey = "notify:new-invoice:v2:inv-3" // owed, under worker-7's live lease
)

// opsScenario fills the database: inv-1's notice parked (the mailbox
// bounced), inv-2's sent, inv-3's owed under a live lease. The fixture's
// clock is the operations page's, so the chart's window holds the runs.
func opsScenario(t *testing.T, db uiDB) (*fixture, *billing.InvoiceSync) {
	t.Helper()
	f := newFixture()
	f.base = time.Now().UTC().Truncate(time.Minute).Add(-30 * time.Minute)
	f.clk.now = f.base
	db.ops.SetClock(f.clk.Now)
	f.invoice("inv-1", 100, f.base.Add(-3*time.Minute))
	f.mail.bounce = true
	j := f.job(t, db.store)
	if rep := runJob(t, j); rep.EffectsParked != 1 || rep.Inserted != 1 {
		t.Fatalf("first run: %s", rep)
	}
	f.mail.bounce = false
	f.clk.advance(5 * time.Minute)
	f.invoice("inv-2", 200, f.clk.Now().Add(-2*time.Minute)) // apart: the fake source pages on updated_at
	f.invoice("inv-3", 300, f.clk.Now().Add(-time.Minute))
	if rep := runJob(t, j); rep.EffectsDone != 2 {
		t.Fatalf("second run: %s", rep)
	}
	sqlite, postgres := db.leasedSQL(leasedKey)
	db.raw(t, sqlite, postgres)
	f.clk.advance(time.Minute)
	return f, j
}

// logBuffer collects the handler's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// onCall authorizes every action as alice, except forgets, which it
// refuses: the service's own authorization.
func onCall(_ *http.Request, a idemui.Action) (string, error) {
	if a.Kind == idemui.ActionForget {
		return "", errNotOnCall
	}
	return "alice", nil
}

var errNotOnCall = &notOnCall{}

type notOnCall struct{}

func (*notOnCall) Error() string { return "only the incident lead may forget keys" }

// ledgerEntry is the ledger row under key.
func ledgerEntry(t *testing.T, st *billing.Store, key string) idem.LedgerEntry {
	t.Helper()
	rows, err := st.Ledger(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range rows {
		if e.Key == key {
			return e
		}
	}
	t.Fatalf("no ledger row %s", key)
	return idem.LedgerEntry{}
}
