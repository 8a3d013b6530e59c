package crashsim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"
)

// simPostgres runs each scenario in a schema of its own, cloned from a
// migrated template schema, and kills crashed sessions server-side.
type simPostgres struct {
	url      string
	admin    *pgxpool.Pool
	template string
	tables   []string
	open     func(*pgxpool.Pool) Store
	mu       sync.Mutex
	free     []*simSchema // emptied scenario schemas, ready for the next one
}

var simSeq atomic.Int64

// Postgres returns nil (and the caller skips) without IDEMGEN_TEST_POSTGRES.
func Postgres(t testing.TB, open func(*pgxpool.Pool) Store) Env {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		return nil
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	admin, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	e := &simPostgres{url: url, admin: admin, open: open}
	if os.Getenv(simChildEnv) != "" {
		return e // a child only attaches to its parent's schema
	}
	e.template = e.newSchema(t)
	pool := e.pool(t, e.template, "idemsim_migrate", nil)
	if err := open(pool).Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	rows, err := admin.Query(ctx, "SELECT table_name FROM information_schema.tables WHERE table_schema = $1 AND table_type = 'BASE TABLE' ORDER BY table_name", e.template)
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

func (e *simPostgres) newSchema(t testing.TB) string {
	schema := fmt.Sprintf("idemsim_%d_%d", time.Now().UnixNano(), simSeq.Add(1))
	if _, err := e.admin.Exec(context.Background(), "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.dropSchema(schema) })
	return schema
}

func (e *simPostgres) dropSchema(schema string) {
	_, _ = e.admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
}

func (e *simPostgres) config(t testing.TB, schema, app string) *pgxpool.Config {
	cfg, err := pgxpool.ParseConfig(e.url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	// The simulation kills clients, never the server: commits need not wait
	// for the disk, and what every session sees is unchanged.
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	cfg.MaxConns = 4
	return cfg
}

func (e *simPostgres) pool(t testing.TB, schema, app string, sqlHook idem.CrashHook) *pgxpool.Pool {
	cfg := e.config(t, schema, app)
	if sqlHook != nil {
		cfg.ConnConfig.Tracer = &simTracer{hook: sqlHook, conns: map[*pgx.Conn]*simStatements{}}
	}
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
	schema := e.newSchema(t)
	for _, table := range e.tables {
		// LIKE ... INCLUDING ALL copies columns, defaults, constraints and indexes.
		if _, err := e.admin.Exec(context.Background(), fmt.Sprintf("CREATE TABLE %s.%s (LIKE %s.%s INCLUDING ALL)", schema, table, e.template, table)); err != nil {
			t.Fatal(err)
		}
	}
	return e.attach(t, schema)
}

func (e *simPostgres) attach(t testing.TB, schema string) simDB {
	cfg := e.config(t, schema, "idemsim_"+schema+"_warm")
	// Incarnations' clients are greeted as on a protocol 3.0 session (simClientConn).
	cfg.ConnConfig.MinProtocolVersion, cfg.ConnConfig.MaxProtocolVersion = "3.0", "3.0"
	obs := e.pool(t, schema, "idemsim_observer", nil)
	s := &simSchema{name: schema, obsPool: obs, obs: e.open(obs).Runtime(), connect: &cfg.ConnConfig.Config}
	t.Cleanup(s.close) // before the schema is dropped
	return &simPostgresDB{env: e, s: s}
}

// simSchema is a scenario schema with what outlives each scenario on it:
// the observer's pool, and the server sessions that incarnations which
// ended cleanly handed back (simBackend).
type simSchema struct {
	name    string
	obsPool *pgxpool.Pool
	obs     idem.Store
	connect *pgconn.Config // opens a new server session on the schema
	mu      sync.Mutex
	idle    []*simBackend
}

func (s *simSchema) close() {
	s.obsPool.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.idle {
		_, _ = b.conn.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
		b.conn.Close()
	}
	s.idle = nil
}

func (s *simSchema) idlePIDs() []uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var pids []uint32
	for _, b := range s.idle {
		pids = append(pids, b.pid)
	}
	return pids
}

type simPostgresDB struct {
	env *simPostgres
	s   *simSchema
}

func (d *simPostgresDB) locator() string { return d.s.name }

// close ends the scenario: any session of a crashed incarnation (or of a
// subprocess) still open is killed; the schema is emptied for the next
// scenario (the test's cleanup drops it).
func (d *simPostgresDB) close() {
	ctx := context.Background()
	_, _ = d.env.admin.Exec(ctx,
		"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE $1 AND NOT pid = ANY($2)",
		"idemsim_"+d.s.name+"_%", d.s.idlePIDs())
	var tables []string
	for _, table := range d.env.tables {
		tables = append(tables, d.s.name+"."+table)
	}
	// DELETE, not TRUNCATE: a handful of rows, and no new relation files.
	if _, err := d.env.admin.Exec(ctx, "DELETE FROM "+strings.Join(tables, "; DELETE FROM ")); err != nil {
		d.s.close()
		d.env.dropSchema(d.s.name)
		return
	}
	d.env.mu.Lock()
	d.env.free = append(d.env.free, d.s)
	d.env.mu.Unlock()
}

func (d *simPostgresDB) observer() idem.Store { return d.s.obs }

func (d *simPostgresDB) incarnation(t testing.TB, sqlHook idem.CrashHook) (idem.Store, func(), func()) {
	if sqlHook == nil {
		return d.s.obs, func() {}, func() {} // a helper outside the faults: the observer's pool serves
	}
	// A new process: a new pool of new pgx connections, each over a server
	// session that no other incarnation holds (simBackend).
	inc := &simSessions{s: d.s}
	cfg := d.env.config(t, d.s.name, fmt.Sprintf("idemsim_%s_%d", d.s.name, simSeq.Add(1)))
	cfg.ConnConfig.Tracer = &simTracer{hook: sqlHook, conns: map[*pgx.Conn]*simStatements{}}
	cfg.ConnConfig.DialFunc = inc.dial
	cfg.ConnConfig.TLSConfig, cfg.ConnConfig.Fallbacks = nil, nil
	cfg.ConnConfig.MinProtocolVersion, cfg.ConnConfig.MaxProtocolVersion = "3.0", "3.0"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	kill := func() {
		// The process died: its sessions end, open transactions abort and
		// locks drop. The pool is abandoned, never closed (Close would wait
		// for the parked goroutine's connection).
		_, _ = d.env.admin.Exec(context.Background(),
			"SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", inc.kill())
	}
	return d.env.open(pool).Runtime(), kill, pool.Close
}

// ---- server sessions handed from one incarnation to the next ----
//
// A new server session costs PostgreSQL far more than the statements a
// scenario runs (a fork, cold catalog caches, its exit), and the
// simulation starts hundreds of incarnations. So an incarnation's pgx
// connections dial no socket: simSessions.dial hands each one a session
// an incarnation that ended cleanly gave back (or a new one), and answers
// its startup message with what the server said when the session began. A
// session goes back only if its client closed it idle, outside any
// transaction, with every request answered; its prepared statements are
// then deallocated, as a session pooler resets a session. A crashed
// incarnation's sessions are all terminated, never reused.

// simBackend is a started server session on a scenario schema.
type simBackend struct {
	conn     net.Conn
	pid      uint32
	greeting []byte // AuthenticationOk, the parameter statuses, the key data, ReadyForQuery
}

func (s *simSchema) take(ctx context.Context) (*simBackend, error) {
	s.mu.Lock()
	if n := len(s.idle); n > 0 {
		b := s.idle[n-1]
		s.idle = s.idle[:n-1]
		s.mu.Unlock()
		return b, nil
	}
	s.mu.Unlock()
	pc, err := pgconn.ConnectConfig(ctx, s.connect)
	if err != nil {
		return nil, err
	}
	h, err := pc.Hijack()
	if err != nil {
		return nil, err
	}
	b := &simBackend{conn: h.Conn, pid: h.PID}
	msgs := []pgproto3.BackendMessage{&pgproto3.AuthenticationOk{}}
	for _, name := range slices.Sorted(maps.Keys(h.ParameterStatuses)) {
		msgs = append(msgs, &pgproto3.ParameterStatus{Name: name, Value: h.ParameterStatuses[name]})
	}
	msgs = append(msgs, &pgproto3.BackendKeyData{ProcessID: h.PID, SecretKey: h.SecretKey}, &pgproto3.ReadyForQuery{TxStatus: 'I'})
	for _, m := range msgs {
		if b.greeting, err = m.Encode(b.greeting); err != nil {
			h.Conn.Close()
			return nil, err
		}
	}
	return b, nil
}

// give takes a session back from a client that closed it cleanly, with
// its prepared statements deallocated.
func (s *simSchema) give(b *simBackend) {
	if err := b.reset(); err != nil {
		b.conn.Close()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.idle = append(s.idle, b)
}

func (b *simBackend) reset() error {
	_ = b.conn.SetDeadline(time.Now().Add(time.Minute))
	defer b.conn.SetDeadline(time.Time{})
	q, _ := (&pgproto3.Query{String: "DEALLOCATE ALL"}).Encode(nil)
	if _, err := b.conn.Write(q); err != nil {
		return err
	}
	var (
		f      simFrames
		buf    [512]byte
		done   bool
		failed bool
	)
	for !done {
		n, err := b.conn.Read(buf[:])
		f.feed(buf[:n], func(typ byte, _ int) { failed = failed || typ == 'E' }, func(typ, first byte) {
			if typ == 'Z' {
				done, failed = true, failed || first != 'I'
			}
		})
		if err != nil && !done {
			return err
		}
	}
	if failed {
		return errors.New("session reset failed")
	}
	return nil
}

// simSessions are the server sessions one incarnation's connections hold.
type simSessions struct {
	s    *simSchema
	mu   sync.Mutex
	live map[*simClientConn]bool
	dead bool
}

func (inc *simSessions) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	b, err := inc.s.take(ctx)
	if err != nil {
		return nil, err
	}
	c := &simClientConn{Conn: b.conn, inc: inc, b: b, greeting: b.greeting}
	inc.mu.Lock()
	defer inc.mu.Unlock()
	if inc.dead {
		b.conn.Close()
		return nil, errors.New("simulated crash: this process is gone")
	}
	if inc.live == nil {
		inc.live = map[*simClientConn]bool{}
	}
	inc.live[c] = true
	return c, nil
}

// kill marks the incarnation dead and returns the server pids of every
// session it still holds, for pg_terminate_backend.
func (inc *simSessions) kill() []uint32 {
	inc.mu.Lock()
	defer inc.mu.Unlock()
	inc.dead = true
	var pids []uint32
	for c := range inc.live {
		pids = append(pids, c.b.pid)
	}
	inc.live = nil
	return pids
}

// release ends a client's hold on its session: back to the schema's idle
// sessions if the client left it clean and the incarnation was not killed,
// else closed.
func (inc *simSessions) release(c *simClientConn, clean bool) {
	inc.mu.Lock()
	held := inc.live[c]
	delete(inc.live, c)
	inc.mu.Unlock()
	if held && clean {
		inc.s.give(c.b)
		return
	}
	c.b.conn.Close() // the server aborts what the session had open
}

// simClientConn is the net.Conn a pgx connection of an incarnation gets:
// it answers the startup message with the session's greeting, then passes
// the protocol through, following message boundaries to know the state
// the client leaves the session in, and keeps the client's Terminate from
// the server.
type simClientConn struct {
	net.Conn
	inc      *simSessions
	b        *simBackend
	mu       sync.Mutex
	greeting []byte // still to be read by the client
	started  bool
	w, r     simFrames
	pending  int  // Syncs and simple queries the server has not answered yet
	status   byte // the transaction status in the last ReadyForQuery
	reading  bool
	quit     bool // the client sent Terminate
	broken   bool
	closed   bool
}

const simProtocol30 = 196608

func (c *simClientConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed // the session may serve another client by now
	}
	if !c.started {
		c.started = true
		ok := len(p) >= 8 && int(binary.BigEndian.Uint32(p)) == len(p) && binary.BigEndian.Uint32(p[4:]) == simProtocol30
		c.broken = c.broken || !ok
		c.mu.Unlock()
		if !ok {
			return 0, errors.New("simulated session: the first message is not a protocol 3.0 startup message")
		}
		return len(p), nil // answered by the greeting
	}
	if c.quit {
		c.mu.Unlock()
		return len(p), nil
	}
	cut := len(p)
	c.w.feed(p, func(typ byte, at int) {
		switch {
		case c.quit:
		case typ == 'S' || typ == 'Q':
			c.pending++
		case typ == 'X':
			c.quit, cut = true, at
		}
	}, nil)
	c.mu.Unlock()
	n, err := c.Conn.Write(p[:cut])
	if err != nil {
		c.mu.Lock()
		c.broken = true
		c.mu.Unlock()
		return n, err
	}
	return len(p), nil
}

func (c *simClientConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return 0, net.ErrClosed
	}
	if len(c.greeting) > 0 {
		n := copy(p, c.greeting)
		c.greeting = c.greeting[n:]
		c.mu.Unlock()
		return n, nil
	}
	c.reading = true
	c.mu.Unlock()
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reading = false
	c.broken = c.broken || err != nil
	c.r.feed(p[:n], nil, func(typ, first byte) {
		if typ == 'Z' {
			c.pending--
			c.status = first
		}
	})
	return n, err
}

func (c *simClientConn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	clean := c.quit && !c.broken && !c.reading && c.pending == 0 && c.status == 'I' && c.w.idle() && c.r.idle()
	c.mu.Unlock()
	c.inc.release(c, clean)
	return nil
}

func (c *simClientConn) SetDeadline(t time.Time) error {
	return c.deadline(func() error { return c.Conn.SetDeadline(t) })
}

func (c *simClientConn) SetReadDeadline(t time.Time) error {
	return c.deadline(func() error { return c.Conn.SetReadDeadline(t) })
}

func (c *simClientConn) SetWriteDeadline(t time.Time) error {
	return c.deadline(func() error { return c.Conn.SetWriteDeadline(t) })
}

func (c *simClientConn) deadline(set func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return net.ErrClosed
	}
	return set()
}

// simFrames follows the message boundaries of one direction of the
// protocol after the startup message: a type byte, a length that counts
// itself, the body.
type simFrames struct {
	typ  byte
	head int    // bytes of the current message's type and length seen
	size uint32 // the length, as it comes in
	left int    // bytes of the current message's body still to come
	body int    // the body's length
}

func (f *simFrames) idle() bool { return f.head == 0 && f.left == 0 }

// feed follows p: begin is called at each message's type byte with its
// offset in p, first with a message's first body byte (0 for an empty body).
func (f *simFrames) feed(p []byte, begin func(typ byte, at int), first func(typ, b byte)) {
	for i := 0; i < len(p); {
		switch {
		case f.left > 0:
			if f.left == f.body && first != nil {
				first(f.typ, p[i])
			}
			n := min(f.left, len(p)-i)
			f.left -= n
			i += n
		case f.head == 0:
			f.typ, f.head, f.size = p[i], 1, 0
			if begin != nil {
				begin(f.typ, i)
			}
			i++
		default:
			f.size = f.size<<8 | uint32(p[i])
			f.head++
			i++
			if f.head == 5 {
				f.head = 0
				f.body = max(int(f.size)-4, 0)
				f.left = f.body
				if f.body == 0 && first != nil {
					first(f.typ, 0)
				}
			}
		}
	}
}

// simTracer reports every statement of an incarnation's connections to the
// scenario's hook, as simConn does for SQLite. A crash in TraceQueryStart
// parks the worker before the statement is sent; in TraceQueryEnd, after
// the server ran it (for COMMIT: after it is durable).
type simTracer struct {
	hook  idem.CrashHook
	mu    sync.Mutex
	conns map[*pgx.Conn]*simStatements
}

type simTraceKey struct{}

func (t *simTracer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	s := t.conns[conn]
	if s == nil {
		s = &simStatements{}
		t.conns[conn] = s
	}
	t.mu.Unlock()
	detail := s.classify(data.SQL)
	if detail != "" {
		_ = t.hook(ctx, pointSQLBefore, detail)
	}
	return context.WithValue(ctx, simTraceKey{}, detail)
}

func (t *simTracer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if detail, _ := ctx.Value(simTraceKey{}).(string); detail != "" && data.Err == nil {
		_ = t.hook(ctx, pointSQLAfter, detail)
	}
}
