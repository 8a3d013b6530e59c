package crashsim

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A scenario schema keeps the pools given back for its next
// incarnations, never a pile: their sessions together at most
// simIdleSessions (pools given back beside one another once left their
// sessions idle for good, and three test processes at once ran the server
// out of sessions), each pool counted as one at least.
func TestSchemaKeepsBoundedIdlePools(t *testing.T) {
	newPool := func(maxConns int32) *simIncPool {
		cfg, err := pgxpool.ParseConfig("postgres://nobody@127.0.0.1:1/none") // never dialled
		if err != nil {
			t.Fatal(err)
		}
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return &simIncPool{pool: pool, maxConns: maxConns}
	}
	closed := func(p *simIncPool) bool {
		_, err := p.pool.Acquire(context.Background())
		return err != nil && err.Error() == "closed pool"
	}
	s := &simSchema{}
	var kept []*simIncPool
	for range simIdleSessions + 1 {
		p := newPool(4)
		kept = append(kept, p)
		s.keepIdle(p)
	}
	if !closed(kept[0]) {
		t.Errorf("%d pools given back, the oldest still open: more than %d sessions idle", len(kept), simIdleSessions)
	}
	for _, p := range kept[1:] {
		if closed(p) {
			t.Errorf("a pool given back within the bound was closed")
		}
	}
	small := newPool(2)
	s.keepIdle(small)
	if got := s.takeIdle(2); got != small {
		t.Errorf("takeIdle(2) = %p, want the pool of 2 given back (%p)", got, small)
	}
	if got := s.takeIdle(4); got != kept[len(kept)-1] {
		t.Errorf("takeIdle(4) = %p, want the pool of 4 given back last (%p)", got, kept[len(kept)-1])
	}
	if got := s.takeIdle(3); got != nil {
		t.Errorf("takeIdle(3) with no pool of 3 kept = %p, want nil", got)
	}
	s.closeIdle()
	for _, p := range kept[1 : len(kept)-1] {
		if !closed(p) {
			t.Error("closeIdle left a kept pool open")
		}
	}
}

// A scenario broken by a refused session says so, and what to run fewer
// of; any other broken scenario gets no such hint.
func TestOutOfSessionsHint(t *testing.T) {
	refused := []string{
		"end: 0 rows, want one per key (9)",
		`end: the last convergence run returned: failed to connect: server error: FATAL: sorry, too many clients already (SQLSTATE 53300)`,
	}
	hint := outOfSessionsHint(refused)
	for _, want := range []string{"refused a session", "go test -p", EnvWorkers, "max_connections"} {
		if !strings.Contains(hint, want) {
			t.Errorf("hint %q does not say %q", hint, want)
		}
	}
	if hint := outOfSessionsHint(refused[:1]); hint != "" {
		t.Errorf("hint for a scenario the server did not refuse: %q", hint)
	}
}
