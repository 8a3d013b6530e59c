package generator_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// brokerSpec has one handed-in job, which consumes from CONSUME and whose
// effect publishes to PUBLISH (each line dropped when empty).
const brokerSpec = `version: 1
package: feed
dialects: [sqlite]
jobs:
  - name: feed
    unit:
      type: Event
      fields:
        - event_id: string
      key: "event:{event_id}"
    source:
      none: {}
CONSUME
    effects:
      - name: announce
        key: "announce:{event_id}"
PUBLISH
`

// The brokers' packages, by what imports them.
var brokerImports = []string{
	"github.com/idemgen/idemgen/idem/idembroker",
	"github.com/idemgen/idemgen/idem/idemnats", "github.com/nats-io/nats.go/jetstream",
	"github.com/idemgen/idemgen/idem/idemamqp", "github.com/rabbitmq/amqp091-go",
	"github.com/idemgen/idemgen/idem/idemkafka", "github.com/twmb/franz-go/pkg/kgo",
}

// TestBrokerImports: a generated package imports a broker's client and
// adapter only when one of its jobs consumes from that broker, and
// idembroker only when it consumes or publishes at all, so a service that
// uses no broker links none.
func TestBrokerImports(t *testing.T) {
	for _, tc := range []struct {
		name, consume, publish string
		want                   []string
	}{
		{"none", "", "", nil},
		{"nats", "    consume: {broker: nats, from: events, group: feed}", "", brokerImports[:3]},
		{"rabbitmq", "    consume: {broker: rabbitmq, from: events, group: feed}", "", []string{brokerImports[0], brokerImports[3], brokerImports[4]}},
		{"kafka", "    consume: {broker: kafka, from: events, group: feed}", "", []string{brokerImports[0], brokerImports[5], brokerImports[6]}},
		{"publish only", "", "        publish: {broker: kafka, to: events}", brokerImports[:1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := strings.NewReplacer("CONSUME\n", line(tc.consume), "PUBLISH\n", line(tc.publish)).Replace(brokerSpec)
			specPath := filepath.Join(dir, "idemgen.yaml")
			if err := os.WriteFile(specPath, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			files := generate(t, specPath, dir, "example.com/feed")
			var got []string
			for name, data := range files {
				if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
					continue
				}
				f, err := parser.ParseFile(token.NewFileSet(), name, data, parser.ImportsOnly)
				if err != nil {
					t.Fatal(err)
				}
				for _, imp := range f.Imports {
					path, _ := strconv.Unquote(imp.Path.Value)
					if slices.Contains(brokerImports, path) && !slices.Contains(got, path) {
						got = append(got, path)
					}
				}
			}
			slices.Sort(got)
			want := slices.Sorted(slices.Values(tc.want))
			if !slices.Equal(got, want) {
				t.Errorf("broker imports %v, want %v", got, want)
			}
		})
	}
}

func line(s string) string {
	if s == "" {
		return ""
	}
	return s + "\n"
}
