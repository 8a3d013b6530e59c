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
// error naming every table's every problem, with the statements that fix
// them where the dialect has one, or nil. Migrate calls it before its
// migrations (from the schema they were planned from, adoptedShapes), so
// that a refusal changes nothing; the generated Migrate calls it after
// them too.
func CheckTables(ctx context.Context, db *sql.DB, dialect goose.Dialect, tables []TableShape) error {
	var problems, fixes []string
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
		ps, fs := t.problems(got, dialect)
		for _, p := range ps {
			problems = append(problems, fmt.Sprintf("job %s: adopted table %s: %s", t.Job, t.Name, p))
		}
		fixes = append(fixes, fs...)
	}
	if len(problems) == 0 {
		return nil
	}
	msg := "the adopted destination tables (adopt: true) do not fit their jobs; change them with the service's own migrations:\n\t" + strings.Join(problems, "\n\t")
	if len(fixes) > 0 {
		msg += "\nthese statements make them fit, run as they are, on tables with rows too (one per line):\n" + strings.Join(fixes, "\n")
	}
	return errors.New(msg)
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

// problems says what the table lacks for its job, and the statements that
// fix it: each one line ending in ";", which runs as it is on a table
// with rows (a column added NOT NULL gets a default its existing rows
// take). SQLite changes no column in place: a column's type, NOT NULL or
// default there needs the table rebuilt, and has no statement.
func (t TableShape) problems(got tableFacts, dialect goose.Dialect) (problems, fixes []string) {
	pg := dialect == goose.DialectPostgres
	if len(got.columns) == 0 {
		var cols []string
		for _, c := range t.Columns {
			cols = append(cols, c.Name+" "+c.Type+c.constraints())
		}
		cols = append(cols, "UNIQUE ("+strings.Join(t.Unique, ", ")+")")
		return []string{"does not exist (the service's migrations must create it before Migrate runs)"},
			[]string{fmt.Sprintf("CREATE TABLE %s (%s);", t.Name, strings.Join(cols, ", "))}
	}
	rebuild := func(what string) string {
		if pg {
			return what
		}
		return what + " (SQLite changes no column in place: rebuild the table)"
	}
	alter := func(col, change string) {
		if pg {
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s;", t.Name, col, change))
		}
	}
	byName := map[string]columnFacts{}
	for _, c := range got.columns {
		byName[c.name] = c
	}
	for _, want := range t.Columns {
		c, ok := byName[want.Name]
		switch {
		case !ok:
			add := want.Name + " " + want.Type + want.constraints()
			if !want.Nullable && want.Default == "" {
				add += " DEFAULT " + zeroOf(dialect, want.Type) // for the rows the table has
			}
			problems = append(problems, fmt.Sprintf("missing column %s (add %s)", want.Name, add))
			fixes = append(fixes, fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s;", t.Name, add))
		case !sameColumnType(dialect, c.typ, want.Type):
			problems = append(problems, rebuild(fmt.Sprintf("column %s is %s; the job writes and reads it as %s", want.Name, c.typ, want.Type)))
			alter(want.Name, fmt.Sprintf("TYPE %s USING %s::%s", want.Type, want.Name, want.Type))
		case want.Nullable && c.notNull:
			problems = append(problems, rebuild(fmt.Sprintf("column %s is NOT NULL, but its field is nullable and the job writes NULLs into it", want.Name)))
			alter(want.Name, "DROP NOT NULL")
		case want.Default != "" && !c.hasDefault:
			problems = append(problems, rebuild(fmt.Sprintf("column %s has no default; the job's inserts leave it to DEFAULT %s", want.Name, want.Default)))
			alter(want.Name, "SET DEFAULT "+want.Default)
		}
	}
	for _, c := range got.columns {
		if c.notNull && !c.hasDefault && !slices.ContainsFunc(t.Columns, func(w ColumnShape) bool { return w.Name == c.name }) {
			problems = append(problems, rebuild(fmt.Sprintf("column %s is NOT NULL without a default, and the job does not write it, so every insert would fail (give it a default, or make it a unit field)", c.name)))
			if zero := pgZero(c.typ); zero != "" {
				alter(c.name, "SET DEFAULT "+zero)
			} else {
				alter(c.name, "DROP NOT NULL")
			}
		}
	}
	want := slices.Sorted(slices.Values(t.Unique))
	if !slices.ContainsFunc(got.uniques, func(cols []string) bool { return slices.Equal(slices.Sorted(slices.Values(cols)), want) }) {
		problems = append(problems, fmt.Sprintf("no unique constraint or unique index on exactly (%s), which the job's writes name in ON CONFLICT (add one: %s_unique)", strings.Join(t.Unique, ", "), t.Name))
		fixes = append(fixes, fmt.Sprintf("CREATE UNIQUE INDEX %s_unique ON %s (%s);", t.Name, t.Name, strings.Join(t.Unique, ", ")))
	}
	return problems, fixes
}

// constraints is the column's NOT NULL and DEFAULT as idemgen would have
// declared them.
func (c ColumnShape) constraints() string {
	s := ""
	if !c.Nullable {
		s = " NOT NULL"
	}
	if c.Default != "" {
		s += " DEFAULT " + c.Default
	}
	return s
}

// zeroOf is the default a NOT NULL column of type typ is added with to a
// table that has rows: the zero of the type the job writes (the rows are
// the service's own; the job sets the column on every row it writes).
func zeroOf(dialect goose.Dialect, typ string) string {
	if dialect == goose.DialectPostgres {
		if z := pgZero(typ); z != "" {
			return z
		}
		return "''"
	}
	switch sqliteAffinity(typ) {
	case "TEXT":
		return "''"
	case "BLOB":
		return "x''"
	}
	return "0"
}

// pgZero is the zero of a PostgreSQL type as a default's literal, or ""
// for a type it does not know.
func pgZero(typ string) string {
	t := strings.ToLower(typ)
	switch {
	case t == "text", strings.HasPrefix(t, "character"), t == "bytea":
		return "''"
	case t == "integer", t == "bigint", t == "smallint", t == "double precision", t == "real", strings.HasPrefix(t, "numeric"):
		return "0"
	case t == "boolean":
		return "false"
	case t == "timestamptz", strings.HasPrefix(t, "timestamp"):
		return "'1970-01-01 00:00:00+00'"
	case t == "jsonb", t == "json":
		return "'null'"
	case t == "uuid":
		return "'00000000-0000-0000-0000-000000000000'"
	}
	return ""
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
