package idemrt

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/pressly/goose/v3"
)

// Migrate applies the embedded migrations with goose, recording versions in
// the package's own table so several generated packages can share a database.
// It first checks the adopted destination tables (adopt: true) against the
// schema the migrations were planned from (idemgen.schema beside them): a
// table that does not fit refuses Migrate before it creates or changes
// anything, with the statements that make it fit.
func Migrate(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS, table string) error {
	adopted, err := adoptedShapes(fsys)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if err := CheckTables(ctx, db, dialect, adopted); err != nil {
		return fmt.Errorf("migrations: nothing was applied: %w", err)
	}
	p, err := goose.NewProvider(dialect, db, fsys,
		goose.WithTableName(table), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		if strings.Contains(err.Error(), "already exists") {
			// Most often a destination the service's own migrations made.
			return fmt.Errorf("migrations: %w\n(a destination table the database already has, made by the service's own migrations? declare it adopt: true in the spec, and idemgen checks it instead of creating it)", err)
		}
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// schemaFile is the file beside a package's migrations that describes the
// schema they produce (generator/internal/sqlgen's Schema, as JSON after
// comment lines): what Migrate reads of it, the adopted tables.
const schemaFile = "idemgen.schema"

// adoptedShapes reads the adopted destination tables from the schema file
// in fsys, as the generated package's adopted tables list them; none
// without the file (a package generated before it).
func adoptedShapes(fsys fs.FS) ([]TableShape, error) {
	data, err := fs.ReadFile(fsys, schemaFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var body strings.Builder
	for line := range strings.Lines(string(data)) {
		if !strings.HasPrefix(line, "//") {
			body.WriteString(line)
		}
	}
	var file struct {
		Schema struct {
			Tables []struct {
				Name, Job string
				Adopted   bool
				Columns   []struct {
					Name, Type, Default string
					NotNull             bool `json:"not_null"`
				}
				Unique struct{ Columns []string }
			}
		}
	}
	if err := json.Unmarshal([]byte(body.String()), &file); err != nil {
		return nil, fmt.Errorf("read %s: %w", schemaFile, err)
	}
	var out []TableShape
	for _, t := range file.Schema.Tables {
		if !t.Adopted {
			continue
		}
		shape := TableShape{Job: t.Job, Name: t.Name, Unique: t.Unique.Columns}
		for _, c := range t.Columns {
			shape.Columns = append(shape.Columns, ColumnShape{Name: c.Name, Type: c.Type, Nullable: !c.NotNull, Default: c.Default})
		}
		out = append(out, shape)
	}
	return out, nil
}
