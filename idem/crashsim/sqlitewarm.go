package crashsim

// Warm SQLite connections (issue 39). Opening a connection with the
// embedded SQLite builds an engine instance, maps its memory and reads the
// schema: with a dozen incarnations and observers per scenario, that was
// about half of the crash simulation's time. So a scenario's file is not
// thrown away when the scenario ends: it is emptied back to the migrated
// template's rows and handed to the next scenario with the connections its
// finished incarnations gave back, still open.
//
// What a new "process" means does not change. A connection a crash killed
// is closed for good (SQLite rolls back what it had open), never handed
// on; a connection is handed on only when its incarnation closed it with
// no transaction open and its statements finalized, the state a new
// connection is in, on a file whose rows are the template's. A scenario
// that ends with a connection still out (an incarnation that never ended)
// or stalled gives its file up, as every scenario did before.

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
)

// simSQLiteSlots are one job's scenario files not in use, ready for the
// next scenario, and what emptying one takes.
type simSQLiteSlots struct {
	template string   // the migrated template's path, attached to reset a file
	tables   []string // every table of the template, sqlite_sequence included
	mu       sync.Mutex
	free     []*simSQLiteSlot
}

// newSimSQLiteSlots lists the tables of the migrated template db. GLOB,
// not LIKE: LIKE's _ is any character, and 'sqlite_%' left out a
// package's own tables named sqlite... (golden/sqliteonly), whose rows then
// leaked from one scenario into the next.
func newSimSQLiteSlots(db *sql.DB) (*simSQLiteSlots, error) {
	var path string
	if err := db.QueryRow("SELECT file FROM pragma_database_list WHERE name = 'main'").Scan(&path); err != nil {
		return nil, fmt.Errorf("crashsim: the template's file: %w", err)
	}
	rows, err := db.Query("SELECT name FROM sqlite_master WHERE type = 'table' AND (name NOT GLOB 'sqlite_*' OR name = 'sqlite_sequence') ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("crashsim: the template's tables: %w", err)
	}
	defer rows.Close()
	s := &simSQLiteSlots{template: path}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		s.tables = append(s.tables, name)
	}
	return s, rows.Err()
}

// take returns a free file, or nil: the caller copies the template.
func (s *simSQLiteSlots) take() *simSQLiteSlot {
	if s == nil {
		return nil // cold (EnvCold)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.free); n > 0 {
		slot := s.free[n-1]
		s.free = s.free[:n-1]
		return slot
	}
	return nil
}

// giveBack ends a scenario on slot: its file, reset to the template's
// rows, is free again; a file with a connection still out, or whose reset
// failed, is given up (its warm connections closed).
func (s *simSQLiteSlots) giveBack(slot *simSQLiteSlot) {
	if !slot.settled() || s.reset(slot) != nil {
		slot.drop()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = append(s.free, slot)
}

// reset empties every table of slot's file and copies the template's rows
// back, in one transaction on the observer's handle (outside the faults).
func (s *simSQLiteSlots) reset(slot *simSQLiteSlot) error {
	ctx := context.Background()
	conn, err := slot.obsDB.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "ATTACH DATABASE ? AS simtemplate", s.template); err != nil {
		return err
	}
	defer conn.ExecContext(ctx, "DETACH DATABASE simtemplate")
	var stmts []string
	for _, table := range s.tables {
		q := `"` + strings.ReplaceAll(table, `"`, `""`) + `"`
		stmts = append(stmts, "DELETE FROM main."+q, "INSERT INTO main."+q+" SELECT * FROM simtemplate."+q)
	}
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE; "+strings.Join(stmts, "; ")+"; COMMIT")
	if err != nil {
		_, _ = conn.ExecContext(ctx, "ROLLBACK")
	}
	return err
}

// simSQLiteSlot is one scenario file, its observer's handle, and the
// connections finished incarnations gave back. It is the connector of
// every incarnation on the file: Connect hands out a warm connection
// before it opens a new one.
type simSQLiteSlot struct {
	path  string
	inner driver.Connector
	obsDB *sql.DB
	mu    sync.Mutex
	warm  []driver.Conn
	out   int // connections handed out, neither given back nor closed
}

// newSimSQLiteSlot makes a slot of a scenario file; the test's end
// closes its connections, before its temporary directory goes.
func newSimSQLiteSlot(t testing.TB, path string, obsDB *sql.DB) *simSQLiteSlot {
	inner, err := newSimCachingConnector(simSQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	s := &simSQLiteSlot{path: path, inner: inner, obsDB: obsDB}
	t.Cleanup(s.drop)
	return s
}

func (s *simSQLiteSlot) Connect(ctx context.Context) (driver.Conn, error) {
	s.mu.Lock()
	if n := len(s.warm); n > 0 {
		c := s.warm[n-1]
		s.warm = s.warm[:n-1]
		s.out++
		s.mu.Unlock()
		return c, nil
	}
	s.mu.Unlock()
	c, err := s.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.out++
	s.mu.Unlock()
	return c, nil
}

func (s *simSQLiteSlot) Driver() driver.Driver { return s.inner.Driver() }

// keep takes back a connection its incarnation closed, if it is as a new
// one would be: outside a transaction. It reports whether it kept it;
// the caller closes one it did not keep (and reports it with closed).
func (s *simSQLiteSlot) keep(c driver.Conn) bool {
	raw, ok := c.(interface{ Raw() *sqlite3.Conn })
	if !ok || !raw.Raw().GetAutocommit() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out--
	s.warm = append(s.warm, c)
	return true
}

// closed counts a handed-out connection closed for good (killed, or not kept).
func (s *simSQLiteSlot) closed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.out--
}

func (s *simSQLiteSlot) outstanding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out
}

// simSettle bounds the wait for a finished scenario's connections to come
// back: database/sql closes a connection that was busy when its handle
// closed once its user lets it go, and idemrt.SQLiteAuto lets a query's go
// on a goroutine of its own once its rows are closed.
const simSettle = 250 * time.Millisecond

// settled waits, at most simSettle, until no connection is out.
func (s *simSQLiteSlot) settled() bool {
	deadline := time.Now().Add(simSettle)
	for s.outstanding() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

// drop closes the warm connections and the observer's handle.
func (s *simSQLiteSlot) drop() {
	s.mu.Lock()
	warm := s.warm
	s.warm = nil
	s.mu.Unlock()
	for _, c := range warm {
		_ = c.Close()
	}
	_ = s.obsDB.Close()
}
