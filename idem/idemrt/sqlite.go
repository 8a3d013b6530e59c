package idemrt

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// SQLiteInTx runs fn in a BEGIN IMMEDIATE transaction on one connection.
// IMMEDIATE takes the write lock up front, so two writers queue on the busy
// timeout instead of deadlocking on a lock upgrade, whatever the DSN says;
// a connection whose DSN set no busy timeout gets SQLiteBusyTimeout.
// Its statements are prepared once per transaction (SQLiteStatements).
func SQLiteInTx(ctx context.Context, db *sql.DB, fn func(tx *SQLiteStatements) error) error {
	return sqliteTx(ctx, db, "BEGIN IMMEDIATE", fn)
}

// SQLiteInReadTx runs fn, which only reads, in a deferred transaction: one
// consistent view that takes no write lock, so it neither waits for a
// writer (in WAL mode) nor holds one up.
func SQLiteInReadTx(ctx context.Context, db *sql.DB, fn func(tx *SQLiteStatements) error) error {
	return sqliteTx(ctx, db, "BEGIN DEFERRED", fn)
}

func sqliteTx(ctx context.Context, db *sql.DB, begin string, fn func(tx *SQLiteStatements) error) error {
	conn, err := boundedAcquire(ctx, "the database handle's connections", db.Conn)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	tx := NewSQLiteStatements(conn)
	defer tx.Close()
	lockWait, restore, err := sqliteBoundLockWait(ctx, conn)
	if err != nil {
		return err
	}
	defer restore()
	if _, err := conn.ExecContext(ctx, begin); err != nil {
		return fmt.Errorf("begin: %w", sqliteWaitError(err, lockWait))
	}
	if err := fn(tx); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// SQLiteStatements is sqlc's DBTX over one connection or transaction that
// prepares each query once and runs it again from then on. SQLite would
// otherwise parse a statement anew each time it runs, which costs more
// than running it when a batch sends the same few statements per unit.
// It is not safe for concurrent use, as a transaction is not.
type SQLiteStatements struct {
	on    sqliteDBTX
	stmts map[string]*sql.Stmt
}

// sqliteDBTX is what *sql.Conn and *sql.Tx have in common (sqlc's DBTX).
type sqliteDBTX interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	PrepareContext(ctx context.Context, query string) (*sql.Stmt, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// NewSQLiteStatements runs queries on a connection or transaction (a
// caller's *sql.Tx); Close releases the prepared statements.
func NewSQLiteStatements(on sqliteDBTX) *SQLiteStatements {
	return &SQLiteStatements{on: on, stmts: map[string]*sql.Stmt{}}
}

func (s *SQLiteStatements) stmt(ctx context.Context, query string) (*sql.Stmt, error) {
	if st, ok := s.stmts[query]; ok {
		return st, nil
	}
	st, err := s.on.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	s.stmts[query] = st
	return st, nil
}

func (s *SQLiteStatements) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

func (s *SQLiteStatements) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return s.stmt(ctx, query)
}

func (s *SQLiteStatements) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := s.stmt(ctx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

func (s *SQLiteStatements) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	st, err := s.stmt(ctx, query)
	if err != nil {
		// A Row carrying the error: the query, run unprepared, fails the same way.
		return s.on.QueryRowContext(ctx, query, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

// Close closes the statements prepared so far.
func (s *SQLiteStatements) Close() error {
	var errs []error
	for q, st := range s.stmts {
		errs = append(errs, st.Close())
		delete(s.stmts, q)
	}
	return errors.Join(errs...)
}

// SQLiteBusyTimeout is how long a SQLite statement of the store waits for
// another writer's lock, where the DSN did not say (busy_timeout 0 fails at
// once with "database is locked").
const SQLiteBusyTimeout = 10 * time.Second

// sqliteEnsureBusyTimeout gives conn SQLiteBusyTimeout unless its DSN set
// one: busy_timeout is a setting of each connection, not of the database.
// It returns the connection's busy_timeout in milliseconds.
func sqliteEnsureBusyTimeout(ctx context.Context, conn *sql.Conn) (int64, error) {
	var ms int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&ms); err != nil {
		return 0, fmt.Errorf("read busy_timeout: %w", err)
	}
	if ms > 0 {
		return ms, nil
	}
	ms = SQLiteBusyTimeout.Milliseconds()
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", ms)); err != nil {
		return 0, fmt.Errorf("set busy_timeout: %w", err)
	}
	return ms, nil
}

// sqliteBoundLockWait makes conn's wait for another writer's lock (its
// busy_timeout: the DSN's, else SQLiteBusyTimeout) no longer than ctx's
// wait bound (WaitBound), for one transaction: restore puts the
// connection's own setting back before it returns to the pool.
func sqliteBoundLockWait(ctx context.Context, conn *sql.Conn) (wait time.Duration, restore func(), err error) {
	ms, err := sqliteEnsureBusyTimeout(ctx, conn)
	if err != nil {
		return 0, nil, err
	}
	own := time.Duration(ms) * time.Millisecond
	bound := WaitBound(ctx)
	if own <= bound {
		return own, func() {}, nil
	}
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("PRAGMA busy_timeout = %d", bound.Milliseconds())); err != nil {
		return 0, nil, fmt.Errorf("set busy_timeout: %w", err)
	}
	return bound, func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), fmt.Sprintf("PRAGMA busy_timeout = %d", ms))
	}, nil
}

// sqliteWriteLock is what a wait for SQLite's lock waited for.
const sqliteWriteLock = "the SQLite database's write lock"

// sqliteWaitError makes SQLite's SQLITE_BUSY ("database is locked", in
// the words every driver passes on), a wait for another writer's lock that
// ran out of lockWait, a *WaitError.
func sqliteWaitError(err error, lockWait time.Duration) error {
	if err != nil && strings.Contains(err.Error(), "database is locked") {
		return &WaitError{What: sqliteWriteLock, Bound: lockWait, Err: err}
	}
	return err
}

// SQLiteAuto runs single statements outside a transaction (sqlc's DBTX),
// each on a connection with a busy timeout, whatever the DSN says.
type SQLiteAuto struct{ DB *sql.DB }

// conn takes a connection within ctx's wait bound, as a transaction does:
// a read waits for the pool no longer than a write.
func (a SQLiteAuto) conn(ctx context.Context) (*sql.Conn, error) {
	conn, err := boundedAcquire(ctx, "the database handle's connections", a.DB.Conn)
	if err != nil {
		return nil, err
	}
	if _, err := sqliteEnsureBusyTimeout(ctx, conn); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// ExecContext, the writes outside a transaction, waits for another
// writer's lock no longer than ctx's wait bound, as a transaction's BEGIN
// does.
func (a SQLiteAuto) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	conn, err := boundedAcquire(ctx, "the database handle's connections", a.DB.Conn)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	lockWait, restore, err := sqliteBoundLockWait(ctx, conn)
	if err != nil {
		return nil, err
	}
	defer restore()
	res, err := conn.ExecContext(ctx, query, args...)
	return res, sqliteWaitError(err, lockWait)
}

func (a SQLiteAuto) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return a.DB.PrepareContext(ctx, query)
}

// QueryContext and QueryRowContext run on a connection given its busy
// timeout, like ExecContext, though their rows outlive the call: the
// connection goes back to the pool once the rows are closed (sql.Conn's
// Close waits for them), as the pool's own rows would. Configuring a pooled
// connection and querying the pool after it would hope to get the same
// connection back, which a pool under contention, or one that keeps no
// idle connection, does not give.
//
// A query that writes (RETURNING) waits for another writer's lock no
// longer than ctx's wait bound, as ExecContext does, though not by the
// connection's busy_timeout, which could be given back only once the rows
// are closed, after the connection went back to the pool: the statement
// runs on a context that ends at the bound, which ends SQLite's wait for
// the lock (its busy handler gives up once the context is done). Its
// failure then reads "database is locked" (or "interrupted"); the querier
// makes it a *WaitError (SQLiteLockWait). Before, such a query waited the
// connection's busy_timeout, 10 s by default: a call slot taken while a
// forget held the write lock waited 10 s under a wait bound of 150 ms.
func (a SQLiteAuto) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	conn, err := a.conn(ctx)
	if err != nil {
		return nil, err
	}
	qctx, cancel := sqliteWriteBound(ctx, query)
	rows, err := conn.QueryContext(qctx, query, args...)
	if err != nil {
		cancel()
		conn.Close()
		return nil, err
	}
	go func() {
		conn.Close() // returns once rows is closed
		cancel()
	}()
	return rows, nil
}

func (a SQLiteAuto) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	conn, err := a.conn(ctx)
	if err != nil {
		// A Row carrying err: a query on a context already ended by it.
		return a.DB.QueryRowContext(endedBy{ctx, err}, query, args...)
	}
	qctx, cancel := sqliteWriteBound(ctx, query)
	row := conn.QueryRowContext(qctx, query, args...)
	go func() {
		conn.Close() // returns once the row is scanned
		cancel()
	}()
	return row
}

// sqliteWriteBound is the context a query that writes (one with
// RETURNING: the only writes that return rows) runs on: ctx, ended at
// ctx's wait bound. A query that only reads never waits for a lock (WAL)
// and runs on ctx, however long it takes.
func sqliteWriteBound(ctx context.Context, query string) (context.Context, context.CancelFunc) {
	if !strings.Contains(strings.ToUpper(query), "RETURNING") {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, WaitBound(ctx))
}

// SQLiteLockWait makes the failure of a query that writes on SQLiteAuto
// (RETURNING) a *WaitError when it ran out of its wait bound waiting for
// another writer's lock: SQLite answered "database is locked", or the
// statement was interrupted at the bound, while ctx itself is not done.
// Any other error is returned as it is.
func SQLiteLockWait(ctx context.Context, err error) error {
	var waited *WaitError
	if err == nil || ctx.Err() != nil || errors.As(err, &waited) {
		return err // a wait that says what it waited for already (a connection)
	}
	if strings.Contains(err.Error(), "interrupted") || errors.Is(err, context.DeadlineExceeded) {
		return &WaitError{What: sqliteWriteLock, Bound: WaitBound(ctx), Err: err}
	}
	return sqliteWaitError(err, WaitBound(ctx))
}

// endedBy is a context already ended, whose Err is err itself: the only
// way to hand a *sql.Row an error, for database/sql returns a done
// context's Err as the query's. A context cancelled with err as its cause
// would hand on context.Canceled and lose err (held-record, seed 38, spec
// 3, under load: a busy wait for the pool read "read the effect's gate:
// context canceled").
type endedBy struct {
	context.Context
	err error
}

var closedDone = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (c endedBy) Done() <-chan struct{} { return closedDone }
func (c endedBy) Err() error            { return c.err }

// SQLiteNoRows reports the "no row" result of a :one query.
func SQLiteNoRows(err error) bool { return errors.Is(err, sql.ErrNoRows) }

// The sql* helpers convert nullable unit fields to SQLite parameters, and
// the read* helpers convert columns back, keeping the first error.

func SQLNullString(p *string) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: *p, Valid: true}
}

func SQLNullInt[T int32 | int64](p *T) sql.NullInt64 {
	if p == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*p), Valid: true}
}

func SQLNullFloat(p *float64) sql.NullFloat64 {
	if p == nil {
		return sql.NullFloat64{}
	}
	return sql.NullFloat64{Float64: *p, Valid: true}
}

func SQLNullBool(p *bool) sql.NullBool {
	if p == nil {
		return sql.NullBool{}
	}
	return sql.NullBool{Bool: *p, Valid: true}
}

func SQLNullTime(p *time.Time) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: SQLiteTime(*p), Valid: true}
}

func SQLNullStringer[T fmt.Stringer](p *T) sql.NullString {
	if p == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: (*p).String(), Valid: true}
}

func SQLNullBytes[T ~[]byte](b T) sql.NullString {
	if b == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: string(b), Valid: true}
}

// SQLNullBlob is a bytes? field as its sqlc parameter (*[]byte, see
// sqlgen's SQLite overrides): the driver binds a nil []byte as an empty
// BLOB, a nil pointer as NULL.
func SQLNullBlob(b []byte) *[]byte {
	if b == nil {
		return nil
	}
	return &b
}

func ReadTime(s string, err *error) time.Time {
	t, e := ParseSQLiteTime(s)
	if e != nil && *err == nil {
		*err = e
	}
	return t
}

func ReadNullTime(ns sql.NullString, err *error) *time.Time {
	if !ns.Valid {
		return nil
	}
	t := ReadTime(ns.String, err)
	return &t
}

func ReadNullString(ns sql.NullString) *string {
	if !ns.Valid {
		return nil
	}
	return &ns.String
}

func ReadNullInt[T int32 | int64](ni sql.NullInt64) *T {
	if !ni.Valid {
		return nil
	}
	v := T(ni.Int64)
	return &v
}

func ReadNullFloat(nf sql.NullFloat64) *float64 {
	if !nf.Valid {
		return nil
	}
	return &nf.Float64
}

func ReadNullBool(nb sql.NullBool) *bool {
	if !nb.Valid {
		return nil
	}
	return &nb.Bool
}

// ReadNullBlob is the inverse of SQLNullBlob; an empty BLOB stays empty,
// not nil, whatever slice the driver scanned it into.
func ReadNullBlob(p *[]byte) []byte {
	if p == nil {
		return nil
	}
	if *p == nil {
		return []byte{}
	}
	return *p
}

func ReadNullBytes[T ~[]byte](ns sql.NullString) T {
	if !ns.Valid {
		return nil
	}
	return T(ns.String)
}

func ReadParsed[T any](s string, parse func(string) (T, error), err *error) T {
	v, e := parse(s)
	if e != nil && *err == nil {
		*err = e
	}
	return v
}

func ReadNullParsed[T any](ns sql.NullString, parse func(string) (T, error), err *error) *T {
	if !ns.Valid {
		return nil
	}
	v := ReadParsed(ns.String, parse, err)
	return &v
}
