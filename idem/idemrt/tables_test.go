package idemrt_test

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemrt"
)

func TestTableNamesPutAPackagesTablesInPlace(t *testing.T) {
	n := idemrt.NewTableNames(idemrt.Tables{Ledger: "hk_ledger", Progress: "hk_progress", Seen: "billing_idem_seen", Parked: "p"})
	q := "DELETE FROM idem_seen AS s WHERE NOT EXISTS (SELECT 1 FROM idem_ledger l WHERE l.job = s.job) AND s.job IN (SELECT job FROM idem_progress UNION SELECT job FROM idem_parked)"
	got, err := n.SQL(q)
	want := "DELETE FROM billing_idem_seen AS s WHERE NOT EXISTS (SELECT 1 FROM hk_ledger l WHERE l.job = s.job) AND s.job IN (SELECT job FROM hk_progress UNION SELECT job FROM p)"
	if err != nil || got != want {
		t.Fatalf("SQL =\n%s, %v; want\n%s", got, err, want)
	}
	if again, _ := n.SQL(q); again != want {
		t.Errorf("the cached rewrite differs: %s", again)
	}
}

func TestTableNamesRefuseANameThatIsNotAnIdentifier(t *testing.T) {
	for _, bad := range []string{"", "a b", "x; DROP TABLE y", `"quoted"`, "1st"} {
		n := idemrt.NewTableNames(idemrt.Tables{Ledger: "l", Progress: "p", Seen: bad, Parked: "k"})
		_, err := n.SQL("SELECT 1 FROM idem_seen")
		if err == nil || !strings.Contains(err.Error(), "seen table") {
			t.Errorf("seen table named %q: err = %v, want one naming the seen table", bad, err)
		}
	}
}
