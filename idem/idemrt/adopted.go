package idemrt

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pressly/goose/v3"
)

// TableShape is what a job needs of a destination table that the service's
// own migrations create and change (destination adopt: true in the spec):
// its columns and the unique constraint its writes name in ON CONFLICT.
type TableShape struct {
	Job     string
	Name    string
	Columns []ColumnShape
	// Unique are the columns of the unique constraint (or unique index)
	// the job's writes conflict on, in any order.
	Unique []string
}

// ColumnShape is one column a job writes and reads, typed as idemgen would
// have created it ("text", "bigint", "timestamptz"; "TEXT", "INTEGER" on SQLite).
type ColumnShape struct {
	Name string
	Type string
	// Nullable: the job writes NULLs into it (a field whose type ends in ?).
	Nullable bool
	// Default is the default idemgen would give it; a column the job's
	// inserts leave out to take its default needs one.
	Default string
}

// CheckTables checks that each adopted table exists with the columns,
// types and unique constraint its job needs, and that it has no NOT NULL
// column without a default that the job would leave empty. It returns one
// error naming every table's every problem, or nil. The generated Migrate
// calls it after its migrations, so a service finds out at start-up, not
// at its first write.
func CheckTables(ctx context.Context, db *sql.DB, dialect goose.Dialect, tables []TableShape) error {
	var problems []string
	for _, t := range tables {
		var got tableFacts
		var err error
		if dialect == goose.DialectPostgres {
			got, err = postgresFacts(ctx, db, t.Name)
		} else {
			got, err = sqliteFacts(ctx, db, t.Name)
		}
		if err != nil {
			return fmt.Errorf("check adopted table %s: %w", t.Name, err)
		}
		for _, p := range t.problems(got, dialect) {
			problems = append(problems, fmt.Sprintf("job %s: adopted table %s: %s", t.Job, t.Name, p))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New("the adopted destination tables (adopt: true) do not fit their jobs; change them with the service's own migrations:\n\t" + strings.Join(problems, "\n\t"))
}

// tableFacts is a table as the database describes it; no columns: no table.
type tableFacts struct {
	columns []columnFacts
	// uniques are the column sets of its unique constraints and indexes
	// that ON CONFLICT can name (no partial or expression indexes).
	uniques [][]string
}

type columnFacts struct {
	name, typ           string
	notNull, hasDefault bool
}

func (t TableShape) problems(got tableFacts, dialect goose.Dialect) []string {
	if len(got.columns) == 0 {
		return []string{"does not exist (the service's migrations must create it before Migrate runs)"}
	}
	var out []string
	byName := map[string]columnFacts{}
	for _, c := range got.columns {
		byName[c.name] = c
	}
	for _, want := range t.Columns {
		c, ok := byName[want.Name]
		switch {
		case !ok:
			null := " NOT NULL"
			if want.Nullable {
				null = ""
			}
			def := ""
			if want.Default != "" {
				def = " DEFAULT " + want.Default
			}
			out = append(out, fmt.Sprintf("missing column %s (add %s %s%s%s)", want.Name, want.Name, want.Type, null, def))
		case !sameColumnType(dialect, c.typ, want.Type):
			out = append(out, fmt.Sprintf("column %s is %s; the job writes and reads it as %s", want.Name, c.typ, want.Type))
		case want.Nullable && c.notNull:
			out = append(out, fmt.Sprintf("column %s is NOT NULL, but its field is nullable and the job writes NULLs into it", want.Name))
		case want.Default != "" && !c.hasDefault:
			out = append(out, fmt.Sprintf("column %s has no default; the job's inserts leave it to DEFAULT %s", want.Name, want.Default))
		}
	}
	for _, c := range got.columns {
		if c.notNull && !c.hasDefault && !slices.ContainsFunc(t.Columns, func(w ColumnShape) bool { return w.Name == c.name }) {
			out = append(out, fmt.Sprintf("column %s is NOT NULL without a default, and the job does not write it, so every insert would fail (give it a default, or make it a unit field)", c.name))
		}
	}
	want := slices.Sorted(slices.Values(t.Unique))
	if !slices.ContainsFunc(got.uniques, func(cols []string) bool { return slices.Equal(slices.Sorted(slices.Values(cols)), want) }) {
		out = append(out, fmt.Sprintf("no unique constraint or unique index on exactly (%s), which the job's writes name in ON CONFLICT (add CONSTRAINT %s_unique UNIQUE (%s))", strings.Join(t.Unique, ", "), t.Name, strings.Join(t.Unique, ", ")))
	}
	return out
}

// sameColumnType reports whether a column declared as got stores what
// idemgen reads and writes as want. PostgreSQL compares types, allowing
// varchar for text and json for jsonb; SQLite compares type affinity, which
// is all a declared type decides there.
func sameColumnType(dialect goose.Dialect, got, want string) bool {
	if dialect != goose.DialectPostgres {
		return sqliteAffinity(got) == sqliteAffinity(want)
	}
	got = strings.ToLower(got)
	switch want {
	case "text":
		return got == "text" || strings.HasPrefix(got, "character varying")
	case "timestamptz":
		return got == "timestamp with time zone"
	case "jsonb":
		return got == "jsonb" || got == "json"
	}
	return got == want
}

// sqliteAffinity is a declared type's affinity, by SQLite's rules
// (https://sqlite.org/datatype3.html, 3.1), in their order.
func sqliteAffinity(declared string) string {
	t := strings.ToUpper(declared)
	switch {
	case strings.Contains(t, "INT"):
		return "INTEGER"
	case strings.Contains(t, "CHAR"), strings.Contains(t, "CLOB"), strings.Contains(t, "TEXT"):
		return "TEXT"
	case t == "", strings.Contains(t, "BLOB"):
		return "BLOB"
	case strings.Contains(t, "REAL"), strings.Contains(t, "FLOA"), strings.Contains(t, "DOUB"):
		return "REAL"
	}
	return "NUMERIC"
}

// postgresFacts describes the table the name resolves to on the search path,
// as the job's queries resolve it.
func postgresFacts(ctx context.Context, db *sql.DB, table string) (tableFacts, error) {
	var t tableFacts
	cols, err := queryRows(ctx, db, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, a.atthasdef
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
		func(rows *sql.Rows) (c columnFacts, err error) {
			return c, rows.Scan(&c.name, &c.typ, &c.notNull, &c.hasDefault)
		}, table)
	if err != nil {
		return t, err
	}
	t.columns = cols
	uniques, err := queryRows(ctx, db, `SELECT (SELECT string_agg(a.attname, ',') FROM pg_attribute a
			WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey))
		FROM pg_index i WHERE i.indrelid = to_regclass($1::text) AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL`,
		func(rows *sql.Rows) ([]string, error) {
			var cols sql.NullString
			err := rows.Scan(&cols)
			return strings.Split(cols.String, ","), err
		}, table)
	t.uniques = uniques
	return t, err
}

// sqliteFacts describes a SQLite table: its columns, its unique indexes
// (constraints are indexes there) and its primary key, which may be the
// rowid itself and then has no index.
func sqliteFacts(ctx context.Context, db *sql.DB, table string) (tableFacts, error) {
	var t tableFacts
	var pk []string
	cols, err := queryRows(ctx, db, `SELECT name, type, "notnull", dflt_value IS NOT NULL, pk FROM pragma_table_info(?)`,
		func(rows *sql.Rows) (c columnFacts, err error) {
			var inPK int
			err = rows.Scan(&c.name, &c.typ, &c.notNull, &c.hasDefault, &inPK)
			if inPK > 0 {
				pk = append(pk, c.name)
			}
			return c, err
		}, table)
	if err != nil {
		return t, err
	}
	t.columns = cols
	if len(pk) > 0 {
		t.uniques = append(t.uniques, pk)
	}
	indexes, err := queryRows(ctx, db, `SELECT name FROM pragma_index_list(?) WHERE "unique" AND NOT partial`,
		func(rows *sql.Rows) (name string, err error) { return name, rows.Scan(&name) }, table)
	if err != nil {
		return t, err
	}
	for _, ix := range indexes {
		names, err := queryRows(ctx, db, `SELECT name FROM pragma_index_info(?) ORDER BY seqno`,
			func(rows *sql.Rows) (sql.NullString, error) {
				var n sql.NullString
				return n, rows.Scan(&n)
			}, ix)
		if err != nil {
			return t, err
		}
		var cols []string
		for _, n := range names {
			if !n.Valid { // an expression: ON CONFLICT cannot name it by columns
				cols = nil
				break
			}
			cols = append(cols, n.String)
		}
		if cols != nil {
			t.uniques = append(t.uniques, cols)
		}
	}
	return t, nil
}

// queryRows reads every row of a query and closes them before returning,
// so no connection is held across the next query.
func queryRows[T any](ctx context.Context, db *sql.DB, query string, scan func(*sql.Rows) (T, error), args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
