package specspace

import (
	"fmt"
	"slices"
)

// A reduction takes one thing away from a spec (an effect, an option, a
// field, a dialect), or reports false when there is nothing of its kind.
type reduction struct {
	what  string
	apply func(c *specCase) bool
}

// reductions lists every one-step reduction of c, biggest first: an
// effect, the destination, a dialect, a key field, a data field, then one
// option at a time.
func reductions(c specCase) []reduction {
	var out []reduction
	add := func(what string, apply func(c *specCase) bool) { out = append(out, reduction{what, apply}) }
	for i, e := range c.effects {
		add("drop effect "+e.name, func(c *specCase) bool {
			c.effects = slices.Delete(slices.Clone(c.effects), i, i+1)
			return true
		})
	}
	if len(c.dialects) == 2 {
		for _, d := range c.dialects {
			add("dialects: ["+d+"] only", func(c *specCase) bool { c.dialects = []string{d}; return true })
		}
	}
	if c.dest {
		add("no destination", func(c *specCase) bool { c.dest, c.write = false, ""; return true })
	}
	if c.consume != "" {
		add("no consume", func(c *specCase) bool { c.consume, c.headers = "", nil; return true })
	}
	if len(c.headers) > 0 {
		add("no headers", func(c *specCase) bool { c.headers = nil; return true })
	}
	for i, e := range c.effects {
		if e.publish != "" {
			add("effect "+e.name+": no publish", func(c *specCase) bool {
				c.effects = slices.Clone(c.effects)
				c.effects[i].publish = ""
				return true
			})
		}
	}
	if c.source != "none" {
		add("source: none", func(c *specCase) bool {
			c.source = "none"
			if c.newerWins != "at" { // the watermark's field goes with it
				c.data = slices.DeleteFunc(slices.Clone(c.data), func(f field) bool { return f.name == "at" })
			}
			return true
		})
	}
	if len(c.keys) > 1 || c.keyShape != "single" {
		add("key: one field, no hash, no unicode", func(c *specCase) bool { c.keyShape, c.keys = "single", c.keys[:1]; return true })
	}
	for i, f := range c.keys {
		if f.typ != "string" {
			add("key field "+f.name+": string", func(c *specCase) bool {
				c.keys = slices.Clone(c.keys)
				c.keys[i].typ = "string"
				return true
			})
		}
	}
	for i, f := range c.data {
		if f.name == "at" || f.name == "rev" {
			continue // the watermark's and newer_wins' own fields
		}
		add("drop field "+f.name+" ("+f.typ+")", func(c *specCase) bool {
			c.data = slices.Delete(slices.Clone(c.data), i, i+1)
			return true
		})
		if f.nullable {
			add("field "+f.name+" not nullable", func(c *specCase) bool {
				c.data = slices.Clone(c.data)
				c.data[i].nullable = false
				return true
			})
		}
	}
	if c.stage {
		add("stage: false", func(c *specCase) bool { c.stage = false; return true })
	}
	if c.newerWins != "" {
		add("no newer_wins", func(c *specCase) bool { c.newerWins = ""; return true })
	}
	if c.adopt {
		add("adopt: false", func(c *specCase) bool { c.adopt = false; return true })
	}
	if c.write == "insert_once" {
		add("write: upsert", func(c *specCase) bool { c.write = "upsert"; return true })
	}
	if c.unitMax > 0 {
		add("no unit max_attempts", func(c *specCase) bool { c.unitMax = 0; return true })
	}
	for i, e := range c.effects {
		opt := func(what string, has bool, clear func(e *effect)) {
			if has {
				add(fmt.Sprintf("effect %s: %s", e.name, what), func(c *specCase) bool {
					c.effects = slices.Clone(c.effects)
					clear(&c.effects[i])
					return true
				})
			}
		}
		opt("when: always", e.when != "always", func(e *effect) { e.when = "always" })
		opt("no keep_result", e.keepResult, func(e *effect) { e.keepResult = false })
		opt("no max_attempts", e.maxAttempts > 0, func(e *effect) { e.maxAttempts = 0 })
		opt("version: 1", e.version != 1, func(e *effect) { e.version = 1 })
		opt("no {job_version}", e.jobVersion, func(e *effect) { e.jobVersion = false })
		opt("no retry", e.retry, func(e *effect) { e.retry = false })
		opt("no timeout", e.timeout != "", func(e *effect) { e.timeout = "" })
		opt("no lease", e.lease != "", func(e *effect) { e.lease = "" })
		opt("no rate", e.rate != "", func(e *effect) { e.rate = "" })
		opt("no concurrency", e.concurrency > 0, func(e *effect) { e.concurrency = 0 })
		opt("no circuit", e.circuit != "", func(e *effect) { e.circuit = "" })
		opt("no retention", e.retention != "", func(e *effect) { e.retention = "" })
	}
	return out
}

// shrunk is what shrinking found: the smallest failing spec, the
// reductions that each make it pass (the dimensions the failure needs),
// and its failure.
type shrunk struct {
	spec     specCase
	needs    []string
	output   string
	attempts int
}

// shrink reduces a failing spec one step at a time, keeping a reduction
// whenever the reduced spec still fails, until no single reduction keeps
// it failing or budget checks are spent. fails generates, builds and runs
// one spec and returns its failure output ("" when it passes).
func shrink(c specCase, output string, budget int, fails func(specCase) string) shrunk {
	s := shrunk{spec: c, output: output}
	for {
		progressed := false
		s.needs = nil
		for _, red := range reductions(s.spec) {
			if s.attempts >= budget {
				s.needs = append(s.needs, "(shrinking stopped: budget spent)")
				return s
			}
			next := s.spec
			if !red.apply(&next) {
				continue
			}
			next.fix()
			if next.yaml() == s.spec.yaml() {
				continue
			}
			s.attempts++
			if out := fails(next); out != "" {
				s.spec, s.output, progressed = next, out, true
				break
			}
			s.needs = append(s.needs, red.what)
		}
		if !progressed {
			return s
		}
	}
}
