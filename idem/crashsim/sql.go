package crashsim

// Crash points at the driver level: every SQL statement a crashing worker
// sends is reported to the scenario's hook before it runs and after it has
// run (for a query, after its rows are closed: SQLite commits an
// autocommit statement then). The crash simulation can so stop a worker at
// every durable boundary, not only at the engine's named points, and find a
// durable step hidden between two of them. PostgreSQL gets the same through
// a pgx tracer (postgres.go).

import (
	"context"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgen/idemgen/idem/idempg"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// simStatements classifies one connection's statements: "BEGIN", "COMMIT",
// "ROLLBACK", "tx INSERT INTO t" inside a transaction, "auto UPDATE t"
// outside one. It notes the tables each transaction writes, for its COMMIT.
type simStatements struct {
	mu    sync.Mutex
	inTx  bool
	wrote *simWrites // since BEGIN; nil outside a transaction
}

// simWrites are the tables a transaction wrote, as its COMMIT reports them
// to the hook (Job.changed): the checks after it read again only what
// may have changed. any is a statement whose table is not plain.
type simWrites struct {
	tables []string
	any    bool
}

// note adds a statement's table when it writes one.
func (w *simWrites) note(words []string) {
	switch strings.ToUpper(words[0]) {
	case "SELECT", "SAVEPOINT", "RELEASE", "SET":
		// A read, or the transaction's own bookkeeping.
	case "UPDATE":
		w.add(words, 1)
	case "INSERT", "DELETE":
		w.add(words, 2)
	default:
		w.any = true // WITH ... and anything else: not plainly one table
	}
}

func (w *simWrites) add(words []string, i int) {
	if i >= len(words) {
		w.any = true
		return
	}
	w.tables = append(w.tables, simTableName(words[i]))
}

// simTableName is a statement's table word without its schema, quotes or
// the column list glued to it: `"s".orders(` is orders.
func simTableName(word string) string {
	word, _, _ = strings.Cut(word, "(")
	if i := strings.LastIndexByte(word, '.'); i >= 0 {
		word = word[i+1:]
	}
	return strings.Trim(word, `"`)
}

// classify returns the statement's detail, or "" for statements that are
// not the job's (a pool's ping, a PRAGMA), and for a COMMIT the tables its
// transaction wrote (nil when its BEGIN was not seen).
func (s *simStatements) classify(query string) (string, *simWrites) {
	for {
		query = strings.TrimSpace(query)
		if !strings.HasPrefix(query, "--") {
			break
		}
		_, rest, ok := strings.Cut(query, "\n")
		if !ok {
			return "", nil
		}
		query = rest
	}
	words := strings.Fields(query)
	if len(words) == 0 {
		return "", nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// "BEGIN; SET LOCAL lock_timeout = ..." (idemrt.PgBegin) begins a
	// transaction too: the verb is the first word without its semicolon.
	switch verb := strings.TrimSuffix(strings.ToUpper(words[0]), ";"); verb {
	case "PRAGMA":
		return "", nil // connection settings (the store's busy timeout), not the job's work
	case "SELECT":
		if strings.HasPrefix(query, idempg.LockBound) {
			return "", nil // a one-statement transaction's lock bound (idempg.Store.InStatement), its setting
		}
	case "BEGIN":
		s.inTx = true
		s.wrote = &simWrites{}
		return "BEGIN", nil
	case "COMMIT", "END":
		s.inTx = false
		wrote := s.wrote // nil when the BEGIN was not seen: Job.changed takes it as all
		s.wrote = nil
		return "COMMIT", wrote
	case "ROLLBACK":
		s.inTx = false
		if len(words) < 2 || !strings.EqualFold(words[1], "TO") {
			s.wrote = nil // ROLLBACK TO a savepoint goes on with the transaction
		}
		return "ROLLBACK", nil
	}
	if s.wrote != nil {
		s.wrote.note(words)
	}
	prefix := "auto "
	if s.inTx {
		prefix = "tx "
	}
	return prefix + strings.Join(words[:min(3, len(words))], " "), nil
}

// simWritesKey carries a COMMIT's simWrites to the hook's call after it.
type simWritesKey struct{}

// withWrites is ctx carrying w (nil: ctx).
func withWrites(ctx context.Context, w *simWrites) context.Context {
	if w == nil {
		return ctx
	}
	return context.WithValue(ctx, simWritesKey{}, w)
}

type simBeganKey struct{}

// withBegan is the context of a statement's pointSQLAfter hit: ctx,
// carrying when the statement began to run (once its pointSQLBefore hit
// returned), so that a family can see how long it waited.
func withBegan(ctx context.Context, began time.Time) context.Context {
	return context.WithValue(ctx, simBeganKey{}, began)
}

// simStatementTook is how long the statement whose pointSQLAfter hit has
// ctx ran (0 at any other hit).
func simStatementTook(ctx context.Context) time.Duration {
	if began, ok := ctx.Value(simBeganKey{}).(time.Time); ok {
		return time.Since(began)
	}
	return 0
}

// simWritesOf is what withWrites put in ctx, or nil.
func simWritesOf(ctx context.Context) *simWrites {
	w, _ := ctx.Value(simWritesKey{}).(*simWrites)
	return w
}

// simConn reports a database/sql driver connection's statements to a hook.
//
// Every call into the driver (statements, rows, transaction ends, closes)
// runs inside the connector's gate, so a kill never closes a connection
// under a call still running on another goroutine: with any driver that is
// a use after close, and with one that runs SQLite in memory it maps, a
// fault that takes the whole test process down.
type simConn struct {
	driver.Conn
	hook   idemtest.CrashHook
	stmts  simStatements
	mu     sync.Mutex
	open   map[*simStmt]bool // prepared and not yet closed
	closed bool              // by its pool, or by kill
	gate   *sync.RWMutex     // the connector's: held for reading in every driver call
	dead   *atomic.Bool      // the connector's: killed
	dying  *atomic.Bool      // the connector's: a kill has begun (interruptible)
	// warm takes the connection back when its incarnation closes it
	// outside a transaction, for the next (sqlitewarm.go); nil: closed.
	warm *simSQLiteSlot
}

// interruptible is ctx as the driver gets it: its Err reports the
// connector's kill as soon as the kill begins. The embedded SQLite checks
// Err while it waits for another connection's write lock and while a
// statement runs, so a call under way when its process is killed returns
// at once, as the process's death ends it, instead of when its busy
// timeout runs out: the kill waits for the calls under way (the gate), and
// a sibling caller waiting for the lock the crashed worker holds held a
// kill for the burst family's 10 s wait bound. (The driver reads only Err;
// Done and the deadline stay the caller's.)
func (c *simConn) interruptible(ctx context.Context) context.Context {
	return simDyingCtx{ctx, c.dying}
}

// errProcessGone is what a crashed incarnation's connections answer.
var errProcessGone = errors.New("simulated crash: this process is gone")

type simDyingCtx struct {
	context.Context
	dying *atomic.Bool
}

func (d simDyingCtx) Err() error {
	if d.dying.Load() {
		return errProcessGone
	}
	return d.Context.Err()
}

// driverCall runs fn inside the connector's gate (killableConnector.gate).
func (c *simConn) driverCall(fn func() error) error {
	c.gate.RLock()
	defer c.gate.RUnlock()
	return fn()
}

// Close is database/sql giving the connection up (its pool shrinking, the
// incarnation's handle closed). After a kill there is nothing left to
// close, and the gate would park the caller.
func (c *simConn) Close() error {
	if c.dead.Load() {
		return nil
	}
	return c.driverCall(func() error {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			return nil
		}
		c.closed = true
		if c.warm == nil {
			return c.Conn.Close()
		}
		for st := range c.open {
			_ = st.Stmt.Close()
		}
		c.open = nil
		if c.warm.keep(c.Conn) {
			return nil
		}
		defer c.warm.closed()
		return c.Conn.Close()
	})
}

// kill closes the connection under its user's feet, statements first:
// SQLite keeps a connection (and the transaction it holds) open while a
// statement of it is unfinalized. The caller holds the gate.
func (c *simConn) kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.closed = true
	for st := range c.open {
		_ = st.Stmt.Close()
	}
	_ = c.Conn.Close()
	if c.warm != nil {
		c.warm.closed()
	}
}

// around runs one statement between its two hook calls.
func (c *simConn) around(ctx context.Context, query string, run func() error) error {
	detail, wrote := c.stmts.classify(query)
	if c.hook == nil || detail == "" {
		return c.driverCall(run)
	}
	if err := c.hook(ctx, pointSQLBefore, detail); err != nil {
		return err
	}
	began := time.Now()
	if err := c.driverCall(run); err != nil {
		return err
	}
	return c.hook(withBegan(withWrites(ctx, wrote), began), pointSQLAfter, detail)
}

func (c *simConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	execer, ok := c.Conn.(driver.ExecerContext)
	if !ok || len(args) > 0 {
		return nil, driver.ErrSkip // database/sql prepares it: reported by simStmt
	}
	var res driver.Result
	err := c.around(ctx, query, func() (err error) {
		res, err = execer.ExecContext(c.interruptible(ctx), query, args)
		return err
	})
	return res, err
}

func (c *simConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var s *simStmt
	err := c.driverCall(func() error {
		st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(c.interruptible(ctx), query)
		if err != nil {
			return err
		}
		// Registered inside the gate, so a kill finalizes it too.
		s = &simStmt{Stmt: st, conn: c, query: query}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open == nil {
			c.open = map[*simStmt]bool{}
		}
		c.open[s] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (c *simConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var tx driver.Tx
	err := c.driverCall(func() (err error) {
		tx, err = c.Conn.(driver.ConnBeginTx).BeginTx(c.interruptible(ctx), opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return simTx{tx, c}, nil
}

// simTx ends a transaction inside the gate.
type simTx struct {
	tx   driver.Tx
	conn *simConn
}

func (t simTx) Commit() error   { return t.conn.driverCall(t.tx.Commit) }
func (t simTx) Rollback() error { return t.conn.driverCall(t.tx.Rollback) }

func (c *simConn) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

// simStmt reports a prepared statement's executions.
type simStmt struct {
	driver.Stmt
	conn  *simConn
	query string
}

func (s *simStmt) Close() error {
	return s.conn.driverCall(func() error {
		s.conn.mu.Lock()
		defer s.conn.mu.Unlock()
		if !s.conn.open[s] {
			return nil // closed with its connection
		}
		delete(s.conn.open, s)
		return s.Stmt.Close()
	})
}

// NumInput asks the driver, which reads the prepared statement.
func (s *simStmt) NumInput() (n int) {
	_ = s.conn.driverCall(func() error {
		n = s.Stmt.NumInput()
		return nil
	})
	return n
}

func (s *simStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	var res driver.Result
	err := s.conn.around(ctx, s.query, func() (err error) {
		res, err = s.Stmt.(driver.StmtExecContext).ExecContext(s.conn.interruptible(ctx), args)
		return err
	})
	return res, err
}

// QueryContext reports the statement as run once its rows are closed.
func (s *simStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	detail, wrote := s.conn.stmts.classify(s.query)
	hook := s.conn.hook
	after := func() error { return nil }
	if hook != nil && detail != "" {
		if err := hook(ctx, pointSQLBefore, detail); err != nil {
			return nil, err
		}
		began := time.Now()
		after = func() error { return hook(withBegan(withWrites(ctx, wrote), began), pointSQLAfter, detail) }
	}
	var rows driver.Rows
	err := s.conn.driverCall(func() (err error) {
		rows, err = s.Stmt.(driver.StmtQueryContext).QueryContext(s.conn.interruptible(ctx), args)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &simRows{Rows: rows, conn: s.conn, after: after}, nil
}

func (s *simStmt) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return s.conn.CheckNamedValue(v)
}

type simRows struct {
	driver.Rows
	conn  *simConn
	after func() error
}

func (r *simRows) Columns() (cols []string) {
	_ = r.conn.driverCall(func() error {
		cols = r.Rows.Columns()
		return nil
	})
	return cols
}

func (r *simRows) Next(dest []driver.Value) error {
	return r.conn.driverCall(func() error { return r.Rows.Next(dest) })
}

func (r *simRows) Close() error {
	if err := r.conn.driverCall(r.Rows.Close); err != nil {
		return err
	}
	return r.after()
}
