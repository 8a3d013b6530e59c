package specspace

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The variants' settings, from the environment (docs/specspace.md).
const (
	envVariants     = "IDEMGEN_VARIANTS"      // 1: play the variants (they take tens of minutes)
	envVariantsOnly = "IDEMGEN_VARIANTS_ONLY" // a regexp on a variant's name, source/dimension
	envVariantsFull = "IDEMGEN_VARIANTS_FULL" // 1: the whole matrix, not the -short sample
)

// variantSources are the hand-written specs the variants start from: the
// goldens' and the example's, each a service as a team writes one (several
// jobs, effects with options of their own), which the drawn specs (one
// job each) do not reach.
var variantSources = []string{
	"testdata/golden/spec_values",
	"testdata/golden/modelling",
	"testdata/golden/brokers",
	"testdata/golden/staged",
	"testdata/golden/cursor",
	"testdata/golden/types",
	"testdata/golden/takeover_park",
	"testdata/golden/pgonly_service",
	"testdata/golden/insert_once_ahead",
	"testdata/golden/none_nodest",
	"testdata/golden/adopted",
	"testdata/golden/sha256key",
	"example/stress",
	"example",
}

// A dimension changes one value of a spec, in every job or effect it
// applies to.
type dimension struct {
	name   string
	change func(doc *yaml.Node)
}

// dimensions are the values a user changes in a spec they were given,
// each to the edge of its range: what the families must read from the
// spec rather than assume.
var dimensions = []dimension{
	{"retention-short", eachEffect(func(e *yaml.Node) {
		// an hour, or the effect's lease where that is longer (vet warns
		// of a retention under the lease)
		r := "1h"
		if durationOf(e, "lease", 5*time.Minute) > time.Hour {
			r = scalar(e, "lease")
		}
		setScalar(e, "retention", r)
	})},
	{"concurrency-1", eachEffect(func(e *yaml.Node) { setScalar(e, "concurrency", "1") })},
	{"lease-min", eachEffect(func(e *yaml.Node) {
		setScalar(e, "lease", "1s")
		setScalar(e, "timeout", "500ms")
		if durationOf(e, "retention", time.Hour) < time.Second {
			setScalar(e, "retention", "1s")
		}
	})},
	{"timeout-short", eachEffect(func(e *yaml.Node) { setScalar(e, "timeout", "5ms") })},
	{"rate-per-hour", eachEffect(func(e *yaml.Node) { setScalar(e, "rate", "2/h") })},
	{"rate-per-minute", eachEffect(func(e *yaml.Node) { setScalar(e, "rate", "1/m") })},
	{"rate-per-second", eachEffect(func(e *yaml.Node) { setScalar(e, "rate", "1000/s") })},
	{"circuit", eachEffect(func(e *yaml.Node) { setFlow(e, "circuit", "{failures: 1, cool_down: 1s}") })},
	{"effect-max-attempts-1", eachEffect(func(e *yaml.Node) { setScalar(e, "max_attempts", "1") })},
	{"keep-result-flipped", eachEffect(func(e *yaml.Node) {
		setScalar(e, "keep_result", fmt.Sprint(scalar(e, "keep_result") != "true"))
	})},
	{"when-changed", eachEffectOfDest(func(e *yaml.Node) { setScalar(e, "when", "changed") })},
	{"when-always", eachEffect(func(e *yaml.Node) { setScalar(e, "when", "always") })},
	{"retry", eachEffect(func(e *yaml.Node) { setFlow(e, "retry", "{initial: 1s, max: 1h}") })},
	{"effect-version-2", eachEffect(func(e *yaml.Node) { setScalar(e, "version", "2") })},
	{"unit-max-attempts-1", eachJob(func(j *yaml.Node) {
		if u := get(j, "unit"); u != nil {
			setScalar(u, "max_attempts", "1")
		}
	})},
	{"postgres-only", func(doc *yaml.Node) { setFlow(doc, "dialects", "[postgres]") }},
	{"sqlite-only", func(doc *yaml.Node) { setFlow(doc, "dialects", "[sqlite]") }},
	{"hashed-key", eachJob(hashKey)},
	{"adopt", eachJob(func(j *yaml.Node) {
		if d := get(j, "destination"); d != nil && d.Kind == yaml.MappingNode {
			setScalar(d, "adopt", "true")
		}
	})},
}

// TestSpecVariants plays, for each hand-written spec, the spec with one
// dimension changed: each variant vet accepts (warnings allowed, as a user
// may) must generate, build and pass its generated crash simulation on
// SQLite and, with IDEMGEN_TEST_POSTGRES set, on PostgreSQL. A variant vet
// refuses is listed, not failed: it is no spec a user could run.
func TestSpecVariants(t *testing.T) {
	if os.Getenv(envVariants) != "1" {
		t.Skipf("the spec variants take tens of minutes; %s=1 plays them", envVariants)
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not available: cannot build the variants")
	}
	var only *regexp.Regexp
	if s := os.Getenv(envVariantsOnly); s != "" {
		if only, err = regexp.Compile(s); err != nil {
			t.Fatalf("%s: %v", envVariantsOnly, err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := moduleDir(t)
	type variant struct{ name, pkg string }
	var played []variant
	var refused []string
	for _, src := range variantSources {
		data, err := os.ReadFile(filepath.Join(root, src, "idemgen.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range append([]dimension{{name: "as-is", change: func(*yaml.Node) {}}}, dimensions...) {
			name := src + "/" + d.name
			if only != nil && !only.MatchString(name) {
				continue
			}
			pkg := packageName(src, d.name)
			yml, changed, err := changeSpec(data, pkg, d.change)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !changed && d.name != "as-is" {
				continue // nothing in this spec has the dimension
			}
			switch err := writeSpec(dir, pkg, yml, true); {
			case err == nil:
				played = append(played, variant{name, pkg})
			case strings.Contains(err.Error(), errVetRefuses.Error()):
				refused = append(refused, name+": "+firstLine(err.Error()))
			default:
				t.Errorf("%s does not generate: %v\n%s", name, err, yml)
			}
		}
	}
	for _, r := range refused {
		t.Logf("vet refuses %s", r)
	}
	flags := []string{"-short"}
	if os.Getenv(envVariantsFull) == "1" {
		flags = nil
	}
	start := time.Now()
	results := goTestArgs(t, gocmd, dir, "./...", flags...)
	t.Logf("%d variants generated, built and crash-tested (%v) in %s; PostgreSQL: %v",
		len(played), flags, time.Since(start).Round(time.Second), os.Getenv("IDEMGEN_TEST_POSTGRES") != "")
	for _, v := range played {
		out, ok := results[specModule+"/"+v.pkg]
		switch {
		case ok && out == "":
			t.Logf("ok   %s", v.name)
		case !ok:
			t.Errorf("%s: no test result for its package", v.name)
		default:
			t.Errorf("%s fails (%s/%s):\n%s", v.name, dir, v.pkg, tail(out, 60))
		}
	}
}

// changeSpec renders the spec data with change applied and its package
// named pkg, generated into its own directory; changed is false when the
// change left the spec as it was.
func changeSpec(data []byte, pkg string, change func(*yaml.Node)) (out string, changed bool, err error) {
	var doc, before yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", false, err
	}
	if err := yaml.Unmarshal(data, &before); err != nil {
		return "", false, err
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return "", false, fmt.Errorf("not a mapping")
	}
	m := doc.Content[0]
	change(m)
	b1, err := yaml.Marshal(&before)
	if err != nil {
		return "", false, err
	}
	b2, err := yaml.Marshal(&doc)
	if err != nil {
		return "", false, err
	}
	setScalar(m, "package", pkg)
	setScalar(m, "out", ".")
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return "", false, err
	}
	return string(b), string(b1) != string(b2), nil
}

// packageName is a Go package name for the variant: the source's last
// element and the dimension.
func packageName(src, dim string) string {
	return strings.NewReplacer("-", "_", "/", "_").Replace("v_" + filepath.Base(src) + "_" + dim)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// eachJob applies change to every job of the spec.
func eachJob(change func(job *yaml.Node)) func(*yaml.Node) {
	return func(doc *yaml.Node) {
		jobs := get(doc, "jobs")
		if jobs == nil {
			return
		}
		for _, j := range jobs.Content {
			if j.Kind == yaml.MappingNode {
				change(j)
			}
		}
	}
}

// eachEffect applies change to every effect of every job.
func eachEffect(change func(effect *yaml.Node)) func(*yaml.Node) {
	return eachJob(func(j *yaml.Node) { effectsOf(j, change) })
}

// eachEffectOfDest is eachEffect on the jobs with a destination (when:
// changed asks what the write did).
func eachEffectOfDest(change func(effect *yaml.Node)) func(*yaml.Node) {
	return eachJob(func(j *yaml.Node) {
		if get(j, "destination") != nil {
			effectsOf(j, change)
		}
	})
}

// effectsOf applies change to every effect of job.
func effectsOf(job *yaml.Node, change func(effect *yaml.Node)) {
	if fx := get(job, "effects"); fx != nil {
		for _, e := range fx.Content {
			if e.Kind == yaml.MappingNode {
				change(e)
			}
		}
	}
}

// hashKey rewrites a job's unit key "prefix:{a}:{b}" as
// "prefix:{sha256(a, b)}", the same fields hashed.
func hashKey(j *yaml.Node) {
	u := get(j, "unit")
	if u == nil {
		return
	}
	key := scalar(u, "key")
	if key == "" || strings.Contains(key, "sha256(") {
		return
	}
	var fields []string
	for _, m := range regexp.MustCompile(`\{([a-z_0-9]+)\}`).FindAllStringSubmatch(key, -1) {
		if !slices.Contains(fields, m[1]) {
			fields = append(fields, m[1])
		}
	}
	if len(fields) == 0 {
		return
	}
	prefix, _, _ := strings.Cut(key, "{")
	setScalar(u, "key", prefix+"{sha256("+strings.Join(fields, ", ")+")}")
}

// get is the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(m *yaml.Node, key string) string {
	if v := get(m, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// durationOf is m's duration under key, or def.
func durationOf(m *yaml.Node, key string, def time.Duration) time.Duration {
	d, err := time.ParseDuration(scalar(m, key))
	if err != nil {
		return def
	}
	return d
}

// set puts v under key in mapping m, replacing what was there.
func set(m *yaml.Node, key string, v *yaml.Node) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = v
			return
		}
	}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
}

func setScalar(m *yaml.Node, key, value string) {
	set(m, key, &yaml.Node{Kind: yaml.ScalarNode, Value: value})
}

// setFlow puts a flow value (a map or list, as YAML text) under key.
func setFlow(m *yaml.Node, key, text string) {
	var v yaml.Node
	if err := yaml.Unmarshal([]byte(text), &v); err != nil {
		panic(err) // the dimensions' own texts
	}
	n := v.Content[0]
	n.Style = yaml.FlowStyle
	set(m, key, n)
}
