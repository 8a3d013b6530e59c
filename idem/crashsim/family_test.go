package crashsim

import (
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

var updateDocs = flag.Bool("update", false, "rewrite docs/guarantees.md's family table from the families' list")

// TestFamilyTable: docs/guarantees.md's table of the families is the list
// in simFamilies, each family's own about(): one copy of the fact. With
// -update it is rewritten from the list.
func TestFamilyTable(t *testing.T) {
	checkTable(t, "", familyTable())
	checkTable(t, "### The consumer families", consumerTable())
}

// checkTable holds the first family table of docs/guarantees.md after the
// heading after (the file's first table for "") to want.
func checkTable(t *testing.T, after, want string) {
	const path = "../../docs/guarantees.md"
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	from := strings.Index(doc, after)
	if from < 0 {
		t.Fatalf("%s: no heading %q", path, after)
	}
	start := strings.Index(doc[from:], "| family | what happens | guarantees |")
	if start < 0 {
		t.Fatalf("%s: no family table after %q", path, after)
	}
	start += from
	end := strings.Index(doc[start:], "\n\n")
	if end < 0 {
		t.Fatalf("%s: the family table after %q does not end", path, after)
	}
	got := doc[start : start+end+1]
	if got == want {
		return
	}
	if *updateDocs {
		if err := os.WriteFile(path, []byte(doc[:start]+want+doc[start+end+1:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's family table after %q is not the families' list (go test ./idem/crashsim -run TestFamilyTable -update rewrites it):\n%s", path, after, want)
}

// TestFamilyNames: every family has a name of its own and says what it
// proves.
func TestFamilyNames(t *testing.T) {
	seen := map[string]bool{}
	var abouts []familyAbout
	for _, f := range simFamilies[struct{}]() {
		abouts = append(abouts, f.about())
	}
	for _, f := range consumerFamilies[struct{}]() {
		abouts = append(abouts, f.about())
	}
	for _, a := range abouts {
		if a.name == "" || a.what == "" || len(a.guarantees) == 0 || seen[a.name] {
			t.Errorf("family %q: a name of its own, what it does and its guarantees are required", a.name)
		}
		seen[a.name] = true
	}
}

// longFirst keeps every scenario, plays a first wave of ordinary ones,
// then the long ones one in three, longest first.
func TestLongFirst(t *testing.T) {
	plan := []simScenario{newScenario("crash"), newScenario("subprocess"), newScenario("held-record")}
	for range cap(simSlots) + 6 {
		plan = append(plan, newScenario("crash"))
	}
	plan = append(plan, newScenario("circuit"), newScenario("crash"))
	got := longFirst[struct{}](plan)
	if len(got) != len(plan) {
		t.Fatalf("longFirst kept %d of %d scenarios", len(got), len(plan))
	}
	first := cap(simSlots)
	for _, sc := range got[:first] {
		if sc.family != "crash" {
			t.Fatalf("the first wave of %d holds %s; want ordinary scenarios only: %v", first, sc.family, got)
		}
	}
	var longs []string
	for _, sc := range got[first:] {
		if sc.family != "crash" {
			longs = append(longs, sc.family)
		}
	}
	if want := []string{"held-record", "circuit", "subprocess"}; !slices.Equal(longs, want) {
		t.Errorf("long scenarios after the first wave in order %v; want the longest first %v", longs, want)
	}
	if got[first].family != "held-record" || got[first+3].family != "circuit" {
		t.Errorf("long scenarios not one in three after the first wave: %v", got)
	}
}
