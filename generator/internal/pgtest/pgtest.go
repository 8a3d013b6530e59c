// Package pgtest gives idemgen's own tests a PostgreSQL schema of their own.
package pgtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver
)

// EnvURL names the variable that holds the test database's URL.
const EnvURL = "IDEMGEN_TEST_POSTGRES"

// OpenSchema connects to the database at IDEMGEN_TEST_POSTGRES with
// search_path set to a new schema named prefix plus random hex, and drops
// that schema when the test ends. It returns nil when the variable is unset.
func OpenSchema(t testing.TB, prefix string) *sql.DB {
	t.Helper()
	pgURL := os.Getenv(EnvURL)
	if pgURL == "" {
		return nil
	}
	admin, err := sql.Open("pgx", pgURL)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := prefix + hex.EncodeToString(b)
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Close()
		if _, err := admin.Exec("DROP SCHEMA " + schema + " CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		admin.Close()
	})
	return db
}
