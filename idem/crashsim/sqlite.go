package crashsim

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"

	sqlite3 "github.com/ncruces/go-sqlite3/driver"
)

// simSQLite runs scenarios on SQLite files copied from one migrated
// template. A finished scenario's file is emptied back to the template's
// rows and handed to the next scenario with the connections its
// incarnations gave back still open (sqlitewarm.go): opening a SQLite
// connection (its engine instance, its memory, the schema read) cost about
// half of a scenario's time.
type simSQLite struct {
	template string
	open     func(*sql.DB) Store
	slots    *simSQLiteSlots
}

func SQLite(t testing.TB, open func(*sql.DB) Store) Env {
	if os.Getenv(simChildEnv) != "" {
		return simSQLite{open: open} // a child only attaches to its parent's file
	}
	path := filepath.Join(t.TempDir(), "template.db")
	db, err := sql.Open("sqlite3", simSQLiteDSN(path))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := open(db).Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Fold the WAL into the file so a plain copy is complete.
	if _, err := db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	if simCold() {
		return simSQLite{template: path, open: open}
	}
	slots, err := newSimSQLiteSlots(db)
	if err != nil {
		t.Fatal(err)
	}
	return simSQLite{template: path, open: open, slots: slots}
}

// simObserverConns is how many connections the observer's handle opens
// and keeps: its reads are one at a time (checkMu), beside a few polls.
const simObserverConns = 8

func simSQLiteDSN(path string) string {
	// synchronous(off): the simulation kills processes, never the machine,
	// and the OS keeps what a killed process wrote.
	return "file:" + url.PathEscape(path) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(wal)&_pragma=synchronous(off)"
}

func (e simSQLite) name() string { return "sqlite" }

func (e simSQLite) fresh(t testing.TB) simDB {
	if s := e.slots.take(); s != nil {
		return &simSQLiteDB{path: s.path, open: e.open, obsDB: s.obsDB, obs: e.open(s.obsDB).Runtime(), slot: s, slots: e.slots}
	}
	path := filepath.Join(t.TempDir(), "sim.db")
	src, err := os.Open(e.template)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	dst.Close()
	d := e.attach(t, path).(*simSQLiteDB)
	if e.slots != nil {
		d.slot, d.slots = newSimSQLiteSlot(t, path, d.obsDB), e.slots
	}
	return d
}

func (e simSQLite) attach(t testing.TB, path string) simDB {
	var obs *sql.DB
	if simCold() {
		var err error
		if obs, err = sql.Open("sqlite3", simSQLiteDSN(path)); err != nil {
			t.Fatal(err)
		}
	} else {
		conn, err := newSimCachingConnector(simSQLiteDSN(path))
		if err != nil {
			t.Fatal(err)
		}
		obs = sql.OpenDB(conn)
	}
	// idemrt.SQLiteAuto gives a query's connection back only once its rows
	// are closed, on a goroutine of its own: the next read, a moment later,
	// finds no idle connection and opens one (an engine instance, its
	// schema read). Unbounded, the observer opened 5,852 connections in
	// one matrix of the stress shop's job, and closed all but the 32 it
	// keeps idle: a fifth of the matrix's CPU. Capped, a read waits the
	// moment it takes the goroutine to give one back.
	if !simCold() {
		obs.SetMaxIdleConns(simObserverConns)
		obs.SetMaxOpenConns(simObserverConns)
	}
	return &simSQLiteDB{path: path, open: e.open, obsDB: obs, obs: e.open(obs).Runtime()}
}

type simSQLiteDB struct {
	path  string
	open  func(*sql.DB) Store
	obsDB *sql.DB
	obs   idem.Store
	conns int // the incarnations' most open connections when set (limitConns)
	// last is the newest incarnation's handle (family_pool.go holds it).
	last atomic.Pointer[sql.DB]
	// slot keeps the file's warm connections for the next scenario
	// (sqlitewarm.go); nil in a subprocess child.
	slot  *simSQLiteSlot
	slots *simSQLiteSlots
	// slow, when set, makes the connections of the incarnations begun
	// since open slowly (family_pool.go's slow-open).
	slow atomic.Pointer[simSlowOpen]
}

func (d *simSQLiteDB) slowOpens() (release func()) { return startSlowOpens(&d.slow) }

func (d *simSQLiteDB) limitConns(n int) { d.conns = n }

// close ends the scenario: its file, emptied back to the template's rows,
// goes to the next scenario with its warm connections, unless a
// connection is still out (an incarnation that never ended), or the reset
// fails: then it is closed and dropped, as a stalled scenario's is.
func (d *simSQLiteDB) close() {
	if d.slot == nil {
		d.obsDB.Close()
		return
	}
	d.slots.giveBack(d.slot)
}

func (d *simSQLiteDB) locator() string { return d.path }

func (d *simSQLiteDB) observer() idem.Store { return d.obs }

func (d *simSQLiteDB) keyRecords(ctx context.Context, table, job string) ([]string, error) {
	return d.column(ctx, "SELECT unit_key FROM "+table+" WHERE job = ?", job)
}

func (d *simSQLiteDB) heldSlots(ctx context.Context, table, job, owner string) ([]string, error) {
	return d.column(ctx, "SELECT effect || ' slot ' || slot FROM "+table+
		" WHERE job = ? AND slot >= 0 AND substr(owner, 1, ?) = ? ORDER BY effect, slot", job, len(owner)+1, owner+"#")
}

func (d *simSQLiteDB) ledgerStates(ctx context.Context, table string) ([]idem.LedgerEntry, error) {
	return idemrt.ReadWholeLedger(ctx, func(ctx context.Context, after string, limit int32) ([]idem.LedgerEntry, error) {
		query := fmt.Sprintf(ledgerStatesPage, table, "?", strconv.Itoa(int(limit)))
		rows, err := d.obsDB.QueryContext(ctx, query, after)
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
func (d *simSQLiteDB) column(ctx context.Context, query string, args ...any) ([]string, error) {
	rows, err := d.obsDB.QueryContext(ctx, query, args...)
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

// abandon leaves a stalled scenario's file as it is: its incarnations'
// goroutines may still be inside the driver, and the test's temporary
// directory goes with the test.
func (d *simSQLiteDB) abandon() {}

func (d *simSQLiteDB) diagnose(context.Context) string {
	return fmt.Sprintf("SQLite file %s (locks are the file's: a worker waits at most its busy timeout, 10 s)\n", d.path)
}

func (d *simSQLiteDB) incarnation(t testing.TB, sqlHook idemtest.CrashHook) (idem.Store, func(), func()) {
	if sqlHook == nil {
		return d.obs, func() {}, func() {} // a helper outside the faults: the observer's handle serves
	}
	var inner driver.Connector = d.slot
	if d.slot == nil {
		var err error
		if inner, err = (&sqlite3.SQLite{}).OpenConnector(simSQLiteDSN(d.path)); err != nil {
			t.Fatal(err)
		}
	}
	c := &killableConnector{inner: inner, hook: sqlHook, slow: d.slow.Load()}
	db := sql.OpenDB(c)
	if d.conns > 0 {
		db.SetMaxOpenConns(d.conns)
	}
	d.last.Store(db)
	return d.open(db).Runtime(), c.kill, func() { db.Close() }
}

// killableConnector records every driver connection so a crash can close
// them under database/sql's feet: SQLite rolls back what they had open,
// exactly as when the process holding them dies.
type killableConnector struct {
	inner driver.Connector
	hook  idemtest.CrashHook // every statement is reported to it
	slow  *simSlowOpen       // set: every connection opens slowly (family_pool.go)
	mu    sync.Mutex
	conns []*simConn
	dead  atomic.Bool
	dying atomic.Bool // set before the gate is taken: calls under way return (simConn.interruptible)
	// gate is read-held by every call into the driver. kill takes it for
	// good: it waits for the calls under way (another goroutine of the
	// process, a concurrent effect call, may be inside one) and parks
	// every later one, as the process's death would stop them.
	gate sync.RWMutex
}

func (c *killableConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead.Load() {
		return nil, errProcessGone
	}
	conn, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := &simConn{Conn: conn, hook: c.hook, gate: &c.gate, dead: &c.dead, dying: &c.dying}
	sc.warm, _ = c.inner.(*simSQLiteSlot)
	c.conns = append(c.conns, sc)
	if c.slow != nil {
		return c.openSlowly(ctx, sc)
	}
	return sc, nil
}

// openSlowly ends a slow open (simSlowOpen): it waits until the open's
// context ends (or the family lets it go), then runs the statement the
// driver runs to ready a connection (its DSN's pragmas) on that context,
// so that the open fails as the driver's own does when a wait bound runs
// out inside it: "interrupted". Called with c.mu held; a kill waits for
// it, bounded as its wait is.
func (c *killableConnector) openSlowly(ctx context.Context, sc *simConn) (driver.Conn, error) {
	c.slow.wait(ctx)
	err := sc.driverCall(func() error {
		_, err := sc.Conn.(driver.ExecerContext).ExecContext(sc.interruptible(ctx), "PRAGMA query_only", nil)
		return err
	})
	if err != nil {
		_ = sc.Close()
		return nil, err
	}
	return sc, nil
}

func (c *killableConnector) Driver() driver.Driver { return c.inner.Driver() }

func (c *killableConnector) kill() {
	c.dying.Store(true)
	c.gate.Lock() // never unlocked: the process is gone
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dead.Store(true)
	for _, conn := range c.conns {
		conn.kill()
	}
}
