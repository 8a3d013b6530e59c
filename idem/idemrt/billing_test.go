package idemrt_test

import (
	"context"
	"testing"

	"github.com/idemgen/idemgen/example/billing"
	"github.com/idemgen/idemgen/idem/internal/billingtest"
)

// The runtime's behaviour, tested through a real generated package: the
// example's billing (example/idemgen.yaml), on SQLite and, when
// IDEMGEN_TEST_POSTGRES is set, on PostgreSQL. The outside world those
// tests stand in (the billing service, the mail and receipt providers, a
// settable clock) and how they open the database are
// idem/internal/billingtest's.

// quiet drops the log.
var quiet = billingtest.Quiet

// rows is the invoices j wrote, by id; two rows of one id fail the test.
func rows(t *testing.T, j *billing.InvoiceSync) map[string]billing.Invoice {
	t.Helper()
	rs, err := j.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]billing.Invoice{}
	for _, r := range rs {
		if _, dup := out[r.InvoiceID]; dup {
			t.Fatalf("two rows for %s", r.InvoiceID)
		}
		out[r.InvoiceID] = r
	}
	return out
}
