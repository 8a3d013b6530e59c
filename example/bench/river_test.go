package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// The river measurement at 300 units a run on PostgreSQL: four runs (plain
// River and the generated worker, each queued one at a time and in bulk),
// each with every River job completed and, for the generated worker, every
// effect called once and done in the ledger; the ratio is printed.
func TestRiverSideBySide(t *testing.T) {
	url := os.Getenv("IDEMGEN_TEST_POSTGRES")
	if url == "" {
		t.Skip("IDEMGEN_TEST_POSTGRES is not set; set it to a PostgreSQL URL to run the river measurement")
	}
	var out bytes.Buffer
	res, err := run(t.Context(), []string{"-db", url, "-only", "river", "-river-n", "300", "-batch", "100", "-river-workers", "10", "-river-deadline", "2m"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.river == nil || len(res.river.runs) != 4 {
		t.Fatalf("river result %+v; want four runs", res.river)
	}
	seen := map[string]bool{}
	for _, r := range res.river.runs {
		seen[r.name()] = true
		if r.units != 300 || r.completed != 300 || r.worked != 300 || r.insert <= 0 || r.work <= 0 {
			t.Errorf("%s: %d units, %d River jobs completed, %d worked, insert %v, work %v; want 300 of each, timed",
				r.name(), r.units, r.completed, r.worked, r.insert, r.work)
		}
		if r.generated && (r.calls != 300 || r.effectDone != 300) {
			t.Errorf("%s: %d provider calls, %d effects done; want 300 each", r.name(), r.calls, r.effectDone)
		}
	}
	for _, name := range []string{"bare/one", "generated/one", "bare/bulk", "generated/bulk"} {
		if !seen[name] {
			t.Errorf("no %s run", name)
		}
	}
	if v := res.river.ratio(); !(v > 0) {
		t.Errorf("river/bare = %v; want a positive figure", v)
	}
	if !regexp.MustCompile(`(?m)^ratios: .* river/bare=[0-9.e+-]+$`).MatchString(out.String()) {
		t.Errorf("the ratios line has no river/bare figure")
	}
	if !strings.Contains(out.String(), "river/bare = generated worked/s") {
		t.Errorf("no river table")
	}
}

// On SQLite the measurement is skipped and says so: River runs on PostgreSQL.
func TestRiverSkippedOnSQLite(t *testing.T) {
	var out bytes.Buffer
	res, err := run(t.Context(), []string{"-only", "river"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if res.river != nil || !res.riverSkipped || !strings.Contains(out.String(), "river: skipped") || !strings.Contains(out.String(), "river/bare=n/a") {
		t.Errorf("river on SQLite: result %+v, skipped %v, output:\n%s\nwant skipped, said, and river/bare=n/a", res.river, res.riverSkipped, out.String())
	}
}
