// Package brokertest is what the broker adapters' tests share: a handed-in
// job (orders, with a charge effect on a counting fake provider) over the
// example's generated store on SQLite or PostgreSQL, and a consumer run in
// the background. Tests only: nothing a service links imports it.
package brokertest

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
	//idemgen:allow-testonly a package of the broker tests' own
	"github.com/idemgen/idemgen/idem/idemtest"
)

// order is a handed-in unit, as a generated package declares it.
type Order struct {
	ID     string `json:"id"`
	Amount int64  `json:"amount"`
	// Broken makes the unit's write fail, as a constraint would.
	Broken bool `json:"broken,omitempty"`
}

func OrderKey(u Order) string  { return "order:" + u.ID }
func ChargeKey(u Order) string { return "charge:" + u.ID }

func DecodeOrder(m idembroker.Message) (Order, error) {
	var u Order
	err := json.Unmarshal(m.Body, &u)
	return u, err
}

func Body(u Order) []byte {
	b, err := json.Marshal(u)
	if err != nil {
		panic(err)
	}
	return b
}

// provider is the fake outside provider of the charge effect: it counts
// every call by key, and the calls that returned applied.
type Provider struct {
	mu      sync.Mutex
	calls   map[string]int
	applied map[string]int
	// hold, when set, is called at the start of each call; an error fails
	// the call (after hold returned).
	Hold func(ctx context.Context, key string) error
}

func NewProvider() *Provider {
	return &Provider{calls: map[string]int{}, applied: map[string]int{}}
}

func (p *Provider) Charge(ctx context.Context, key string, u Order) ([]byte, error) {
	p.mu.Lock()
	p.calls[key]++
	hold := p.Hold
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

func (p *Provider) Counts(key string) (calls, applied int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[key], p.applied[key]
}

// AppliedOnce fails t unless each key was applied exactly once.
func (p *Provider) AppliedOnce(t *testing.T, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, applied := p.Counts(k); applied != 1 {
			t.Errorf("provider applied %s %d times, want once", k, applied)
		}
	}
}

var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// Logger is quiet unless IDEMGEN_TEST_VERBOSE is set.
func Logger() *slog.Logger {
	if os.Getenv("IDEMGEN_TEST_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return Quiet
}

// stores runs f on SQLite and, when IDEMGEN_TEST_POSTGRES is set, on
// PostgreSQL, each on the example's generated store (billing), migrated.
func Stores(t *testing.T, f func(t *testing.T, st idemrt.Store)) {
	t.Run("sqlite", func(t *testing.T) { f(t, OpenSQLite(t)) })
	t.Run("postgres", func(t *testing.T) { f(t, OpenPostgres(t)) })
}

func OpenSQLite(t *testing.T) idemrt.Store {
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

func OpenPostgres(t *testing.T) idemrt.Store {
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

const JobName = "orders"

var ErrBroken = errors.New("violates check constraint orders_amount")

// NewEngine is the orders job over st: handed-in units keyed by id,
// parked after 3 failed writes, and one charge effect on p with lease.
func NewEngine(t *testing.T, st idemrt.Store, p *Provider, lease time.Duration, opts ...idem.Option) *idemrt.Engine[Order] {
	t.Helper()
	def := &idemrt.Job[Order]{
		Name:  JobName,
		KeyOf: OrderKey,
		CheckKey: func(u Order) error {
			if u.ID == "" {
				return fmt.Errorf("field id is empty: %w", idem.ErrEmptyKey)
			}
			return nil
		},
		Canonical:   func(u Order) Order { return u },
		CheckSeen:   true,
		MaxAttempts: 3,
		Write: func(ctx context.Context, q idemrt.Querier, u Order, key string, v int32) (idem.Outcome, error) {
			if u.Broken {
				return "", ErrBroken
			}
			return idem.OutcomeInserted, nil
		},
		Effects: []idemrt.Effect[Order]{{
			Name: "charge", Version: 1, When: idemrt.WhenInserted, KeyOf: ChargeKey,
			Lease: lease, KeepResult: true, MaxAttempts: 5,
			Retry: idemrt.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond},
			Call:  p.Charge,
		}},
	}
	e, err := idemrt.NewEngine(def, st, append([]idem.Option{idem.WithLogger(Logger())}, opts...))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// parked reads the job's parked-table rows by key.
func Parked(t *testing.T, st idemrt.Store) map[string]idem.ParkedUnit {
	t.Helper()
	rows, err := st.Auto().ParkedPage(context.Background(), JobName, "", 1000)
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
func Backlog(t *testing.T, e *idemrt.Engine[Order]) idemrt.Backlog {
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
func Consuming(t *testing.T, e *idemrt.Engine[Order], src idembroker.Source, opts ...idembroker.Option) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := idembroker.Config{Job: JobName, Broker: "test", From: "orders", Group: "test", Batch: 8}
	opts = append([]idembroker.Option{idembroker.WithRetryBackoff(time.Millisecond, 5*time.Millisecond),
		idembroker.WithDrainEvery(100 * time.Millisecond)}, opts...)
	go func() { done <- idembroker.Consume(ctx, e, src, DecodeOrder, cfg, opts...) }()
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
	// Whatever stop answers here, the test has judged: a consumer it killed
	// ends with its closed source, and one it stopped has said already.
	t.Cleanup(func() { _ = stop() })
	return stop
}

// within waits up to d for cond.
func Within(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
