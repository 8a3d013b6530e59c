package idem

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/pressly/goose/v3"
)

// Migrate applies the embedded migrations with goose, recording versions in
// the package's own table so several generated packages can share a database.
func Migrate(ctx context.Context, db *sql.DB, dialect goose.Dialect, fsys fs.FS, table string) error {
	p, err := goose.NewProvider(dialect, db, fsys,
		goose.WithTableName(table), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
