package schema

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

func compile(t *testing.T) *jsonschema.Schema {
	t.Helper()
	sch, err := compiled()
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

// goAccepts is what idemgen vet says: no errors from Parse and Check.
func goAccepts(name string, data []byte) (bool, string) {
	_, ds := generator.ParseSpec(name, data)
	return !ds.HasErrors(), ds.Errors().Error()
}

func TestSchemaIsDraft2020(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal(JSON(), &m); err != nil {
		t.Fatal(err)
	}
	if m["$schema"] != "https://json-schema.org/draft/2020-12/schema" || m["$id"] != ID {
		t.Errorf("$schema %v, $id %v", m["$schema"], m["$id"])
	}
	compile(t)
}

// TestSpecsValidate: every spec idemgen accepts, the schema accepts, so an
// editor never flags a good spec.
func TestSpecsValidate(t *testing.T) {
	sch := compile(t)
	var paths []string
	for _, root := range []string{"../example", "../testdata"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				paths = append(paths, path)
			}
			return nil
		})
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	accepted := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := goAccepts(filepath.Base(path), data); !ok {
			continue
		}
		accepted++
		inst, err := instance(data)
		if err != nil {
			t.Errorf("%s: idemgen accepts it but YAML decoding fails: %v", path, err)
			continue
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s: idemgen accepts it, the schema does not:\n%v", path, err)
		}
	}
	if accepted == 0 {
		t.Fatal("no accepted spec found under example/ or testdata/")
	}
	t.Logf("%d of %d specs accepted by idemgen, all valid against the schema", accepted, len(paths))
}

const base = `version: 1
package: billing
out: gen/billing
dialects: [postgres, sqlite]
tables:
  ledger: billing_ledger
jobs:
  - name: invoice_sync
    doc: Copy invoices.
    version: 1
    unit:
      type: Invoice
      fields:
        - invoice_id: string
        - customer_id: string
        - amount_cents: int64
        - note: string?
        - updated_at: time
      key: "billing:invoice:{invoice_id}"
      max_attempts: 10
    source:
      watermark: {field: updated_at, overlap: 10m}
    destination:
      table: invoices
      unique: [invoice_id]
      write: upsert
      newer_wins: updated_at
      stage: false
    effects:
      - name: notify_new_invoice
        key: "notify:v{version}:{invoice_id}"
        version: 2
        when: inserted
        lease: 5m
        retention: 720h
        keep_result: true
        max_attempts: 5
        retry: {initial: 2s, max: 10m}
        timeout: 30s
`

// The consume cases' source: a consumer's job is handed its units.
const (
	wmSource    = "watermark: {field: updated_at, overlap: 10m}"
	consumeNATS = "none: {}\n    consume: {broker: nats, from: invoices.new, group: sync}"
)

// TestAgreement feeds the same specs to idemgen and to the schema: on the
// structural rules the schema can express they must agree.
func TestAgreement(t *testing.T) {
	sch := compile(t)
	for _, tc := range []struct {
		name     string
		old, new string // replace old by new in base
		accept   bool
	}{
		{"base", "", "", true},
		{"cursor source", "watermark: {field: updated_at, overlap: 10m}", "cursor: {}", true},
		{"none source, null", "watermark: {field: updated_at, overlap: 10m}", "none:", true},
		{"keep optional keys out", "    doc: Copy invoices.\n    version: 1\n", "", true},
		{"no destination, no effects", base[strings.Index(base, "    destination:"):], "", true},
		{"insert_once", "write: upsert\n      newer_wins: updated_at\n", "write: insert_once\n", true},
		{"all durations", "lease: 5m", "lease: 1h30m0.5s", true},
		{"parked table renamed", "ledger: billing_ledger", "parked: billing_parked", true},
		{"unit without max_attempts", "      max_attempts: 10\n", "", true},
		{"retry initial only", "{initial: 2s, max: 10m}", "{initial: 2s}", true},
		{"retry max only", "{initial: 2s, max: 10m}", "{max: 10m}", true},
		{"retry empty", "{initial: 2s, max: 10m}", "{}", true},
		{"circuit", "keep_result: true", "keep_result: true\n        circuit: {failures: 5, cool_down: 30s}", true},
		{"circuit without cool_down", "keep_result: true", "keep_result: true\n        circuit: {failures: 5}", false},
		{"circuit failures 0", "keep_result: true", "keep_result: true\n        circuit: {failures: 0, cool_down: 30s}", false},

		{"consume", wmSource, consumeNATS, true},
		{"consume with every key", wmSource, "none: {}\n    consume: {broker: rabbitmq, from: invoices, group: sync, headers: {customer_id: X-Customer}, batch: 20, ack_wait: 10m}", true},
		{"consume on a watermark job", "    destination:", "    consume: {broker: nats, from: invoices.new, group: sync}\n    destination:", false},
		{"consume unknown broker", wmSource, strings.Replace(consumeNATS, "nats", "nsq", 1), false},
		{"consume without group", wmSource, strings.Replace(consumeNATS, ", group: sync", "", 1), false},
		{"consume empty from", wmSource, strings.Replace(consumeNATS, "invoices.new", "''", 1), false},
		{"consume batch 0", wmSource, strings.Replace(consumeNATS, "sync}", "sync, batch: 0}", 1), false},
		{"consume header with a space", wmSource, strings.Replace(consumeNATS, "sync}", "sync, headers: {customer_id: 'X Customer'}}", 1), false},
		{"consume unknown key", wmSource, strings.Replace(consumeNATS, "sync}", "sync, stream: x}", 1), false},
		{"publish", "        timeout: 30s\n", "        timeout: 30s\n        publish: {broker: kafka, to: invoices.v1}\n", true},
		{"publish unknown broker", "        timeout: 30s\n", "        timeout: 30s\n        publish: {broker: sqs, to: invoices}\n", false},
		{"publish without to", "        timeout: 30s\n", "        timeout: 30s\n        publish: {broker: nats}\n", false},
		{"publish keep_result false", "keep_result: true", "keep_result: false\n        publish: {broker: nats, to: invoices.new}", false},

		// Unknown keys.
		{"unknown top key", "out:", "output:", false},
		{"unknown tables key", "ledger:", "ledgers:", false},
		{"unknown job key", "    doc:", "    docs:", false},
		{"unknown unit key", "      key: \"billing", "      keys: \"billing", false},
		{"unknown source kind", "watermark:", "watermarks:", false},
		{"unknown watermark key", "overlap: 10m", "overlap: 10m, lag: 1m", false},
		{"unknown destination key", "stage:", "staged:", false},
		{"unknown effect key", "keep_result:", "keep_results:", false},
		{"unknown unit key near max_attempts", "max_attempts: 10", "max_attempt: 10", false},
		{"unknown retry key", "{initial: 2s, max: 10m}", "{initial: 2s, maximum: 10m}", false},

		// Wrong enums.
		{"dialect", "[postgres, sqlite]", "[postgres, mysql]", false},
		{"field type", "amount_cents: int64", "amount_cents: int", false},
		{"nullable field type", "note: string?", "note: string??", false},
		{"write", "write: upsert", "write: replace", false},
		{"when", "when: inserted", "when: sometimes", false},
		{"version 2", "version: 1\npackage", "version: 2\npackage", false},

		// Wrong types.
		{"version as string", "version: 1\npackage", "version: \"1\"\npackage", false},
		{"package as number", "package: billing", "package: 42", false},
		{"dialects as string", "[postgres, sqlite]", "postgres", false},
		{"jobs as mapping", "jobs:\n  - name: invoice_sync", "jobs:\n  x:\n    name: invoice_sync", false},
		{"fields as mapping", "- invoice_id: string", "invoice_id: string", false},
		{"field with two pairs", "- invoice_id: string", "- invoice_id: string\n          other: string", false},
		{"unique as string", "unique: [invoice_id]", "unique: invoice_id", false},
		{"stage as string", "stage: false", "stage: \"no\"", false},
		{"keep_result as number", "keep_result: true", "keep_result: 1", false},
		{"max_attempts as string", "max_attempts: 5", "max_attempts: \"5\"", false},
		{"unit max_attempts as string", "max_attempts: 10", "max_attempts: \"10\"", false},
		{"lease as number", "lease: 5m", "lease: 300", false},
		{"lease not Go syntax", "lease: 5m", "lease: 5 minutes", false},
		{"retry as number", "retry: {initial: 2s, max: 10m}", "retry: 3", false},
		{"retry initial as number", "{initial: 2s, max: 10m}", "{initial: 2, max: 10m}", false},
		{"timeout not Go syntax", "timeout: 30s", "timeout: 30 seconds", false},
		{"effects as mapping", "    effects:\n      - name", "    effects:\n      x:\n        name", false},
		{"cursor with settings", "watermark: {field: updated_at, overlap: 10m}", "cursor: {page: 10}", false},
		{"two source kinds", "watermark: {field: updated_at, overlap: 10m}", "cursor: {}\n      none: {}", false},
		{"doc as number", "doc: Copy invoices.", "doc: 2024", false},

		// Missing required keys.
		{"no version", "version: 1\npackage", "package", false},
		{"no package", "package: billing\n", "", false},
		{"no dialects", "dialects: [postgres, sqlite]\n", "", false},
		{"no jobs", base[strings.Index(base, "jobs:"):], "", false},
		{"no job name", "  - name: invoice_sync\n    doc", "  - doc", false},
		{"no unit type", "      type: Invoice\n", "", false},
		{"no unit key", "      key: \"billing:invoice:{invoice_id}\"\n", "", false},
		{"no source", "    source:\n      watermark: {field: updated_at, overlap: 10m}\n", "", false},
		{"empty source", "    source:\n      watermark: {field: updated_at, overlap: 10m}\n", "    source: {}\n", false},
		{"no watermark overlap", "{field: updated_at, overlap: 10m}", "{field: updated_at}", false},
		{"no watermark field", "{field: updated_at, overlap: 10m}", "{overlap: 10m}", false},
		{"no destination table", "      table: invoices\n", "", false},
		{"no effect key", "        key: \"notify:v{version}:{invoice_id}\"\n", "", false},
		{"no effect name", "      - name: notify_new_invoice\n        key", "      - key", false},

		// Patterns and bounds the schema states too.
		{"job name CamelCase", "name: invoice_sync", "name: InvoiceSync", false},
		{"unit type lower-case", "type: Invoice", "type: invoice", false},
		{"field name with a dash", "- customer_id: string", "- customer-id: string", false},
		{"table with SQL", "table: invoices", "table: \"invoices; DROP TABLE x\"", false},
		{"package with a quote", "package: billing", "package: billing\"", false},
		{"package main", "package: billing", "package: main", false},
		{"absolute out", "out: gen/billing", "out: /etc", false},
		{"backslash out", "out: gen/billing", "out: gen\\billing", false},
		{"empty dialects", "[postgres, sqlite]", "[]", false},
		{"repeated dialect", "[postgres, sqlite]", "[postgres, postgres]", false},
		{"no jobs in list", base[strings.Index(base, "jobs:"):], "jobs: []\n", false},
		{"no fields", base[strings.Index(base, "      fields:"):strings.Index(base, "      key:")], "      fields: []\n", false},
		{"effect version 0", "version: 2", "version: 0", false},
		{"max_attempts 0", "max_attempts: 5", "max_attempts: 0", false},
		{"unit max_attempts 0", "max_attempts: 10", "max_attempts: 0", false},
		{"parked table with SQL", "ledger: billing_ledger", "parked: \"p; DROP TABLE x\"", false},
		{"empty unique", "unique: [invoice_id]", "unique: []", false},
		{"job name too long", "name: invoice_sync", "name: " + strings.Repeat("x", 49), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(base, tc.old) {
				t.Fatalf("base has no %q", tc.old)
			}
			data := []byte(strings.Replace(base, tc.old, tc.new, 1))
			goOK, why := goAccepts("agree.yaml", data)
			inst, err := instance(data)
			schemaOK := err == nil && sch.Validate(inst) == nil
			if goOK != tc.accept {
				t.Errorf("idemgen accepts: %v, want %v\n%s", goOK, tc.accept, why)
			}
			if schemaOK != tc.accept {
				msg := ""
				if err == nil {
					if verr := sch.Validate(inst); verr != nil {
						msg = verr.Error()
					}
				}
				t.Errorf("schema accepts: %v, want %v\n%s", schemaOK, tc.accept, msg)
			}
		})
	}
}
