package main

import (
	"bytes"
	"os"
	"testing"
)

// uiSmoke runs the -ui measurement alone at a small size: run fails when a
// page is not served or lacks its rows.
func uiSmoke(t *testing.T, extra ...string) {
	t.Helper()
	var out bytes.Buffer
	res, err := run(t.Context(), append([]string{"-only", "ui", "-ui", "20000", "-status-exact", "1000", "-status-sample", "10000"}, extra...), &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.ui == nil || len(res.ui.pages) != 10 {
		t.Fatalf("ui result %+v, want the baseline and 9 pages timed", res.ui)
	}
	for _, p := range res.ui.pages {
		if p.took <= 0 || (p.bytes == 0 && !p.before) {
			t.Errorf("page %s measured nothing: %+v", p.name, p)
		}
	}
}

func TestUISQLite(t *testing.T) { uiSmoke(t) }

func TestUIPostgres(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the ui measurement there too")
	}
	uiSmoke(t, "-db", url)
}
