package spec

import (
	"strings"
	"testing"
)

const riverSpec = `version: 1
package: billing
dialects: [DIALECTS]
jobs:
  - name: sync
    unit:
      type: Invoice
      fields:
        - invoice_id: string
        - updated_at: time
      key: "inv:{invoice_id}"
    source:
      SOURCE
    river: RIVER
`

// TestRiverKey pins what the river key accepts and where a bad one is pointed at.
func TestRiverKey(t *testing.T) {
	const wm = "watermark: {field: updated_at, overlap: 10m}"
	for _, tc := range []struct {
		dialects, source, river, want string
	}{
		{"postgres", "none: {}", "{}", ""},
		{"postgres, sqlite", "none: {}", "{queue: payments}", ""},
		{"postgres", wm, "{every: 5m}", ""},
		{"postgres", "cursor: {}", "{queue: a-b_c1, every: 1s}", ""},
		{"sqlite", "none: {}", "{}", `r.yaml:14:12: job "sync": river needs the postgres dialect (River runs on PostgreSQL); add postgres to dialects`},
		{"postgres", "none: {}", "{every: 5m}", `r.yaml:14:20: job "sync": river every: a job of handed-in units (source: none) has no Run to schedule; units are enqueued with the generated insert helper`},
		{"postgres", wm, "{}", `r.yaml:14:12: job "sync": river: missing every (how often the periodic River job calls Run, e.g. every: 5m)`},
		{"postgres", wm, "{every: 10ms}", `r.yaml:14:20: job "sync": river every 10ms is shorter than River's smallest period, 1s`},
		{"postgres", "none: {}", "{queue: Bad Queue}", `r.yaml:14:20: job "sync": river queue "Bad Queue" is not a River queue name (lower-case letters and digits, joined by - or _, at most 64)`},
		{"postgres", "none: {}", "{queu: x}", `r.yaml:14:13: river: unknown key "queu" (did you mean queue?)`},
		{"postgres", "none: {}", "{every: soon}", `r.yaml:14:20: river every: "soon" is not a duration (use Go syntax such as 90s, 10m, 720h)`},
	} {
		data := strings.NewReplacer("DIALECTS", tc.dialects, "SOURCE", tc.source, "RIVER", tc.river).Replace(riverSpec)
		got := strings.TrimSpace(string(render(diagnose("r.yaml", []byte(data)))))
		if got != tc.want {
			t.Errorf("%s / %s / river: %s:\n got %s\nwant %s", tc.dialects, tc.source, tc.river, got, tc.want)
		}
	}
}
