package ops

import (
	"os"
	"testing"

	"github.com/idemgen/idemgen/generator"
	"github.com/idemgen/idemgen/idem/idemops"
)

// The runtime's idemops.TablesOf, which a service mounting the operations
// page uses, names the tables as the generator does when the spec does
// not rename them.
func TestTablesOfIsTheGeneratorsNaming(t *testing.T) {
	src, err := os.ReadFile("../../../../example/idemgen.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, ds := generator.ParseSpec("idemgen.yaml", src)
	if ds.HasErrors() {
		t.Fatal(ds)
	}
	pkg, err := generator.Resolve(f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := idemops.TablesOf(pkg.Name), Describe(pkg).Tables; got != want {
		t.Fatalf("idemops.TablesOf(%q) = %+v, the generator names them %+v", pkg.Name, got, want)
	}
	if len(Describe(pkg).Jobs) != 2 || Describe(pkg).Jobs[0].Effects[0].Version != 2 {
		t.Fatalf("Describe: %+v", Describe(pkg).Jobs)
	}
}
