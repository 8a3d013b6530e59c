package billingtest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem/idemops"
)

// OpsDB is a billing database with the operations view of it.
type OpsDB struct {
	DB
	Ops *idemops.DB
}

// EachOpsDB is EachDB with the operations view of each database.
func EachOpsDB(t *testing.T, fn func(t *testing.T, db OpsDB)) {
	EachDB(t, func(t *testing.T, db DB) {
		ops, err := idemops.New(context.Background(), db.SQL, db.Store.Runtime(), db.Dialect, billing.OpsPackage(), Quiet)
		if err != nil {
			t.Fatal(err)
		}
		fn(t, OpsDB{DB: db, Ops: ops})
	})
}

// NewOpsFixture is a fixture for the operations tests: its clock starts
// half an hour behind the wall clock (the operations view reads recent
// activity), and its billing service serves a window in one page.
func NewOpsFixture() *Fixture {
	return newFixture(time.Now().UTC().Truncate(time.Minute).Add(-30*time.Minute), 0)
}

// The effect keys of the operations scenario's invoices (notify_new_invoice, v2).
const (
	ParkedKey = "notify:new-invoice:v2:inv-1" // bounced: parked at its first attempt
	DoneKey   = "notify:new-invoice:v2:inv-2" // sent
	LeasedKey = "notify:new-invoice:v2:inv-3" // owed, under worker-7's live lease
)

// OpsScenario fills the database for the operations tests: inv-1's notice
// parked (the mailbox bounced), inv-2's sent, inv-3's owed under a live
// lease. The fixture's clock is the operations view's too, so its activity
// window holds the runs.
func OpsScenario(t *testing.T, db OpsDB) (*Fixture, *billing.InvoiceSync) {
	t.Helper()
	f := NewOpsFixture()
	db.Ops.SetClock(f.Clock.Now)
	f.Invoice("inv-1", 100, f.Base.Add(-3*time.Minute))
	f.Mailer.Bounce = true
	j := f.Job(t, db.Store)
	if rep := Run(t, j); rep.EffectsParked != 1 || rep.Inserted != 1 {
		t.Fatalf("first run: %s", rep)
	}
	f.Mailer.Bounce = false
	f.Clock.Advance(5 * time.Minute)
	f.Invoice("inv-2", 200, f.Clock.Now().Add(-2*time.Minute))
	f.Invoice("inv-3", 300, f.Clock.Now().Add(-time.Minute))
	if rep := Run(t, j); rep.EffectsDone != 2 {
		t.Fatalf("second run: %s", rep)
	}
	set := "UPDATE billing_idem_ledger SET state = 'pending', lease_owner = 'worker-7', lease_until = %s WHERE effect_key = '" + LeasedKey + "'"
	db.Exec(t, strings.Replace(set, "%s", "'2999-01-01T00:00:00.000000000Z'", 1), strings.Replace(set, "%s", "'2999-01-01'::timestamptz", 1))
	f.Clock.Advance(time.Minute)
	return f, j
}
