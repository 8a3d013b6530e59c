package specspace

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/schema"
)

// TestDrawnSpecsAreValid: the first 300 specs of a few seeds all pass vet
// without a finding and the JSON schema an editor checks them with (which
// refused circuit's max_cool_down until a golden spec used it), and the
// same (seed, index) always draws the same spec. Parsing only: cheap
// enough for -short.
func TestDrawnSpecsAreValid(t *testing.T) {
	for _, seed := range []uint64{defaultSeed, 1, 2, 3} {
		for i := range 300 {
			c := draw(seed, i)
			if again := draw(seed, i); again.yaml() != c.yaml() {
				t.Fatalf("seed %d spec %d drew two different specs", seed, i)
			}
			f, ds := spec.Parse("idemgen.yaml", []byte(c.yaml()))
			if !ds.HasErrors() {
				ds = append(ds, spec.Check(f)...)
			}
			if len(ds) > 0 {
				t.Fatalf("seed %d spec %d: vet finds %v\n%s", seed, i, ds.Sorted(), c.yaml())
			}
			if err := schema.Validate([]byte(c.yaml())); err != nil {
				t.Fatalf("seed %d spec %d: vet accepts it, the schema does not: %v\n%s", seed, i, err, c.yaml())
			}
		}
	}
}

// TestDefaultRunCoversEveryValue: the default run's specs meet every value
// of every dimension the draw walks, the effects' options (which walk over
// the run's effects) as vet takes them, after fix.
func TestDefaultRunCoversEveryValue(t *testing.T) {
	seen := map[string]bool{}
	for i := range defaultN {
		c := draw(defaultSeed, i)
		src := c.source
		if c.stage {
			src += "+stage"
		}
		seen["source "+src] = true
		seen["dialects "+strings.Join(c.dialects, "+")] = true
		seen["key "+c.keyShape] = true
		seen["effects "+string(rune('0'+len(c.effects)))] = true
		seen["unit max_attempts "+string(rune('0'+c.unitMax))] = true
		switch {
		case !c.dest:
			seen["write nodest"] = true
		case c.newerWins != "":
			seen["write newer_wins"] = true
		default:
			seen["write "+c.write] = true
		}
		if c.dest {
			seen[fmt.Sprintf("adopt %v", c.adopt)] = true
		}
		for _, e := range c.effects {
			seen["when "+e.when] = true
			seen["effect max_attempts "+string(rune('0'+e.maxAttempts))] = true
			seen["retention "+e.retention] = true
			seen["lease "+e.lease+" timeout "+e.timeout] = true
			seen["rate "+e.rate] = true
			seen[fmt.Sprintf("concurrency %d", e.concurrency)] = true
		}
	}
	var want []string
	for _, s := range dimSource {
		want = append(want, "source "+s)
	}
	for _, d := range dimDialects {
		want = append(want, "dialects "+strings.Join(d, "+"))
	}
	for _, k := range dimKey {
		want = append(want, "key "+k)
	}
	for _, n := range dimEffects {
		want = append(want, "effects "+string(rune('0'+n)))
	}
	for _, n := range dimMax {
		want = append(want, "unit max_attempts "+string(rune('0'+n)))
	}
	for _, w := range dimWrite {
		want = append(want, "write "+w)
	}
	for _, w := range dimWhen {
		want = append(want, "when "+w)
	}
	for _, a := range dimAdopt {
		want = append(want, fmt.Sprintf("adopt %v", a))
	}
	for _, v := range dimRetention {
		want = append(want, "retention "+v)
	}
	for _, b := range dimBounds {
		want = append(want, "lease "+b[0]+" timeout "+b[1])
	}
	for _, v := range dimRate {
		want = append(want, "rate "+v)
	}
	for _, n := range dimConcurrency {
		want = append(want, fmt.Sprintf("concurrency %d", n))
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("the default run (seed %d, %d specs) never draws %s", defaultSeed, defaultN, w)
		}
	}
}

// TestShrinkNamesTheDimension: against a failure that needs insert_once
// and an effect with max_attempts 2, shrinking ends at a spec with just
// those, and names them as what makes it pass.
func TestShrinkNamesTheDimension(t *testing.T) {
	fails := func(c specCase) string {
		if c.dest && c.write == "insert_once" && slices.ContainsFunc(c.effects, func(e effect) bool { return e.maxAttempts == 2 }) {
			return "fails"
		}
		return ""
	}
	var start specCase
	found := false
	for i := range 300 {
		if start = draw(defaultSeed, i); fails(start) != "" && len(start.effects) > 1 {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("no drawn spec has insert_once and two effects, one with max_attempts 2")
	}
	s := shrink(start, "fails", 500, fails)
	if len(s.spec.effects) != 1 || s.spec.effects[0].maxAttempts != 2 || s.spec.write != "insert_once" || len(s.spec.keys) != 1 || s.spec.source != "none" {
		t.Fatalf("shrunk to\n%s", s.spec.yaml())
	}
	for _, need := range []string{"drop effect", "write: upsert", "no max_attempts"} {
		if !slices.ContainsFunc(s.needs, func(n string) bool { return strings.Contains(n, need) }) {
			t.Errorf("the reductions that make it pass (%q) do not name %q", s.needs, need)
		}
	}
}

// TestLongRunPairsTheDimensions: the long run (300 specs) draws
// every source with every write and every count of effects. Dimensions
// with as many values once walked in step, so seed 38 paired each write
// with one count of effects throughout, and never drew a handed-in
// newer_wins job with effects.
func TestLongRunPairsTheDimensions(t *testing.T) {
	seen := map[string]bool{}
	for i := range 300 {
		c := draw(defaultSeed, i)
		write := c.write
		switch {
		case !c.dest:
			write = "nodest"
		case c.newerWins != "":
			write = "newer_wins"
		}
		seen[fmt.Sprintf("%s %s %d effects", c.source, write, len(c.effects))] = true
	}
	for _, src := range []string{"none", "watermark", "cursor"} {
		for _, w := range dimWrite {
			for _, n := range dimEffects {
				if k := fmt.Sprintf("%s %s %d effects", src, w, n); !seen[k] {
					t.Errorf("300 specs of seed %d never draw a job with source %s", defaultSeed, k)
				}
			}
		}
	}
}
