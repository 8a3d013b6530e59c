package crashsim

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// Adopted tables that do not fit (destination adopt: true): the generated
// crash tests create an adopted table exactly as idemgen would, so a check
// of its shape that skipped a column's nullability, type or presence would
// pass them. AdoptedMisfits creates, each on a database of its own, the
// table changed in one column at a time: a column whose field is nullable
// made NOT NULL, a column of another type, a column left out. Migrate must
// refuse each with an error that names the column, and leave the
// database as it was.

// MisfitDB is a new, empty database for one misfit: Exec runs the
// misfit's DDL, Migrate is the package store's, and Schema describes the
// database's tables and columns (a refused Migrate must change nothing).
type MisfitDB struct {
	Exec    func(ctx context.Context, ddl string) error
	Migrate func(ctx context.Context) error
	Schema  func(ctx context.Context) (string, error)
}

// AdoptedMisfits plays every misfit of tables (the package's adopted
// shapes) on ddl (the tables as idemgen would create them, one column a
// line), each on a database fresh returns. pg: PostgreSQL's types.
func AdoptedMisfits(t *testing.T, ddl string, tables []idemrt.TableShape, pg bool, fresh func(t *testing.T) MisfitDB) {
	t.Helper()
	played := 0
	for _, tb := range tables {
		for _, m := range misfitsOf(ddl, tb, pg) {
			played++
			t.Run(tb.Name+"/"+m.name, func(t *testing.T) {
				ctx := context.Background()
				db := fresh(t)
				if err := db.Exec(ctx, m.ddl); err != nil {
					t.Fatalf("create the misfit table: %v\n%s", err, m.ddl)
				}
				before, err := db.Schema(ctx)
				if err != nil {
					t.Fatal(err)
				}
				err = db.Migrate(ctx)
				switch {
				case err == nil:
					t.Errorf("Migrate accepted adopted table %s with %s", tb.Name, m.name)
				case !strings.Contains(err.Error(), m.column):
					t.Errorf("Migrate refused adopted table %s with %s, but its error does not name column %s:\n%v", tb.Name, m.name, m.column, err)
				}
				after, err := db.Schema(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if after != before {
					t.Errorf("a Migrate that met adopted table %s with %s changed the database:\nbefore %s\nafter  %s", tb.Name, m.name, before, after)
				}
			})
		}
	}
	if played == 0 {
		t.Fatalf("no misfit of the adopted tables could be made from their DDL: the test tests nothing\n%s", ddl)
	}
}

// misfit is one adopted table's DDL changed in one column.
type misfit struct {
	name, column, ddl string
}

// misfitsOf is table's misfits in ddl: a nullable column made NOT NULL
// (when the table has one), a column of the unique constraint's
// neighbours given another type, and one left out.
func misfitsOf(ddl string, tb idemrt.TableShape, pg bool) []misfit {
	block := regexp.MustCompile(`(?s)CREATE TABLE (?:IF NOT EXISTS )?` + regexp.QuoteMeta(tb.Name) + ` \(.*?\n\);`).FindString(ddl)
	if block == "" {
		return nil
	}
	others := ddlWithout(ddl, block)
	lineOf := func(col string) string {
		for line := range strings.Lines(block) {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == col {
				return line
			}
		}
		return ""
	}
	with := func(name, col, line, changed string) misfit {
		return misfit{name: name, column: col, ddl: others + strings.Replace(block, line, changed, 1) + "\n"}
	}
	var out []misfit
	if i := slices.IndexFunc(tb.Columns, func(c idemrt.ColumnShape) bool { return c.Nullable }); i >= 0 {
		col := tb.Columns[i].Name
		if line := lineOf(col); line != "" && !strings.Contains(line, "NOT NULL") {
			typ := columnType(line)
			out = append(out, with("nullable column "+col+" made NOT NULL", col, line, strings.Replace(line, col+" "+typ, col+" "+typ+" NOT NULL", 1)))
		}
	}
	// A column outside the unique constraint, so the rest stays valid.
	i := slices.IndexFunc(tb.Columns, func(c idemrt.ColumnShape) bool { return !slices.Contains(tb.Unique, c.Name) && lineOf(c.Name) != "" })
	if i < 0 {
		return out
	}
	col := tb.Columns[i].Name
	line := lineOf(col)
	typ := columnType(line)
	other := "INTEGER"
	switch {
	case pg && strings.EqualFold(typ, "text"):
		other = "bigint"
	case pg:
		other = "text"
	case strings.EqualFold(typ, "INTEGER"):
		other = "TEXT"
	}
	out = append(out, with(fmt.Sprintf("column %s of type %s", col, other), col, line, strings.Replace(line, col+" "+typ, col+" "+other, 1)))
	out = append(out, with("column "+col+" left out", col, line, ""))
	return out
}

// columnType is the type of a column's DDL line ("name TYPE ...,"), of
// one word or several ("double precision", "timestamp with time zone").
func columnType(line string) string {
	f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), ","))
	typ := f[1:]
	for i, w := range typ {
		if i > 0 && slices.Contains(columnClauses, strings.ToUpper(w)) {
			typ = typ[:i]
			break
		}
	}
	return strings.Join(typ, " ")
}

// columnClauses are the words that end a column's type in its DDL.
var columnClauses = []string{"NOT", "NULL", "DEFAULT", "PRIMARY", "UNIQUE", "REFERENCES", "CHECK", "CONSTRAINT", "GENERATED", "COLLATE"}

// ddlWithout is ddl without block (the other tables' DDL, kept as is).
func ddlWithout(ddl, block string) string {
	return strings.Replace(ddl, block, "", 1)
}

// SQLiteMisfits plays AdoptedMisfits on SQLite, each misfit on a new
// file; migrate is the package store's Migrate over a handle.
func SQLiteMisfits(t *testing.T, ddl string, tables []idemrt.TableShape, migrate func(*sql.DB) func(context.Context) error) {
	AdoptedMisfits(t, ddl, tables, false, func(t *testing.T) MisfitDB {
		db, err := sql.Open("sqlite3", simSQLiteDSN(filepath.Join(t.TempDir(), "misfit.db")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return MisfitDB{
			Exec: func(ctx context.Context, ddl string) error {
				_, err := db.ExecContext(ctx, ddl)
				return err
			},
			Migrate: migrate(db),
			Schema: func(ctx context.Context) (string, error) {
				return schemaOf(ctx, db.QueryContext, `SELECT m.type || ' ' || m.name || ': ' || coalesce(m.sql, '') FROM sqlite_master m ORDER BY m.name`)
			},
		}
	})
}

// PostgresMisfits plays AdoptedMisfits on PostgreSQL (IDEMGEN_TEST_POSTGRES),
// each misfit in a schema of its own; migrate is the package store's
// Migrate over a pool.
func PostgresMisfits(t *testing.T, ddl string, tables []idemrt.TableShape, migrate func(*pgxpool.Pool) func(context.Context) error) {
	pg := idemtest.OpenPostgres(t)
	AdoptedMisfits(t, ddl, tables, true, func(t *testing.T) MisfitDB {
		schema := pg.NewSchema(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := pgxpool.NewWithConfig(ctx, pg.Config(schema))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return MisfitDB{
			Exec: func(ctx context.Context, ddl string) error {
				_, err := pool.Exec(ctx, ddl)
				return err
			},
			Migrate: migrate(pool),
			Schema: func(ctx context.Context) (string, error) {
				rows, err := pool.Query(ctx, `SELECT table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable
					FROM information_schema.columns WHERE table_schema = current_schema() ORDER BY table_name, column_name`)
				if err != nil {
					return "", err
				}
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				return strings.Join(lines, "; "), err
			},
		}
	})
}

// schemaOf is query's rows, one string each, joined.
func schemaOf(ctx context.Context, query func(context.Context, string, ...any) (*sql.Rows, error), q string) (string, error) {
	rows, err := query(ctx, q)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return "", err
		}
		lines = append(lines, s)
	}
	return strings.Join(lines, "; "), rows.Err()
}
