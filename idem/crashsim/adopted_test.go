package crashsim

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// A type of several words is changed whole: "d1 text precision" is no
// table (a drawn spec's float64 column on PostgreSQL found it).
func TestColumnTypeOfSeveralWords(t *testing.T) {
	for line, want := range map[string]string{
		"    d1 double precision NOT NULL,\n":  "double precision",
		"    d2 timestamptz,\n":                "timestamptz",
		"    n bigint NOT NULL DEFAULT 1,\n":   "bigint",
		"    t timestamp with time zone\n":     "timestamp with time zone",
		"    k1 TEXT NOT NULL COLLATE BINARY,": "TEXT",
	} {
		if got := columnType(line); got != want {
			t.Errorf("columnType(%q) = %q, want %q", line, got, want)
		}
	}
	ddl := "CREATE TABLE rows (\n    k1 text NOT NULL,\n    d1 double precision NOT NULL,\n    CONSTRAINT rows_unique UNIQUE (k1)\n);"
	tb := idemrt.TableShape{Name: "rows", Unique: []string{"k1"}, Columns: []idemrt.ColumnShape{{Name: "k1", Type: "text"}, {Name: "d1", Type: "double precision"}}}
	for _, m := range misfitsOf(ddl, tb, true) {
		if strings.Contains(m.ddl, "precision NOT NULL") && !strings.Contains(m.ddl, "double precision") {
			t.Errorf("misfit %q keeps half a type:\n%s", m.name, m.ddl)
		}
	}
}
