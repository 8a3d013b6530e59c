// Package storetest is the one conformance suite of the runtime's stores:
// idem/idempg and idem/idemsqlite each run Exercise from a test of their
// own, so both dialects are held to the same expectations of the store
// contract (idem.Store, idemrt.Querier and the interfaces it embeds,
// idemrt.DBClock, and a caller's own transaction).
//
// Each test gets a store over a fresh database migrated as a generated
// package migrates it, and drives the store's queries directly, with times
// of its own (the contract takes "now" and lease ends as arguments), then
// checks the rows the store reads back.
package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// Store is what the suite tests: a runtime store that reads its
// database's clock.
type Store interface {
	idem.Store
	idemrt.DBClock
}

// Opened is a store over a fresh, migrated database that lives as long as
// the test that opened it.
type Opened struct {
	Store Store
	// Begin starts a transaction the caller owns on the store's database
	// and returns the store's queries in it (idemrt.PgTxStore,
	// idemrt.SQLTxStore), with its commit and its rollback.
	Begin func(ctx context.Context, t *testing.T) (q idemrt.Querier, commit, rollback func() error)
	// Outside is the same database through a handle of its own (its own
	// pool or *sql.DB), for reading what a transaction Begin started
	// shows to others while it is open: reading through Store then would
	// ask the transaction's own pool for a second connection, which on a
	// pool of one waits forever.
	Outside Store
}

// Exercise runs every test of the suite, each on a store open returns.
func Exercise(t *testing.T, open func(t *testing.T) Opened) {
	tests := []struct {
		name string
		run  func(t *testing.T, o Opened)
	}{
		// Each group sits in a file of its own: progress.go, ledger.go,
		// retention.go, parked.go, limits.go, transactions.go.
		{"Progress", testProgress},
		{"See", testSee},
		{"Reserve", testReserve},
		{"ReserveLeased", testReserveLeased},
		{"Decided", testDecided},
		{"ClaimAndComplete", testClaimAndComplete},
		{"Statement", testStatement},
		{"Release", testRelease},
		{"PendingPages", testPendingPages},
		{"Purge", testPurge},
		{"PurgeSeen", testPurgeSeen},
		{"LedgerPages", testLedgerPages},
		{"ParkedUnits", testParkedUnits},
		{"Recovery", testRecovery},
		{"Limits", testLimits},
		{"Gate", testGate},
		{"Backlog", testBacklog},
		{"Transactions", testTransactions},
		{"CallerTransaction", testCallerTransaction},
		{"DBNow", testDBNow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(t, open(t))
		})
	}
}

// t0 is the suite's clock: every time it hands the store is t0 plus
// something, whole seconds in UTC, which both dialects store exactly.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const (
	job    = "invoice_sync"
	effect = "notify"
)

func ctxOf(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// reservation is one effect's rows for the units, each keyed
// "<effect>:v<version>:<unit>" with payload "payload of <unit>".
func reservation(job, effect string, version int32, units ...string) idemrt.Reservations {
	r := idemrt.Reservations{Job: job, Effect: effect, EffectVersion: version, JobVersion: 1}
	for _, u := range units {
		r.Keys = append(r.Keys, key(effect, version, u))
		r.UnitKeys = append(r.UnitKeys, u)
		r.Payloads = append(r.Payloads, []byte("payload of "+u))
	}
	return r
}

func key(effect string, version int32, unit string) string {
	return fmt.Sprintf("%s:v%d:%s", effect, version, unit)
}

func reserve(t *testing.T, st Store, r idemrt.Reservations) {
	t.Helper()
	must(t, st.InTx(ctxOf(t), func(q idemrt.Querier) error { return q.Reserve(ctxOf(t), r, t0) }))
}

// entry reads key's ledger row as operators see it (LedgerPage).
func entry(t *testing.T, st Store, key string) (idem.LedgerEntry, bool) {
	t.Helper()
	all, err := st.Auto().Ledger(ctxOf(t))
	must(t, err)
	for _, e := range all {
		if e.Key == key {
			return e, true
		}
	}
	return idem.LedgerEntry{}, false
}

func mustEntry(t *testing.T, st Store, key string) idem.LedgerEntry {
	t.Helper()
	e, ok := entry(t, st, key)
	if !ok {
		t.Fatalf("ledger has no row %s", key)
	}
	return e
}

// keysOf returns the keys of a set, sorted.
func keysOf(set map[string]bool) []string {
	var out []string
	for k, ok := range set {
		if ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func wantKeys(t *testing.T, what string, got map[string]bool, want ...string) {
	t.Helper()
	if g := keysOf(got); !slices.Equal(g, want) {
		t.Errorf("%s: got keys %q, want %q", what, g, want)
	}
}

func claim(t *testing.T, st Store, owner string, now, until time.Time, keys ...string) map[string]bool {
	t.Helper()
	got, err := st.Auto().ClaimMany(ctxOf(t), keys, owner, now, until)
	must(t, err)
	return got
}

func complete(t *testing.T, st Store, owner string, now time.Time, keys ...string) map[string]bool {
	t.Helper()
	results := make([][]byte, len(keys))
	for i, k := range keys {
		results[i] = []byte("result of " + k)
	}
	got, err := st.Auto().CompleteMany(ctxOf(t), keys, results, owner, now)
	must(t, err)
	return got
}

func release(t *testing.T, st Store, r idemrt.Release) string {
	t.Helper()
	if r.Now.IsZero() {
		r.Now = t0
	}
	var state string
	must(t, st.InTx(ctxOf(t), func(q idemrt.Querier) (err error) {
		state, err = q.Release(ctxOf(t), r)
		return err
	}))
	return state
}

func pendingKeys(t *testing.T, st Store, job string, now time.Time) []string {
	t.Helper()
	rows, err := st.Auto().Pending(ctxOf(t), job, now, "", 1000)
	must(t, err)
	var out []string
	for _, r := range rows {
		out = append(out, r.Key)
	}
	return out
}
