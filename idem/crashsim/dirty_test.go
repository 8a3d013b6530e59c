package crashsim

import (
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// What a statement changes of what the checks read: a write outside a
// transaction, what it writes; a COMMIT, what its transaction wrote; a
// read, or a write to a table no check reads, nothing.
func TestChanged(t *testing.T) {
	job := &Job[struct{}]{Tables: idemrt.Tables{Ledger: "shop_idem_ledger", Progress: "shop_idem_progress", Limits: "shop_idem_limits", Seen: "shop_idem_seen", Parked: "shop_idem_parked"}}
	for detail, want := range map[string]simChange{
		"auto INSERT INTO shop_idem_ledger":    changedLedger,
		"auto UPDATE shop_idem_ledger SET":     changedLedger,
		"auto DELETE FROM shop_idem_ledger":    changedLedger,
		"auto INSERT INTO shop_idem_progress":  changedProgress,
		"auto INSERT INTO orders":              changedRows,
		"auto INSERT INTO orders(order_id,":    changedRows,
		`auto UPDATE "s".shop_idem_ledger SET`: changedLedger,
		"auto WITH moved AS":                   changedAll, // not plainly one table
		"auto select state FROM":               0,
		"auto SELECT gate, held_until,":        0,
		"auto UPDATE shop_idem_limits SET":     0,
		"auto INSERT INTO shop_idem_limits":    0,
		"auto DELETE FROM shop_idem_parked":    0,
		"auto INSERT INTO shop_idem_seen":      0,
		"tx UPDATE shop_idem_ledger SET":       0, // its COMMIT says
		"BEGIN":                                0,
		"ROLLBACK":                             0,
		"COMMIT":                               changedAll, // its BEGIN was not seen
	} {
		if got := job.changed(detail, nil); got != want {
			t.Errorf("changed(%q) = %b, want %b", detail, got, want)
		}
	}
	// A package generated before Job had its tables: every write changes all.
	old := &Job[struct{}]{}
	if got := old.changed("auto UPDATE shop_idem_limits SET", nil); got != changedAll {
		t.Errorf("without Tables, a write to a limits table changed %b, want all", got)
	}
}

// A transaction's COMMIT carries the tables written since its BEGIN: not
// those of a transaction rolled back, and still those written before a
// ROLLBACK TO a savepoint.
func TestCommitCarriesItsWrites(t *testing.T) {
	job := &Job[struct{}]{Tables: idemrt.Tables{Ledger: "l", Progress: "p", Limits: "lim"}}
	for _, c := range []struct {
		stmts []string
		want  simChange
	}{
		{[]string{"BEGIN; SET LOCAL lock_timeout = 10", "UPDATE l SET state = 1", "COMMIT"}, changedLedger},
		{[]string{"BEGIN", "INSERT INTO l (a) VALUES (1)", "INSERT INTO orders AS d (a)", "INSERT INTO p VALUES (1)", "COMMIT"}, changedAll},
		{[]string{"BEGIN", "SELECT * FROM l", "UPDATE lim SET owner = 1", "COMMIT"}, 0},
		{[]string{"BEGIN", "UPDATE l SET a = 1", "ROLLBACK", "BEGIN", "UPDATE p SET a = 1", "COMMIT"}, changedProgress},
		{[]string{"BEGIN", "UPDATE l SET a = 1", "SAVEPOINT x", "INSERT INTO orders (a)", "ROLLBACK TO SAVEPOINT x", "INSERT INTO orders AS d (a)", "COMMIT"}, changedLedger | changedRows},
		{[]string{"BEGIN", "-- name: Q :many\nWITH x AS (UPDATE l SET a = 1) SELECT 1", "COMMIT"}, changedAll},
		{[]string{"BEGIN", "DELETE FROM \"p\"", "end"}, changedProgress},
	} {
		var s simStatements
		var got simChange
		for _, q := range c.stmts {
			detail, wrote := s.classify(q)
			got |= job.changed(detail, wrote)
		}
		if got != c.want {
			t.Errorf("%s: changed %b, want %b", strings.Join(c.stmts, "; "), got, c.want)
		}
	}
}
