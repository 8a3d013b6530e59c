package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// SQLiteInTx runs fn in a BEGIN IMMEDIATE transaction on one connection.
// IMMEDIATE takes the write lock up front, so two writers queue on the busy
// timeout instead of deadlocking on a lock upgrade, whatever the DSN says.
func SQLiteInTx(ctx context.Context, db *sql.DB, fn func(conn *sql.Conn) error) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(conn); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return err
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

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

// ReadNullBlob is the inverse of sqlNullBlob; an empty BLOB stays empty,
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
