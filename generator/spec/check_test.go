package spec

import (
	"strings"
	"testing"
)

const keySpec = `version: 1
package: billing
dialects: [sqlite]
jobs:
  - name: invoice_sync
    unit:
      type: Invoice
      fields:
        - invoice_id: string
        - customer_id: string
      key: KEY
    source:
      none: {}
`

// TestKeyTemplates pins how placeholders read and where a bad one is pointed at.
func TestKeyTemplates(t *testing.T) {
	for _, tc := range []struct {
		key, want string // want: "" for accepted, else the one diagnostic
	}{
		{`"a:{invoice_id}"`, ""},
		{`"a:{ invoice_id }"`, ""},
		{`"a:{sha256(invoice_id,customer_id)}"`, ""},
		{`'a:{sha256( invoice_id , customer_id )}'`, ""},
		{`a:{invoice_id}:{sha256(customer_id)}`, ""},
		{`"a:{sha256( invoice_id, custmer )}"`, `k.yaml:11:36: job "invoice_sync": key placeholder {sha256( invoice_id, custmer )}: custmer is not a unit field (did you mean customer_id?)`},
		{`"a:\t{invoce_id}"`, `k.yaml:11:12: job "invoice_sync": key placeholder {invoce_id} is not a unit field (did you mean invoice_id?)`},
		{`'it''s:{invoce_id}'`, `k.yaml:11:12: job "invoice_sync": key placeholder {invoce_id} is not a unit field (did you mean invoice_id?)`},
		{`"é:{invoce_id}"`, `k.yaml:11:15: job "invoice_sync": key placeholder {invoce_id} is not a unit field (did you mean invoice_id?)`},
		{`"{NOW}:{invoice_id}"`, `k.yaml:11:13: job "invoice_sync": key placeholder {NOW} is tied to the run; keys must be deterministic`},
		{`"{Random()}:{invoice_id}"`, `k.yaml:11:13: job "invoice_sync": key placeholder {Random()} is tied to the run; keys must be deterministic`},
		{`"{job_version}:{invoice_id}"`, `k.yaml:11:13: job "invoice_sync": key placeholder {job_version} is only available in effect keys`},
	} {
		data := strings.Replace(keySpec, "KEY", tc.key, 1)
		got := strings.TrimSpace(string(render(diagnose("k.yaml", []byte(data)))))
		if got != tc.want {
			t.Errorf("key %s:\n got %s\nwant %s", tc.key, got, tc.want)
		}
	}
}

// TestCheckSurvivesEmptyValues: Check takes whatever Parse returns.
func TestCheckSurvivesEmptyValues(t *testing.T) {
	if ds := Check(nil); ds != nil {
		t.Errorf("Check(nil) = %v", ds)
	}
	f := &File{Name: "x.yaml", Jobs: []Job{{}, {Destination: &Destination{}, Effects: []Effect{{}}}}}
	if ds := Check(f); !ds.HasErrors() {
		t.Error("an empty spec passed Check")
	}
}
