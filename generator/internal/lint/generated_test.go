package lint

import (
	"go/ast"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"

	"github.com/idemgen/idemgen/generator/internal/spec"
)

// The analyzers recognise generated code by its shapes. These tests hold
// them to what the generator really emits: the example's package and every
// golden package, so that a generator change that moves a shape fails here
// rather than silencing the checks.

// load type-checks the packages matching patterns in dir from source
// (their dependencies from export data) and scans their generated files.
func load(t *testing.T, dir string, patterns ...string) map[string]declared {
	t.Helper()
	if testing.Short() {
		t.Skip("loads generated packages with the go command")
	}
	cfg := &packages.Config{
		Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo,
		Dir:  dir,
	}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]declared{}
	for _, p := range pkgs {
		for _, e := range p.Errors {
			t.Errorf("%s: %v", p.PkgPath, e)
		}
		var gen []*ast.File
		for _, f := range p.Syntax {
			if isGenerated(f) {
				gen = append(gen, f)
			}
		}
		out[p.PkgPath] = scan(p.Types, p.TypesInfo, gen)
	}
	return out
}

func names[V any](m map[*types.TypeName]V) []string {
	var out []string
	for tn := range m {
		out = append(out, tn.Name())
	}
	slices.Sort(out)
	return out
}

func TestExampleShapes(t *testing.T) {
	d := load(t, "../../..", "./example/billing")["github.com/idemgen/idemgen/example/billing"]
	if got, want := names(d.units), []string{"Invoice", "Payment"}; !slices.Equal(got, want) {
		t.Fatalf("units = %v, want %v", got, want)
	}
	for tn, f := range d.units {
		want := map[string]*unitFact{
			"Invoice": {Key: "billing:invoice:{invoice_id}", KeyFields: []string{"InvoiceID"}},
			"Payment": {Key: "payments:event:{event_id}", KeyFields: []string{"EventID"}},
		}[tn.Name()]
		if f.Key != want.Key || !slices.Equal(f.KeyFields, want.KeyFields) {
			t.Errorf("unit %s = %v, want %v", tn.Name(), f, want)
		}
	}
	if got, want := names(d.effects), []string{"NotifyNewInvoice", "SendReceipt"}; !slices.Equal(got, want) {
		t.Errorf("effects = %v, want %v", got, want)
	}
	for tn, f := range d.effects {
		if f.Method != tn.Name() || f.KeyFunc != tn.Name()+"Key" || !strings.Contains(f.Key, "{") {
			t.Errorf("effect %s = %v", tn.Name(), f)
		}
	}
	adapters := map[string]string{}
	for a, e := range d.adapters {
		adapters[a.Name()] = e.Name()
	}
	if want := map[string]string{"NotifyNewInvoiceFunc": "NotifyNewInvoice", "SendReceiptFunc": "SendReceipt"}; !maps.Equal(adapters, want) {
		t.Errorf("adapters = %v, want %v", adapters, want)
	}
	if got, want := names(d.jobs), []string{"InvoiceSync", "PaymentWebhook"}; !slices.Equal(got, want) {
		t.Errorf("jobs = %v, want %v", got, want)
	}
}

// TestGoldenShapes checks every golden package against its spec: a unit
// per job whose key fields, read off the Key method, are the fields of
// the key template; an effect interface and adapter per effect that does
// not publish.
func TestGoldenShapes(t *testing.T) {
	dirs, err := filepath.Glob("../../../testdata/golden/*/idemgen.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden specs: %v", err)
	}
	found := load(t, "../../../testdata", "./golden/...")
	for _, specPath := range dirs {
		dir := filepath.Base(filepath.Dir(specPath))
		t.Run(dir, func(t *testing.T) {
			data, err := os.ReadFile(specPath)
			if err != nil {
				t.Fatal(err)
			}
			f, ds := spec.Parse(specPath, data)
			if ds.HasErrors() {
				t.Fatal(ds)
			}
			d := found["github.com/idemgen/idemgen/testdata/golden/"+dir]
			// A publishing effect has no interface: its provider is an
			// idembroker.Publisher.
			wantEffects := 0
			for _, j := range f.Jobs {
				for _, e := range j.Effects {
					if e.Publish == nil {
						wantEffects++
					}
				}
			}
			if len(d.units) != len(f.Jobs) || len(d.jobs) != len(f.Jobs) || len(d.effects) != wantEffects || len(d.adapters) != wantEffects {
				t.Errorf("%d units, %d jobs, %d effects, %d adapters; the spec has %d jobs and %d effects",
					len(d.units), len(d.jobs), len(d.effects), len(d.adapters), len(f.Jobs), wantEffects)
			}
			for tn, u := range d.units {
				fromTemplate := fieldsOfTemplate(tn.Type().Underlying().(*types.Struct), u.Key)
				slices.Sort(fromTemplate)
				if len(u.KeyFields) == 0 || !slices.Equal(u.KeyFields, fromTemplate) {
					t.Errorf("unit %s: key fields %v from Key(), %v from its template %q", tn.Name(), u.KeyFields, fromTemplate, u.Key)
				}
			}
		})
	}
}
