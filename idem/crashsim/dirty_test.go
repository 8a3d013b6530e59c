package crashsim

import (
	"testing"

	"github.com/idemgen/idemgen/idem/idemrt"
)

// Which statements ask for the next point's check: what may change the
// progress, the destination or the ledger does; a read, or a write to the
// limits table alone, does not.
func TestChangesChecked(t *testing.T) {
	job := &Job[struct{}]{Tables: idemrt.Tables{Ledger: "shop_idem_ledger", Limits: "shop_idem_limits"}}
	for detail, want := range map[string]bool{
		"COMMIT":                            true,
		"auto INSERT INTO shop_idem_ledger": true,
		"auto UPDATE shop_idem_ledger SET":  true,
		"auto DELETE FROM shop_idem_ledger": true,
		"auto INSERT INTO orders":           true,
		"auto WITH moved AS":                true, // not plainly a read
		"auto select state FROM":            true, // not recognised: checked
		"auto SELECT gate, held_until,":     false,
		"auto UPDATE shop_idem_limits SET":  false,
		"auto INSERT INTO shop_idem_limits": false,
		"auto DELETE FROM shop_idem_limits": false,
		"tx UPDATE shop_idem_ledger SET":    false, // its COMMIT asks
		"BEGIN":                             false,
		"ROLLBACK":                          false,
	} {
		if got := job.changesChecked(detail); got != want {
			t.Errorf("changesChecked(%q) = %t, want %t", detail, got, want)
		}
	}
	// A package generated before Job had its tables: every write is checked.
	old := &Job[struct{}]{}
	if !old.changesChecked("auto UPDATE shop_idem_limits SET") {
		t.Error("without Tables, a write to a limits table skipped the check")
	}
}
