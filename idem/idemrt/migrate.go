package idemrt

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"strings"

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
		if strings.Contains(err.Error(), "already exists") {
			// Most often a destination the service's own migrations made.
			return fmt.Errorf("migrations: %w\n(a destination table the database already has, made by the service's own migrations? declare it adopt: true in the spec, and idemgen checks it instead of creating it)", err)
		}
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
