package crashsim

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/idem/idemtest"
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

// A crash site that leaves the same state as a later one is played once:
// nothing durable, no provider call and no other incarnation's hit lies
// between them. A batch's points inside its transaction are one crash and
// the points before it another (a read outside a transaction changes
// nothing); a write outside one, a provider call, a new incarnation and a
// change at the consumer's broker each begin a state of their own.
func TestDistinctCrashSites(t *testing.T) {
	job := &Job[struct{}]{Source: SourceCursorName}
	trace := []simHit{
		0:  {p: idemtest.PointRunStart, inc: 1},
		1:  {p: pointSQLBefore, detail: "auto SELECT clock_timestamp()", inc: 1},
		2:  {p: pointSQLAfter, detail: "auto SELECT clock_timestamp()", inc: 1},
		3:  {p: idemtest.PointBatchBegin, inc: 1},
		4:  {p: idemtest.PointUnitStart, detail: "k1", inc: 1},
		5:  {p: idemtest.PointUnitStart, detail: "k2", inc: 1},
		6:  {p: idemtest.PointUnitBeforeCommit, detail: "k2", inc: 1},
		7:  {p: pointSQLBefore, detail: "COMMIT", inc: 1},
		8:  {p: pointSQLAfter, detail: "COMMIT", inc: 1},
		9:  {p: idemtest.PointUnitAfterCommit, inc: 1},
		10: {p: idemtest.PointEffectClaimed, detail: "fx:k1", inc: 1},
		11: {p: pointSQLBefore, detail: "auto UPDATE limits SET", inc: 1},
		12: {p: pointSQLAfter, detail: "auto UPDATE limits SET", inc: 1},
		13: {p: idemtest.PointEffectBeforeCall, detail: "fx:k1", inc: 1},
		14: {p: idemtest.PointEffectAfterCall, detail: "fx:k1", inc: 1},
		15: {p: idemtest.PointEffectRecorded, detail: "fx:k1", inc: 1},
		16: {p: idemtest.PointRunStart, inc: 2},
		17: {p: idemtest.PointBatchStart, inc: 2, broker: 1},
		18: {p: idemtest.PointBatchBegin, inc: 2, broker: 1},
	}
	inTx := func(h simHit) bool { return simInTx(job, h) }
	if got, want := simCrashSites(trace, false), []int{0, 3, 4, 5, 6, 9, 10, 13, 14, 15, 16, 17, 18}; !slices.Equal(got, want) {
		t.Fatalf("simCrashSites = %v; want %v", got, want)
	}
	if got, want := distinctCrashSites(trace, false, inTx), []int{3, 6, 10, 13, 15, 16, 18}; !slices.Equal(got, want) {
		t.Errorf("distinctCrashSites = %v; want %v", got, want)
	}
	if got, want := distinctCrashSites(trace, true, inTx), simCrashSites(trace, true); !slices.Equal(got, want) {
		t.Errorf("with full, distinctCrashSites = %v; want every site %v", got, want)
	}
}

// A gate family's -short sample plays each effect clean and crashed once,
// the crash's offset after the effect's first call turning from one
// effect to the next.
func TestSampleGate(t *testing.T) {
	var plan []simScenario
	firstCall := map[string]int{"a": 10, "b": 40, "c": 70, "d": 100}
	for _, effect := range []string{"a", "b", "c", "d"} {
		sc := newScenario(famCircuit)
		sc.effect = effect
		plan = append(plan, sc)
		for _, dk := range gateCrashOffsets {
			sc := at(famCircuit, firstCall[effect]+dk)
			sc.effect, sc.crashAt = effect, []int{firstCall[effect] + dk}
			plan = append(plan, sc)
		}
	}
	var got []string
	for _, sc := range sampleGate(plan) {
		s := sc.effect + " clean"
		if len(sc.crashAt) > 0 {
			s = fmt.Sprintf("%s +%d", sc.effect, sc.crashAt[0]-firstCall[sc.effect])
		}
		got = append(got, s)
	}
	want := []string{"a clean", "a +2", "b clean", "b +7", "c clean", "c +15", "d clean", "d +2"}
	if !slices.Equal(got, want) {
		t.Errorf("sampleGate kept %v; want %v", got, want)
	}
}
