package idembroker_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/ncruces/go-sqlite3/driver"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// order is a handed-in unit, as a generated package declares it.
type order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
	// Broken makes the unit's write fail, as a constraint would.
	Broken bool `json:"broken,omitempty"`
}

func orderKey(u order) string  { return "order:" + u.ID }
func chargeKey(u order) string { return "charge:" + u.ID }

func decodeOrder(m idembroker.Message) (order, error) {
	var u order
	err := json.Unmarshal(m.Body, &u)
	return u, err
}

func body(u order) []byte {
	b, err := json.Marshal(u)
	if err != nil {
		panic(err)
	}
	return b
}

// provider is the fake outside provider of the charge effect: it counts
// every call by key, and the calls that returned applied.
type provider struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
	// hold, when set, is called at the start of each call; an error fails
	// the call (after hold returned).
	hold func(ctx context.Context, key string) error
}

func newProvider() *provider {
	return &provider{calls: map[string]int{}, applied: map[string]int{}}
}

func (p *provider) charge(ctx context.Context, key string, u order) ([]byte, error) {
	p.mu.Lock()
	p.calls[key]++
	hold := p.hold
	p.mu.Unlock()
	if hold != nil {
		if err := hold(ctx, key); err != nil {
			return nil, err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.applied[key]++
	return []byte(fmt.Sprintf(`{"charged":%d}`, u.Amount)), nil
}

func (p *provider) counts(key string) (calls, applied int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key], p.applied[key]
}

// appliedOnce fails t unless each key was applied exactly once.
func (p *provider) appliedOnce(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, applied := p.counts(k); applied != 1 {
			t.Errorf("provider applied %s %d times, want once", k, applied)
		}
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// testLog is quiet unless IDEMGEN_TEST_VERBOSE is set.
func testLog() *slog.Logger {
	if os.Getenv("IDEMGEN_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return quiet
}

// stores runs f on SQLite and, when IDEMGEN_TEST_POSTGRES is set, on
// PostgreSQL, each on the example's generated store (billing), migrated.
func stores(t *testing.T, f func(t *testing.T, st idemrt.Store)) {
	t.Run("sqlite", func(t *testing.T) { f(t, openSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, openPostgres(t)) })
}

func openSQLite(t *testing.T) idemrt.Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ledger.db")
	db, err := sql.Open("sqlite3", "file:"+url.PathEscape(path)+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	st := billing.NewSQLiteStore(db)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st.Runtime()
}

func openPostgres(t *testing.T) idemrt.Store {
	t.Helper()
	pg := idemtest.OpenPostgres(t)
	pool, err := pgxpool.NewWithConfig(context.Background(), pg.Config(pg.NewSchema(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := billing.NewPostgresStore(pool)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st.Runtime()
}

const jobName = "orders"

var errBroken = errors.New("violates check constraint orders_amount")

// newEngine is the orders job over st: handed-in units keyed by id,
// parked after 3 failed writes, and one charge effect on p with lease.
func newEngine(t *testing.T, st idemrt.Store, p *provider, lease time.Duration, opts ...idem.Option) *idemrt.Engine[order] {
	t.Helper()
	def := &idemrt.Job[order]{
		Name:  jobName,
		KeyOf: orderKey,
		CheckKey: func(u order) error {
			if u.ID == "" {
				return fmt.Errorf("field id is empty: %w", idem.ErrEmptyKey)
			}
			return nil
		},
		Canonical:   func(u order) order { return u },
		CheckSeen:   true,
		MaxAttempts: 3,
		Write: func(ctx context.Context, q idemrt.Querier, u order, key string, v int32) (idem.Outcome, error) {
			if u.Broken {
				return "", errBroken
			}
			return idem.OutcomeInserted, nil
		},
		Effects: []idemrt.Effect[order]{{
			Name: "charge", Version: 1, When: idemrt.WhenInserted, KeyOf: chargeKey,
			Lease: lease, KeepResult: true, MaxAttempts: 5,
			Retry: idemrt.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
			Call:  p.charge,
		}},
	}
	e, err := idemrt.NewEngine(def, st, append([]idem.Option{idem.WithLogger(testLog())}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// parked reads the job's parked-table rows by key.
func parked(t *testing.T, st idemrt.Store) map[string]idem.ParkedUnit {
	t.Helper()
	rows, err := st.Auto().ParkedPage(context.Background(), jobName, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]idem.ParkedUnit{}
	for _, r := range rows {
		out[r.Key] = r
	}
	return out
}

// backlog drains once and returns what the job still owes.
func backlog(t *testing.T, e *idemrt.Engine[order]) idemrt.Backlog {
	t.Helper()
	rep, err := e.Drain(context.Background())
	var fe *idem.FailuresError
	if err != nil && !errors.As(err, &fe) {
		t.Fatal(err)
	}
	if rep.Backlog == nil {
		t.Fatal("drain reported no backlog")
	}
	return *rep.Backlog
}

// consuming runs Consume in the background until the returned stop is
// called; stop returns Consume's error.
func consuming(t *testing.T, e *idemrt.Engine[order], src idembroker.Source, opts ...idembroker.Option) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := idembroker.Config{Job: jobName, Broker: "sim", From: "orders", Group: "test", Batch: 8}
	opts = append([]idembroker.Option{idembroker.WithRetryBackoff(time.Millisecond, 5*time.Millisecond),
		idembroker.WithDrainEvery(100 * time.Millisecond)}, opts...)
	go func() { done <- idembroker.Consume(ctx, e, src, decodeOrder, cfg, opts...) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				err = errors.New("Consume did not return within a minute of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// within waits up to d for cond.
func within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
