package crashsim

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// A scenario schema keeps one pool for its next incarnation, never a pile:
// pools given back beside one another (two workers ending together) left
// their sessions idle for good, and three test processes at once ran the
// server out of sessions.
func TestSchemaKeepsOneIdlePool(t *testing.T) {
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
	first, second := newPool(4), newPool(4)
	s.keepIdle(first)
	s.keepIdle(second)
	if !closed(first) {
		t.Error("the pool given back first is still open beside the second")
	}
	if got := s.takeIdle(4); got != second {
		t.Errorf("takeIdle(4) = %p, want the pool given back last (%p)", got, second)
	}
	if got := s.takeIdle(4); got != nil {
		t.Errorf("takeIdle(4) after taking the one kept = %p, want nil", got)
	}
	small := newPool(2)
	s.keepIdle(small)
	if got := s.takeIdle(4); got != nil {
		t.Errorf("takeIdle(4) with a pool of 2 kept = %p, want nil", got)
	}
	if !closed(small) {
		t.Error("a kept pool of another size is left open after a take that could not use it")
	}
	third := newPool(4)
	s.keepIdle(third)
	s.closeIdle()
	if !closed(third) {
		t.Error("closeIdle left the kept pool open")
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
