package golang

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
)

const limitsSpec = `version: 1
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
      - name: charge
        key: "charge:{invoice_id}"
        retry: {initial: 2s, max: 10m}
        timeout: 30s
        circuit: {failures: 5, cool_down: 30s, max_cool_down: 1m}
      - name: notify
        key: "notify:{invoice_id}"
        retry: {max: 90s}
      - name: archive
        key: "archive:{invoice_id}"
`

// jobSource resolves a spec and renders its first job's file, with runs of
// spaces (gofmt's alignment) collapsed to one.
func jobSource(t *testing.T, text string) string {
	t.Helper()
	f, ds := spec.Parse("limits.yaml", []byte(text))
	ds = append(ds, spec.Check(f)...)
	if len(ds) > 0 {
		t.Fatal(ds)
	}
	p, err := model.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := JobFile(p, p.Jobs[0]).Render(&b); err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(` +`).ReplaceAllString(b.String(), " ")
}

// effectLiteral returns the idemrt.Effect literal of the named effect.
func effectLiteral(t *testing.T, src, name string) string {
	t.Helper()
	at := strings.Index(src, "Name: \""+name+"\"")
	if at < 0 {
		t.Fatalf("no effect %s in\n%s", name, src)
	}
	// The effect's own brace ("\t\t{", or "\t\t}, {" after the effect
	// before it), not a nested literal's.
	start := max(strings.LastIndex(src[:at], "\n\t\t{")+1, strings.LastIndex(src[:at], "\n\t\t}, {")+5)
	end := strings.Index(src[at:], "\n\t\t}")
	return src[start : at+end]
}

// TestEffectCallLimits: retry, timeout and circuit reach the
// idemrt.Effect literal as the spec sets them, and an effect that sets none
// of them is emitted as before.
func TestEffectCallLimits(t *testing.T) {
	src := jobSource(t, limitsSpec)
	for _, tc := range []struct {
		effect     string
		want       []string
		wantNoneOf []string
	}{
		{"charge", []string{
			"Retry: idemrt.Backoff{\n",
			"Initial: 2 * time.Second,",
			"Max: 10 * time.Minute,",
			"Timeout: 30 * time.Second,",
			"Circuit: idemrt.Circuit{\n",
			"CoolDown: 30 * time.Second,",
			"Failures: 5,",
			"MaxCoolDown: 1 * time.Minute,",
		}, nil},
		{"notify", []string{"Retry: idemrt.Backoff{Max: 90 * time.Second}"}, []string{"Initial:", "Timeout:", "Circuit:"}},
		{"archive", nil, []string{"Retry:", "Timeout:", "Circuit:"}},
	} {
		lit := effectLiteral(t, src, tc.effect)
		for _, w := range tc.want {
			if !strings.Contains(lit, w) {
				t.Errorf("effect %s: no %q in\n%s", tc.effect, w, lit)
			}
		}
		for _, w := range tc.wantNoneOf {
			if strings.Contains(lit, w) {
				t.Errorf("effect %s: %q, which its spec does not set, in\n%s", tc.effect, w, lit)
			}
		}
	}
}
