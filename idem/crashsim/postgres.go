package crashsim

import (
	"context"

	"fmt"

	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// simPostgres runs each scenario in a schema of its own, cloned from a
// migrated template schema, and kills crashed sessions server-side.
//
// A crashed incarnation's sessions die with it: they are closed and
// terminated, never handed on. An incarnation that finished its work with
// every connection back in its pool gives the pool back instead (see
// simIncPool), as a connection pooler such as PgBouncer hands a server
// session from one client to the next: idle, outside any transaction,
// and reset as DISCARD ALL resets it before the next client has it. A new
// session costs PostgreSQL a fork, and a matrix opens thousands. (An earlier version also reused the
// sessions of crashed incarnations, behind a hijacked connection; it lost
// a reply about one run in twenty-five, and a proof must never hang.)
type simPostgres struct {
	db       *idemtest.Postgres // the test's hold on the database: its admin pool and its schemas
	template string
	tables   []string
	open     func(*pgxpool.Pool) Store
	mu       sync.Mutex
	free     []*simSchema // emptied scenario schemas, ready for the next one
}

// simSeq numbers incarnations, whose sessions are named after it.
var simSeq atomic.Int64

// Postgres returns nil (and the caller skips) without IDEMGEN_TEST_POSTGRES.
// Its schemas come from idem/idemtest, which drops them when t ends and
// drops those of test processes that died before they could.
func Postgres(t testing.TB, open func(*pgxpool.Pool) Store) Env {
	if os.Getenv(idemtest.EnvPostgres) == "" {
		return nil
	}
	ctx := context.Background()
	e := &simPostgres{db: idemtest.OpenPostgres(t), open: open}
	if os.Getenv(simChildEnv) != "" {
		return e // a child only attaches to its parent's schema
	}
	e.template = e.db.NewSchema(t)
	pool := e.pool(t, e.template, "idemsim_migrate")
	if err := open(pool).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	rows, err := e.admin().Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name", e.template)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		e.tables = append(e.tables, name)
	}
	return e
}

func (e *simPostgres) name() string { return "postgres" }

func (e *simPostgres) admin() *pgxpool.Pool { return e.db.Admin() }

func (e *simPostgres) config(schema, app string) *pgxpool.Config {
	cfg := e.db.Config(schema)
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	// The simulation kills clients, never the server: commits need not wait
	// for the disk, and what every session sees is unchanged.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	// A plan is made once per statement and session, not at each of its
	// first executions: the tables hold a handful of rows, and the server's
	// planning was a tenth of the matrix's CPU. What a statement does is
	// unchanged.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	cfg.MaxConns = min(cfg.MaxConns, 4) // one under idemtest.EnvPoolOne
	return cfg
}

// pool opens a pool outside the faults (the template's migration, a
// scenario's observer).
func (e *simPostgres) pool(t testing.TB, schema, app string) *pgxpool.Pool {
	cfg := e.config(schema, app)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return pool
}

// fresh hands out a scenario schema: a recycled one (emptied when its
// scenario closed) or a new copy of the template.
func (e *simPostgres) fresh(t testing.TB) simDB {
	e.mu.Lock()
	if n := len(e.free); n > 0 {
		s := e.free[n-1]
		e.free = e.free[:n-1]
		e.mu.Unlock()
		return &simPostgresDB{env: e, s: s}
	}
	e.mu.Unlock()
	schema := e.db.NewSchema(t)
	for _, table := range e.tables {
		// LIKE ... INCLUDING ALL copies columns, defaults, constraints and indexes.
		if _, err := e.admin().Exec(context.Background(), fmt.Sprintf("CREATE TABLE %s.%s (LIKE %s.%s INCLUDING ALL)", schema, table, e.template, table)); err != nil {
			t.Fatal(err)
		}
	}
	return e.attach(t, schema)
}

func (e *simPostgres) attach(t testing.TB, schema string) simDB {
	obs := e.pool(t, schema, "idemsim_obs_"+schema)
	s := &simSchema{name: schema, obsPool: obs, obs: e.open(obs).Runtime()}
	t.Cleanup(func() { // before the schema is dropped
		obs.Close()
		s.closeIdle()
	})
	return &simPostgresDB{env: e, s: s}
}

// simSchema is a scenario schema with the observer's pool, which outlives
// each scenario on it, and the pools finished incarnations gave back for
// the next: newest last, their sessions together at most
// simIdleSessions. Not every one given back: incarnations that ended
// together (two workers, a burst's smaller pool) would otherwise leave
// their sessions idle for good, and three test processes at once ran the
// server out of sessions ("too many clients") at stop 47. Not only the
// newest either: a session costs the server a fork (6 ms of its CPU here,
// pgbench -C), and closing the older of two workers' pools opened a
// hundred sessions more per matrix of the stress spec's job.
type simSchema struct {
	name    string
	obsPool *pgxpool.Pool
	obs     idem.Store
	mu      sync.Mutex
	idle    []*simIncPool
	bin     []*simBinned // sessions of crashed incarnations, reset (pgsessions.go)
}

// simIdleSessions bounds the sessions a schema keeps idle: one pool's
// most (config), as when it kept one pool.
const simIdleSessions = 4

// takeIdle returns the newest pool given back that has maxConns
// connections, or nil.
func (s *simSchema) takeIdle(maxConns int32) *simIncPool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.idle) - 1; i >= 0; i-- {
		if p := s.idle[i]; p.maxConns == maxConns {
			s.idle = slices.Delete(s.idle, i, i+1)
			return p
		}
	}
	return nil
}

// idleSessions counts the sessions the schema keeps idle: its pools
// given back and its bin. The caller holds s.mu.
func (s *simSchema) idleSessions() int32 {
	sessions := int32(len(s.bin))
	for _, q := range s.idle {
		sessions += q.idleSessions()
	}
	return sessions
}

// roomForIdle reports whether the schema may keep one more idle session.
func (s *simSchema) roomForIdle() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idleSessions() < simIdleSessions
}

// keepBinned keeps b in the bin, if there is room still.
func (s *simSchema) keepBinned(b *simBinned) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.idleSessions() >= simIdleSessions {
		return false
	}
	s.bin = append(s.bin, b)
	return true
}

// takeBinned takes the session binned last, or nil.
func (s *simSchema) takeBinned() *simBinned {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.bin)
	if n == 0 {
		return nil
	}
	b := s.bin[n-1]
	s.bin = s.bin[:n-1]
	return b
}

// keepIdle keeps p for the schema's next incarnations, closing the oldest
// pools kept while their sessions, the bin's and p's are more than
// simIdleSessions (p itself is kept whatever its size).
func (s *simSchema) keepIdle(p *simIncPool) {
	s.mu.Lock()
	s.idle = append(s.idle, p)
	sessions := s.idleSessions()
	var closing []*simIncPool
	for len(s.idle) > 1 && sessions > simIdleSessions {
		sessions -= s.idle[0].idleSessions()
		closing = append(closing, s.idle[0])
		s.idle = s.idle[1:]
	}
	s.mu.Unlock()
	for _, q := range closing {
		q.pool.Close()
	}
}

// closeIdle closes the pools given back and the binned sessions (the
// schema is going away).
func (s *simSchema) closeIdle() {
	s.mu.Lock()
	idle, bin := s.idle, s.bin
	s.idle, s.bin = nil, nil
	s.mu.Unlock()
	for _, p := range idle {
		p.pool.Close()
	}
	for _, b := range bin {
		b.close()
	}
}

// idlePIDs are the server processes of the sessions of the pools given back.
func (s *simSchema) idlePIDs() []int32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	pids := []int32{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range s.idle {
		for _, c := range p.pool.AcquireAllIdle(ctx) {
			pids = append(pids, int32(c.Conn().PgConn().PID()))
			c.Release()
		}
	}
	return pids
}

type simPostgresDB struct {
	env   *simPostgres
	s     *simSchema
	conns int32 // the incarnations' pool size when set (limitConns)
	// last is the newest incarnation's pool (family_pool.go holds it).
	last atomic.Pointer[pgxpool.Pool]
	// slow, when set, makes the sessions of the incarnations begun since
	// open slowly (family_pool.go's slow-open).
	slow atomic.Pointer[simSlowOpen]
}

func (d *simPostgresDB) limitConns(n int) { d.conns = int32(n) }

func (d *simPostgresDB) slowOpens() (release func()) { return startSlowOpens(&d.slow) }

func (d *simPostgresDB) locator() string { return d.s.name }

// incarnationApps matches the application_name of every session an
// incarnation (or a subprocess) opened on the scenario's schema.
func (d *simPostgresDB) incarnationApps() string { return "idemsim_" + d.s.name + "_%" }

// close ends the scenario: any session of a crashed incarnation (or of a
// subprocess) still open is killed; the schema is emptied for the next
// scenario (the test's cleanup drops it).
func (d *simPostgresDB) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The pools kept for the next scenario keep their sessions, named
	// after the incarnations that gave them back until the next take them.
	if err := d.env.terminate(ctx, "application_name LIKE $1 AND NOT pid = ANY($2)", d.incarnationApps(), d.s.idlePIDs()); err != nil {
		d.s.closeIdle()
		_ = d.env.db.DropSchema(d.s.name)
		return
	}
	var tables []string
	for _, table := range d.env.tables {
		tables = append(tables, d.s.name+"."+table)
	}
	// DELETE, not TRUNCATE: a handful of rows, and no new relation files.
	if _, err := d.env.admin().Exec(ctx, "DELETE FROM "+strings.Join(tables, "; DELETE FROM ")); err != nil {
		d.s.closeIdle()
		_ = d.env.db.DropSchema(d.s.name)
		return
	}
	d.env.mu.Lock()
	d.env.free = append(d.env.free, d.s)
	d.env.mu.Unlock()
}

// terminate ends the server sessions of this database that match where
// (with its arguments) and waits until they are gone: their open
// transactions aborted, their locks dropped.
func (e *simPostgres) terminate(ctx context.Context, where string, args ...any) error {
	match := "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND " + where
	if _, err := e.admin().Exec(ctx, "SELECT pg_terminate_backend(pid) "+match, args...); err != nil {
		return err
	}
	for {
		var left int
		if err := e.admin().QueryRow(ctx, "SELECT count(*) "+match, args...).Scan(&left); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("crashsim: %d sessions still there after pg_terminate_backend: %w", left, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}

func (d *simPostgresDB) observer() idem.Store { return d.s.obs }

func (d *simPostgresDB) keyRecords(ctx context.Context, table, job string) ([]string, error) {
	return d.column(ctx, "SELECT unit_key FROM "+table+" WHERE job = $1", job)
}

func (d *simPostgresDB) heldSlots(ctx context.Context, table, job, owner string) ([]string, error) {
	return d.column(ctx, "SELECT effect || ' slot ' || slot FROM "+table+
		" WHERE job = $1 AND slot >= 0 AND starts_with(owner, $2) ORDER BY effect, slot", job, owner+"#")
}

func (d *simPostgresDB) ledgerStates(ctx context.Context, table string) ([]idem.LedgerEntry, error) {
	query := fmt.Sprintf(ledgerStatesPage, table, "$1", "$2")
	return idemrt.ReadWholeLedger(ctx, func(ctx context.Context, after string, limit int32) ([]idem.LedgerEntry, error) {
		rows, err := d.s.obsPool.Query(ctx, query, after, limit)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		entries, err := scanLedgerStates(rows)
		if err != nil {
			return nil, err
		}
		return entries, rows.Err()
	})
}

// column reads a query's one text column on the observer's connection.
func (d *simPostgresDB) column(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := d.s.obsPool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	vals, err := scanColumn(rows)
	if err != nil {
		return nil, err
	}
	return vals, rows.Err()
}

// abandon ends every session of a stalled scenario (a read blocked on one
// wakes with an error) and leaves its schema to the test's cleanup.
func (d *simPostgresDB) abandon() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = d.env.terminate(ctx, "application_name LIKE $1", d.incarnationApps())
}

// diagnose lists the scenario's sessions (its incarnations' and its
// observer's) and the locks on its schema or held by those sessions.
func (d *simPostgresDB) diagnose(ctx context.Context) string {
	var b strings.Builder
	sessions := `SELECT pid, application_name, coalesce(state, ''), coalesce(wait_event_type || ':' || wait_event, ''),
  coalesce(extract(epoch FROM now() - state_change)::int, 0), coalesce(left(query, 160), '')
FROM pg_stat_activity
WHERE datname = current_database() AND (application_name LIKE $1 OR application_name = $2)
ORDER BY pid`
	rows, err := d.env.admin().Query(ctx, sessions, d.incarnationApps(), "idemsim_obs_"+d.s.name)
	if err != nil {
		return fmt.Sprintf("pg_stat_activity: %v\n", err)
	}
	b.WriteString("pg_stat_activity (pid, application_name, state, wait, seconds in state, query):\n")
	var pids []int32
	for rows.Next() {
		var (
			pid                  int32
			app, state, wait, qy string
			secs                 int32
		)
		if err := rows.Scan(&pid, &app, &state, &wait, &secs, &qy); err != nil {
			return b.String() + err.Error() + "\n"
		}
		pids = append(pids, pid)
		fmt.Fprintf(&b, "  %d %s %s %s %ds %q\n", pid, app, state, wait, secs, qy)
	}
	if rows.Err() != nil {
		return b.String() + rows.Err().Error() + "\n"
	}
	if len(pids) == 0 {
		b.WriteString("  (no session: the server owes no reply)\n")
	}
	locks := `SELECT l.pid, l.locktype, l.mode, l.granted, coalesce(c.relname, '')
FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation LEFT JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 OR l.pid = ANY($2)
ORDER BY l.granted, l.pid`
	rows, err = d.env.admin().Query(ctx, locks, d.s.name, pids)
	if err != nil {
		return b.String() + fmt.Sprintf("pg_locks: %v\n", err)
	}
	b.WriteString("pg_locks (pid, type, mode, granted, relation):\n")
	for rows.Next() {
		var (
			pid            int32
			typ, mode, rel string
			granted        bool
		)
		if err := rows.Scan(&pid, &typ, &mode, &granted, &rel); err != nil {
			return b.String() + err.Error() + "\n"
		}
		fmt.Fprintf(&b, "  %d %s %s granted=%t %s\n", pid, typ, mode, granted, rel)
	}
	return b.String()
}

func (d *simPostgresDB) incarnation(t testing.TB, sqlHook idemtest.CrashHook) (idem.Store, func(), func()) {
	if sqlHook == nil {
		return d.s.obs, func() {}, func() {} // a helper outside the faults: the observer's pool serves
	}
	// A new process: its pool's sessions are named after the incarnation
	// so a kill finds them all.
	app := fmt.Sprintf("idemsim_%s_%d", d.s.name, simSeq.Add(1))
	maxConns := d.env.config(d.s.name, app).MaxConns
	if d.conns > 0 {
		maxConns = d.conns
	}
	// Slow opens need a pool that opens its sessions: not one given back
	// with sessions open.
	slow := d.slow.Load()
	var p *simIncPool
	if !simCold() && slow == nil {
		p = d.s.takeIdle(maxConns)
	}
	if p == nil || !p.assume(app, sqlHook) {
		p = d.env.newIncPool(t, d.s, app, maxConns, sqlHook)
	}
	p.slow.Store(slow)
	kill := func() {
		// The process died: the OS closes its sockets (a goroutine blocked
		// in a read wakes with an error and parks at its next hit), and the
		// server ends its sessions, or a pooler keeps those idle between
		// statements (pgsessions.go): open transactions abort and locks drop
		// before anything else runs. The pool is abandoned, never closed
		// (Close would wait for the parked goroutine's connection); it holds
		// no session any more.
		p.sessions.kill()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.env.terminate(ctx, "application_name = $1", app); err != nil {
			t.Errorf("crashsim: killing incarnation %s: %v", app, err)
		}
	}
	closeInc := func() {
		if !simCold() && p.giveBack() {
			d.s.keepIdle(p)
			return
		}
		p.pool.Close()
	}
	d.last.Store(p.pool)
	return d.env.open(p.pool).Runtime(), kill, closeInc
}

// simIncPool is an incarnation's pool. Its application name, for the
// sessions it has and those it opens, and its tracer's hook are the
// incarnation's that holds it now.
type simIncPool struct {
	pool     *pgxpool.Pool
	maxConns int32
	sessions *simSessions
	tracer   *simTracer
	mu       sync.Mutex
	app      string
	// slow, when set, makes each session the pool opens wait, before it
	// connects, until its open's context ends or the family lets it go
	// (pgxpool opens on a context an acquire's bound does not end).
	slow atomic.Pointer[simSlowOpen]
}

func (e *simPostgres) newIncPool(t testing.TB, s *simSchema, app string, maxConns int32, sqlHook idemtest.CrashHook) *simIncPool {
	p := &simIncPool{maxConns: maxConns, app: app}
	p.sessions = &simSessions{}
	if !simCold() {
		p.sessions.bin = &simSessionBin{schema: s, name: "idembin_" + s.name, usable: func() bool { return p.slow.Load() == nil }}
	}
	p.tracer = &simTracer{conns: map[*pgx.Conn]*simStatements{}}
	p.tracer.hook.Store(&sqlHook)
	schema := s.name
	cfg := e.config(schema, app)
	cfg.MaxConns = maxConns
	cfg.ConnConfig.Tracer = p.tracer
	cfg.ConnConfig.DialFunc = p.sessions.dial
	cfg.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		if slow := p.slow.Load(); slow != nil {
			slow.wait(ctx)
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		cc.RuntimeParams["application_name"] = p.app
		return nil
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.pool = pool
	return p
}

// idleSessions is how many sessions a pool given back holds, counted as
// one at least: no schema keeps more than simIdleSessions pools either.
func (p *simIncPool) idleSessions() int32 { return max(p.pool.Stat().TotalConns(), 1) }

// simSessionReset is DISCARD ALL but for DEALLOCATE ALL and DISCARD
// PLANS: the pool's statement cache keeps what it prepared, as a pooler's
// server session does, and the server keeps their plans (a plan is never
// state the next incarnation could see: the server replans a statement
// whose tables changed). Replanning at every hand-over cost a fifth of the
// server's CPU in the stress spec's matrix. It ends by naming the session
// after the incarnation that takes it, in the same round trip.
const simSessionReset = "SET SESSION AUTHORIZATION DEFAULT; RESET ALL; CLOSE ALL; UNLISTEN *; SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES; SET application_name = "

// giveBack reports whether the next incarnation on the schema may have
// the pool's sessions: only when every connection is back in the pool
// (the process ended, nothing of it still runs). They are reset when the
// next takes them (assume), in one round trip each, not two.
func (p *simIncPool) giveBack() bool {
	if st := p.pool.Stat(); st.AcquiredConns() > 0 || st.ConstructingConns() > 0 {
		return false
	}
	p.tracer.hook.Store(nil) // what runs next is not the incarnation's work
	p.tracer.forget()
	return true
}

// assume hands the pool to a new incarnation: its sessions reset and
// named after it, its statements reported to hook. False (the pool
// closed) when a reset failed.
func (p *simIncPool) assume(app string, hook idemtest.CrashHook) bool {
	if !p.each(simSessionReset + "'" + app + "'") {
		p.pool.Close()
		return false
	}
	p.mu.Lock()
	p.app = app
	p.mu.Unlock()
	p.tracer.hook.Store(&hook)
	return true
}

// each runs sql on every idle connection of the pool.
func (p *simIncPool) each(sql string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conns := p.pool.AcquireAllIdle(ctx)
	ok := true
	for _, c := range conns {
		if _, err := c.Exec(ctx, sql); err != nil {
			ok = false
		}
		c.Release()
	}
	return ok
}

// simTracer reports every statement of an incarnation's connections to the
// scenario's hook, as simConn does for SQLite. A crash in TraceQueryStart
// parks the worker before the statement is sent; in TraceQueryEnd, after
// the server ran it (for COMMIT: after it is durable).
type simTracer struct {
	hook  atomic.Pointer[idemtest.CrashHook] // nil: nothing is reported
	mu    sync.Mutex
	conns map[*pgx.Conn]*simStatements
}

// forget drops what the tracer knows of its connections (whether each is
// in a transaction): they are idle, and the next incarnation starts afresh.
func (t *simTracer) forget() {
	t.mu.Lock()
	t.conns = map[*pgx.Conn]*simStatements{}
	t.mu.Unlock()
}

type simTraceKey struct{}

// simTraced is a statement under way: the hook it was reported to before it ran.
type simTraced struct {
	hook   *idemtest.CrashHook
	detail string
	wrote  *simWrites // a COMMIT's
	began  time.Time  // once its pointSQLBefore hit returned
}

func (t *simTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return t.before(ctx, conn, data.SQL)
}

func (t *simTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	t.after(ctx, data.Err)
}

// A batch is a one-statement transaction (idempg.Store.InStatement): its
// lock bound, which classify passes over, then the statement, sent in one
// round trip and committed at the batch's end; or a transaction's first
// statement behind its BEGIN and lock bound (idempg.Store.InTx), which the
// batch's end leaves open. It is reported as its statements: each before
// the batch is sent, the last after its end.
func (t *simTracer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	traced := ctx
	for _, q := range data.Batch.QueuedQueries {
		c := t.before(ctx, conn, q.SQL)
		if s, ok := c.Value(simTraceKey{}).(simTraced); ok && s.detail != "" {
			traced = c
		}
	}
	return traced
}

func (t *simTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (t *simTracer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchEndData) {
	t.after(ctx, data.Err)
}

// before reports the statement sql of conn to the hook, before it is sent.
func (t *simTracer) before(ctx context.Context, conn *pgx.Conn, sql string) context.Context {
	hook := t.hook.Load()
	if hook == nil {
		return ctx
	}
	t.mu.Lock()
	s := t.conns[conn]
	if s == nil {
		s = &simStatements{}
		t.conns[conn] = s
	}
	t.mu.Unlock()
	detail, wrote := s.classify(sql)
	if detail != "" {
		_ = (*hook)(ctx, pointSQLBefore, detail)
	}
	return context.WithValue(ctx, simTraceKey{}, simTraced{hook, detail, wrote, time.Now()})
}

// after reports the statement before reported, once it ran without error.
func (t *simTracer) after(ctx context.Context, err error) {
	if traced, ok := ctx.Value(simTraceKey{}).(simTraced); ok && traced.detail != "" && err == nil {
		_ = (*traced.hook)(withBegan(withWrites(ctx, traced.wrote), traced.began), pointSQLAfter, traced.detail)
	}
}

// simSessionsPerProcess is about how many sessions a test process playing
// a matrix holds at its peak: the admin pool's, and per scenario at once
// the observer's, the pools kept for the next incarnations (at most
// simIdleSessions sessions) and the live incarnations'. Most scenarios hold one or two at a time: measured on
// the stress spec's matrix (a poll of pg_stat_activity every 50 ms), 29
// with four workers and 33 with six.
func simSessionsPerProcess() int { return 21 + 2*simWorkers() }
