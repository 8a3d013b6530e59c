package crashsim

import (
	"context"
	"database/sql/driver"
	"sync"

	sqlite3conn "github.com/ncruces/go-sqlite3"
	sqlite3 "github.com/ncruces/go-sqlite3/driver"
)

// The scenario files' SQLite connections keep their prepared statements.
// The observer reads the same few queries (the ledger, progress, the
// destination's rows) at every check, and SQLite spent a third of a
// matrix's CPU parsing them again (go test -cpuprofile on billing's
// invoice_sync: sqlite3RunParser 33%). The incarnations under test send
// the same few statements in every transaction, and their warm
// connections (sqlitewarm.go) serve scenario after scenario: parsing them
// again was a fifth of a matrix's CPU (spec-space seed 38, spec 7: with
// the observer's statements kept, sqlite3Prepare was 27% of the profile,
// 21 points of it the incarnations'). What the job sees is the same:
// database/sql prepares, runs and closes each statement as it does on a
// service's handle, and the driver below hands back the one it parsed
// before.

// simCachingConnector opens SQLite connections whose statements are kept
// for the next query with the same text.
type simCachingConnector struct{ inner driver.Connector }

func newSimCachingConnector(dsn string) (driver.Connector, error) {
	inner, err := (&sqlite3.SQLite{}).OpenConnector(dsn)
	if err != nil {
		return nil, err
	}
	return simCachingConnector{inner}, nil
}

func (c simCachingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &simCachingConn{Conn: conn, idle: map[string]driver.Stmt{}}, nil
}

func (c simCachingConnector) Driver() driver.Driver { return c.inner.Driver() }

// simCachingConn hands out a kept statement when one with the query's
// text is idle; a statement closed by database/sql goes back to idle,
// unless one is idle already (a query prepared twice at once).
type simCachingConn struct {
	driver.Conn
	mu     sync.Mutex
	idle   map[string]driver.Stmt
	closed bool
}

// Raw is the driver's connection, which a warm slot asks whether it is
// outside a transaction (simSQLiteSlot.keep).
func (c *simCachingConn) Raw() *sqlite3conn.Conn {
	return c.Conn.(interface{ Raw() *sqlite3conn.Conn }).Raw()
}

func (c *simCachingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.mu.Lock()
	st, ok := c.idle[query]
	delete(c.idle, query)
	c.mu.Unlock()
	if ok {
		return &simCachedStmt{Stmt: st, conn: c, query: query}, nil
	}
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &simCachedStmt{Stmt: st, conn: c, query: query}, nil
}

// ExecContext is the driver's own: it runs a script of several statements
// (the slot's reset), which a prepared statement would cut at the first.
func (c *simCachingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *simCachingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *simCachingConn) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *simCachingConn) Close() error {
	c.mu.Lock()
	c.closed = true
	idle := c.idle
	c.idle = nil
	c.mu.Unlock()
	for _, st := range idle {
		_ = st.Close()
	}
	return c.Conn.Close()
}

// simCachedStmt is a statement of a simCachingConn.
type simCachedStmt struct {
	driver.Stmt
	conn  *simCachingConn
	query string
}

func (s *simCachedStmt) Close() error {
	s.conn.mu.Lock()
	_, taken := s.conn.idle[s.query]
	keep := !s.conn.closed && !taken
	if keep {
		s.conn.idle[s.query] = s.Stmt
	}
	s.conn.mu.Unlock()
	if keep {
		return nil
	}
	return s.Stmt.Close()
}

// The driver's statement converts and binds its own arguments: what the
// wrapper hides of it, it passes on.

func (s *simCachedStmt) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (s *simCachedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *simCachedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}
