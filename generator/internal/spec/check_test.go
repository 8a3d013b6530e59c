package spec

import (
	"strings"
	"testing"
	"time"
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

const effectSpec = `version: 1
package: billing
dialects: [sqlite]
jobs:
  - name: invoice_sync
    unit:
      type: Invoice
      fields:
        - invoice_id: string
      key: "billing:invoice:{invoice_id}"
    source:
      none: {}
    effects:
      - name: notify
        key: "notify:{invoice_id}"
        SETTINGS
`

// TestEffectCallLimits pins how retry, timeout, rate and concurrency read
// and which values vet takes; testdata/bad has the ones it refuses. Rate
// and concurrency are read, then refused until the runtime keeps them.
func TestEffectCallLimits(t *testing.T) {
	for _, tc := range []struct {
		settings string
		want     string // "" for accepted, else the one diagnostic
		check    func(e Effect) bool
	}{
		{"retry: {initial: 2s, max: 10m}", "", func(e Effect) bool {
			return e.Retry.Initial.Value == 2*time.Second && e.Retry.Max.Value == 10*time.Minute && e.Retry.Pos == Pos{16, 16}
		}},
		{"retry: {initial: 1m, max: 1m}", "", nil},
		{"retry: {initial: 1h}", "", func(e Effect) bool { return e.Retry.Initial.Set && !e.Retry.Max.Set }},
		{"retry: {max: 1s}", "", nil},
		{"retry: {}", "", func(e Effect) bool { return !e.Retry.Initial.Set && !e.Retry.Max.Set }},
		{"retry: {initial: 61m}", `e.yaml:16:26: job "invoice_sync": effect "notify": retry max 1h (the default) is shorter than initial 61m; the wait starts at initial and doubles up to max`, nil},
		{"timeout: 4m59s", "", func(e Effect) bool { return e.Timeout.Value == 4*time.Minute+59*time.Second }},
		{"timeout: 5m", `e.yaml:16:18: job "invoice_sync": effect "notify": timeout 5m is not shorter than the lease 5m (the default); a call still running when the lease ends could be taken over and made twice at once`, nil},
		{"lease: 10m\n        timeout: 5m", "", nil},
		{"rate: 50/s", "", func(e Effect) bool {
			return e.Rate == Rate{N: 50, Per: time.Second, Text: "50/s", Pos: Pos{16, 15}, Set: true}
		}},
		{"rate: 600/m", "", func(e Effect) bool { return e.Rate.N == 600 && e.Rate.Per == time.Minute }},
		{`rate: "2147483647/h"`, "", func(e Effect) bool { return e.Rate.N == 2147483647 && e.Rate.Per == time.Hour }},
		{"rate: 50/d", `e.yaml:16:15: effect rate: "50/d" is not a rate (use N/s, N/m or N/h, N a positive integer, such as 50/s)`, nil},
		{"rate: 50 /s", `e.yaml:16:15: effect rate: "50 /s" is not a rate (use N/s, N/m or N/h, N a positive integer, such as 50/s)`, nil},
		{"concurrency: 1", "", func(e Effect) bool { return e.Concurrency.Value == 1 }},
		{"concurrency: 0", `e.yaml:16:22: job "invoice_sync": effect "notify": concurrency must be at least 1, not 0`, nil},
		{"circuit: {failures: 5, cool_down: 30s}", "", func(e Effect) bool {
			return e.Circuit.Failures.Value == 5 && e.Circuit.CoolDown.Value == 30*time.Second && e.Circuit.Pos == Pos{16, 18}
		}},
		{"circuit: {failures: 5}", `e.yaml:16:18: job "invoice_sync": effect "notify": circuit needs cool_down: how long it stays open before one probe call (circuit: {failures: 5, cool_down: 30s})`, nil},
		{"circuit: {cool_down: 30s}", `e.yaml:16:18: job "invoice_sync": effect "notify": circuit needs failures: how many failed calls in a row, across workers, open it (circuit: {failures: 5, cool_down: 30s})`, nil},
		{"circuit: {failures: 0, cool_down: 30s}", `e.yaml:16:29: job "invoice_sync": effect "notify": circuit failures must be between 1 and 2147483647, not 0`, nil},
		{"circuit: {failures: 3, cool_down: 10ms}", `e.yaml:16:43: job "invoice_sync": effect "notify": circuit cool_down must be at least 1s, not 10ms`, nil},
		{"circuit: {failures: 5, cool_down: 2s, max_cool_down: 3s}", "", func(e Effect) bool {
			return e.Circuit.MaxCoolDown.Value == 3*time.Second
		}},
		{"circuit: {failures: 5, cool_down: 30s, max_cool_down: 10s}", `e.yaml:16:63: job "invoice_sync": effect "notify": circuit max_cool_down must be at least its cool_down 30s, not 10s`, nil},
		{"circuit: 5", `e.yaml:16:18: circuit must be a mapping such as {failures: 5, cool_down: 30s}, not "5"`, nil},
		{"circuit: {failures: 3, cooldown: 1m}", `e.yaml:16:18: job "invoice_sync": effect "notify": circuit needs cool_down: how long it stays open before one probe call (circuit: {failures: 5, cool_down: 30s})
e.yaml:16:32: circuit: unknown key "cooldown" (did you mean cool_down?)`, nil},
		{"backoff: {initial: 1s}", `e.yaml:16:9: effect: unknown key "backoff" (did you mean retry?)`, nil},
		{"retries: 3", `e.yaml:16:9: effect: unknown key "retries" (did you mean max_attempts?)`, nil},
		{"retry: {initial: 1s, cap: 1m}", `e.yaml:16:30: retry: unknown key "cap" (did you mean max?)`, nil},
	} {
		data := strings.Replace(effectSpec, "SETTINGS", tc.settings, 1)
		got := strings.TrimSpace(string(render(diagnose("e.yaml", []byte(data)))))
		if got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.settings, got, tc.want)
			continue
		}
		if tc.check != nil {
			f, _ := Parse("e.yaml", []byte(data))
			if e := f.Jobs[0].Effects[0]; !tc.check(e) {
				t.Errorf("%s: read as %+v", tc.settings, e)
			}
		}
	}
}
