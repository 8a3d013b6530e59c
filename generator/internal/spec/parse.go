package spec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

const internalError = "internal error reading the spec (please report it)"

// MaxSize is the largest spec accepted, far above any real spec.
const MaxSize = 1 << 20

// maxDepth bounds nesting; the deepest legal spec path is seven levels.
const maxDepth = 32

// Parse reads a spec. The version is read first, then the document is
// decoded strictly for that version. It never panics; every problem is a
// diagnostic with a position.
func Parse(name string, data []byte) (f *File, diags Diagnostics) {
	r := &reporter{file: name}
	f = &File{Name: name, parsed: parseFailures{fromParse: true}}
	defer func() {
		// yaml.v3 has panicked on hostile input before; a spec tool must
		// answer with a diagnostic, never a crash.
		if v := recover(); v != nil {
			r.errorf(Pos{}, "%s: %v", internalError, v)
			f, diags = &File{Name: name, parsed: parseFailures{fromParse: true}}, r.diags
		}
	}()
	switch {
	case len(data) > MaxSize:
		r.errorf(Pos{}, "spec is %d bytes; the limit is %d", len(data), MaxSize)
		return f, r.diags
	case !utf8.Valid(data):
		r.errorf(firstInvalidUTF8(data), "spec is not valid UTF-8")
		return f, r.diags
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
		r.errorf(Pos{1, 1}, "spec is empty")
		return f, r.diags
	} else if err != nil {
		r.errorf(yamlErrorPos(data, err), "%s", yamlErrorMsg(err))
		return f, r.diags
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		r.errorf(Pos{extra.Line, extra.Column}, "a spec holds one YAML document; found another")
		return f, r.diags
	}
	if len(doc.Content) == 0 {
		r.errorf(Pos{1, 1}, "spec is empty")
		return f, r.diags
	}
	root := doc.Content[0]
	if n, msg := shapeProblem(root, 0); n != nil {
		r.errorf(pos(n), "%s", msg)
		return f, r.diags
	}
	p := &parser{reporter: r, data: data, badValues: map[Pos]map[string]bool{}}
	p.file(root, f)
	f.parsed.root, f.parsed.at, f.parsed.values = pos(root), map[Pos]bool{}, p.badValues
	for _, d := range r.diags {
		f.parsed.at[d.Pos] = true
	}
	return f, r.diags
}

// shapeProblem finds the first alias or anchor (alias bombs, and values
// that mean something other than they read) or node nested too deep.
func shapeProblem(n *yaml.Node, depth int) (*yaml.Node, string) {
	switch {
	case depth > maxDepth:
		return n, fmt.Sprintf("spec is nested deeper than %d levels; no idemgen spec is", maxDepth)
	case n.Kind == yaml.AliasNode:
		return n, fmt.Sprintf("spec uses the YAML alias *%s; idemgen specs use no anchors or aliases, write the value out", n.Value)
	case n.Anchor != "":
		return n, fmt.Sprintf("spec uses the YAML anchor &%s; idemgen specs use no anchors or aliases, write the value out", n.Anchor)
	}
	for _, c := range n.Content {
		if bad, msg := shapeProblem(c, depth+1); bad != nil {
			return bad, msg
		}
	}
	return nil, ""
}

// keyAliases maps names people reach for to the key the spec spells them
// with, for the suggestions edit distance cannot make.
var keyAliases = map[string]string{
	"retries": "max_attempts", "max_retries": "max_attempts", "attempts": "max_attempts",
	"ttl": "retention", "expiry": "retention", "expire": "retention",
	"lock": "lease", "deadline": "timeout",
	"backoff": "retry", "retry_policy": "retry",
	"min": "initial", "base": "initial", "first": "initial", "cap": "max", "maximum": "max",
	"rate_limit": "rate", "ratelimit": "rate", "throttle": "rate",
	"parallelism": "concurrency", "max_concurrency": "concurrency", "in_flight": "concurrency",
	"condition": "when", "on": "when",
	"idempotency_key": "key", "id": "key",
	"columns": "fields", "struct": "type", "name": "type",
	"mode": "write", "conflict": "write", "on_conflict": "write",
	"primary_key": "unique", "unique_key": "unique",
	"description": "doc", "comment": "doc",
	"output": "out", "dir": "out", "dialect": "dialects", "database": "dialects",
	"batch_size": "batch", "prefetch": "batch", "max_messages": "batch",
	"ack_timeout": "ack_wait", "ackwait": "ack_wait", "consumer_timeout": "ack_wait",
	"header": "headers",
}

// placeAliases are the names of a broker's places, which mean consume's
// from (or group) and publish's to: whichever the mapping has.
var placeAliases = map[string][]string{
	"subject": {"from", "to"}, "topic": {"from", "to"}, "queue": {"from", "to"}, "routing_key": {"from", "to"},
	"stream": {"from"}, "durable": {"group"}, "consumer": {"group"}, "consumer_group": {"group"}, "consumer_tag": {"group"},
}

type parser struct {
	*reporter
	data  []byte
	lines []string // data split into lines, on first use
	// badValues are, per mapping, the keys given whose values were refused.
	badValues map[Pos]map[string]bool
}

func pos(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

// fields walks a mapping, calling the handler for each known key and
// reporting unknown and duplicated keys with the nearest known key.
func (p *parser) fields(n *yaml.Node, what string, handlers map[string]func(v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "%s must be a mapping, not %s", what, kindName(n))
		return
	}
	known := make([]string, 0, len(handlers))
	for k := range handlers {
		known = append(known, k)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.errorf(pos(k), "%s: keys must be plain names", what)
			continue
		}
		h, ok := handlers[k.Value]
		if !ok {
			// An alias is a deliberate answer; edit distance is a guess
			// (retries is nearer retry, but means max_attempts).
			meant := Suggest(k.Value, known)
			if a := keyAliases[k.Value]; handlers[a] != nil {
				meant = a
			}
			for _, a := range placeAliases[k.Value] {
				if handlers[a] != nil {
					meant = a
				}
			}
			hint := ""
			if meant != "" {
				hint = fmt.Sprintf(" (did you mean %s?)", meant)
				// A misspelt key is the key meant, given badly: Check
				// does not call that one missing as well.
				p.givenBadly(pos(n), meant)
			}
			p.errorf(pos(k), "%s: unknown key %q%s", what, k.Value, hint)
			continue
		}
		if seen[k.Value] {
			p.errorf(pos(k), "%s: key %q is repeated", what, k.Value)
			continue
		}
		seen[k.Value] = true
		before := len(p.diags)
		h(v)
		if len(p.diags) > before {
			p.givenBadly(pos(n), k.Value)
		}
	}
}

// givenBadly records that key was given in the mapping at parent, but
// its value (or its spelling) was refused.
func (p *parser) givenBadly(parent Pos, key string) {
	if p.badValues[parent] == nil {
		p.badValues[parent] = map[string]bool{}
	}
	p.badValues[parent][key] = true
}

func (p *parser) scalar(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		p.errorf(pos(n), "%s must be a scalar, not %s", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (p *parser) str(n *yaml.Node, what string, dst *String) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!str" && n.Tag != "!!null" && n.Tag != "" {
		// Quoting or not, names and keys are text; numbers and booleans
		// where text is wanted are almost always a slip.
		p.errorf(pos(n), "%s must be a string, not %s", what, strings.TrimPrefix(n.Tag, "!!"))
		return
	}
	if v, ok := p.scalar(n, what); ok {
		if n.Tag == "!!null" {
			v = "" // "~" and "null" mean nothing, not the text "null"
		}
		*dst = String{Value: v, Pos: pos(n), Set: true}
	}
}

// template reads a key template and, when its text stands verbatim on one
// line, remembers where, so a bad placeholder can be pointed at exactly.
func (p *parser) template(n *yaml.Node, what string, dst *String) {
	p.str(n, what, dst)
	if !dst.Set || n.Kind != yaml.ScalarNode || n.Line < 1 || n.Column < 1 {
		return
	}
	quote := 0
	switch n.Style {
	case 0, yaml.TaggedStyle:
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		quote = 1
	default:
		return
	}
	if p.lines == nil {
		p.lines = strings.Split(string(p.data), "\n")
	}
	if n.Line > len(p.lines) {
		return
	}
	line := []rune(strings.TrimSuffix(p.lines[n.Line-1], "\r"))
	start := n.Column - 1 + quote
	val := []rune(n.Value)
	if start+len(val) > len(line) || string(line[start:start+len(val)]) != n.Value {
		return
	}
	dst.textCol = n.Column + quote
}

func (p *parser) integer(n *yaml.Node, what string, dst *Int) {
	v, ok := p.scalar(n, what)
	if !ok {
		return
	}
	i, err := strconv.Atoi(v)
	if err != nil || n.Tag != "!!int" {
		p.errorf(pos(n), "%s must be an integer, not %q", what, v)
		return
	}
	*dst = Int{Value: i, Pos: pos(n), Set: true}
}

func (p *parser) boolean(n *yaml.Node, what string, dst *Bool) {
	v, ok := p.scalar(n, what)
	if !ok {
		return
	}
	if n.Tag != "!!bool" {
		p.errorf(pos(n), "%s must be true or false, not %q", what, v)
		return
	}
	*dst = Bool{Value: v == "true" || v == "True" || v == "TRUE", Pos: pos(n), Set: true}
}

func (p *parser) duration(n *yaml.Node, what string, dst *Duration) {
	v, ok := p.scalar(n, what)
	if !ok {
		return
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		p.errorf(pos(n), "%s: %q is not a duration (use Go syntax such as 90s, 10m, 720h)", what, v)
		return
	}
	if d <= 0 {
		p.errorf(pos(n), "%s must be positive, not %s", what, v)
		return
	}
	*dst = Duration{Value: d, Text: v, Pos: pos(n), Set: true}
}

// rateRe is a rate as written: a count, a slash, a unit of s, m or h.
var rateRe = regexp.MustCompile(`^([0-9]+)/([smh])$`)

// ratePers are the periods of a rate's units, and their names.
var ratePers = map[string]struct {
	d    time.Duration
	name string
}{"s": {time.Second, "second"}, "m": {time.Minute, "minute"}, "h": {time.Hour, "hour"}}

// rate reads N/s, N/m or N/h, N a positive integer the runtime holds (int32).
func (p *parser) rate(n *yaml.Node, what string, dst *Rate) {
	v, ok := p.scalar(n, what)
	if !ok {
		return
	}
	m := rateRe.FindStringSubmatch(v)
	if m == nil || n.Tag != "!!str" || len(m[1]) > 1 && m[1][0] == '0' {
		p.errorf(pos(n), "%s: %q is not a rate (use N/s, N/m or N/h, N a positive integer, such as 50/s)", what, v)
		return
	}
	per := ratePers[m[2]]
	count, err := strconv.ParseInt(m[1], 10, 32)
	switch {
	case err != nil:
		p.errorf(pos(n), "%s: %q is more than %d calls per %s", what, v, math.MaxInt32, per.name)
		return
	case count == 0:
		p.errorf(pos(n), "%s must be positive, not %s", what, v)
		return
	}
	*dst = Rate{N: int(count), Per: per.d, Text: v, Pos: pos(n), Set: true}
}

func (p *parser) strings(n *yaml.Node, what string) []String {
	if n.Kind != yaml.SequenceNode {
		p.errorf(pos(n), "%s must be a list, not %s", what, kindName(n))
		return nil
	}
	var out []String
	for _, c := range n.Content {
		var s String
		p.str(c, what+" item", &s)
		if s.Set {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) file(n *yaml.Node, f *File) {
	// The version decides how the rest is read, so it is read first.
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "version" {
				p.integer(n.Content[i+1], "version", &f.Version)
			}
		}
	}
	hasVersion := false
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			hasVersion = hasVersion || n.Content[i].Value == "version"
		}
	}
	if f.Version.Set && f.Version.Value != 1 {
		p.errorf(f.Version.Pos, "spec version %d is not supported; this idemgen reads version 1", f.Version.Value)
		return
	}
	f.parsed.read = n.Kind == yaml.MappingNode
	p.fields(n, "spec", map[string]func(*yaml.Node){
		"version": func(*yaml.Node) {},
		"package": func(v *yaml.Node) { p.str(v, "package", &f.Package) },
		"out":     func(v *yaml.Node) { p.str(v, "out", &f.Out) },
		"dialects": func(v *yaml.Node) {
			f.DialectsPos = pos(v)
			f.Dialects = p.strings(v, "dialects")
		},
		"tables": func(v *yaml.Node) {
			f.TablesPos = pos(v)
			p.tables(v, &f.Tables)
		},
		"allow_drop": func(v *yaml.Node) {
			f.AllowDropPos = pos(v)
			f.AllowDrop = p.strings(v, "allow_drop")
		},
		"jobs": func(v *yaml.Node) {
			f.JobsPos = pos(v)
			if v.Kind != yaml.SequenceNode {
				p.errorf(pos(v), "jobs must be a list, not %s", kindName(v))
				return
			}
			for _, jn := range v.Content {
				var j Job
				p.job(jn, &j)
				f.Jobs = append(f.Jobs, j)
			}
		},
	})
	if n.Kind == yaml.MappingNode && !hasVersion {
		p.errorf(pos(n), "spec: missing version (write version: 1)")
	}
}

func (p *parser) tables(n *yaml.Node, t *Tables) {
	p.fields(n, "tables", map[string]func(*yaml.Node){
		"ledger":     func(v *yaml.Node) { p.str(v, "tables.ledger", &t.Ledger) },
		"progress":   func(v *yaml.Node) { p.str(v, "tables.progress", &t.Progress) },
		"seen":       func(v *yaml.Node) { p.str(v, "tables.seen", &t.Seen) },
		"parked":     func(v *yaml.Node) { p.str(v, "tables.parked", &t.Parked) },
		"limits":     func(v *yaml.Node) { p.str(v, "tables.limits", &t.Limits) },
		"migrations": func(v *yaml.Node) { p.str(v, "tables.migrations", &t.Migrations) },
	})
}

func (p *parser) job(n *yaml.Node, j *Job) {
	j.Pos = pos(n)
	p.fields(n, "job", map[string]func(*yaml.Node){
		"name":    func(v *yaml.Node) { p.str(v, "job name", &j.Name) },
		"doc":     func(v *yaml.Node) { p.str(v, "doc", &j.Doc) },
		"version": func(v *yaml.Node) { p.integer(v, "job version", &j.Version) },
		"unit":    func(v *yaml.Node) { p.unit(v, &j.Unit) },
		"source":  func(v *yaml.Node) { p.source(v, &j.Source) },
		"destination": func(v *yaml.Node) {
			j.Destination = &Destination{}
			p.destination(v, j.Destination)
		},
		"river": func(v *yaml.Node) {
			j.River = &River{Pos: pos(v)}
			p.fields(v, "river", map[string]func(*yaml.Node){
				"queue": func(v *yaml.Node) { p.str(v, "river queue", &j.River.Queue) },
				"every": func(v *yaml.Node) { p.duration(v, "river every", &j.River.Every) },
			})
		},
		"consume": func(v *yaml.Node) { j.Consume = p.consume(v) },
		"effects": func(v *yaml.Node) {
			if v.Kind != yaml.SequenceNode {
				p.errorf(pos(v), "effects must be a list, not %s", kindName(v))
				return
			}
			for _, en := range v.Content {
				var e Effect
				p.effect(en, &e)
				j.Effects = append(j.Effects, e)
			}
		},
	})
}

func (p *parser) unit(n *yaml.Node, u *Unit) {
	u.Pos = pos(n)
	p.fields(n, "unit", map[string]func(*yaml.Node){
		"type":         func(v *yaml.Node) { p.str(v, "unit type", &u.Type) },
		"key":          func(v *yaml.Node) { p.template(v, "unit key", &u.Key) },
		"max_attempts": func(v *yaml.Node) { p.integer(v, "unit max_attempts", &u.MaxAttempts) },
		"fields": func(v *yaml.Node) {
			u.FieldsPos = pos(v)
			if v.Kind != yaml.SequenceNode {
				p.errorf(pos(v), "unit fields must be a list of `- name: type` items, not %s", kindName(v))
				return
			}
			for _, fn := range v.Content {
				if fn.Kind != yaml.MappingNode || len(fn.Content) != 2 {
					p.errorf(pos(fn), "unit field must be one `name: type` pair")
					continue
				}
				var fld Field
				fld.Pos = pos(fn)
				p.str(fn.Content[0], "field name", &fld.Name)
				p.str(fn.Content[1], "field type", &fld.Type)
				u.Fields = append(u.Fields, fld)
			}
		},
	})
}

func (p *parser) source(n *yaml.Node, s *Source) {
	s.Pos = pos(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "source must be a mapping with exactly one of watermark, cursor, none")
		return
	}
	kinds := []string{SourceWatermark, SourceCursor, SourceNone}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if s.Kind.Set {
			p.errorf(pos(k), "source: only one of watermark, cursor, none may be given (found %s and %s)", s.Kind.Value, k.Value)
			continue
		}
		switch k.Value {
		case SourceWatermark:
			s.Kind = String{Value: k.Value, Pos: pos(k), Set: true}
			s.Watermark.Pos = pos(v)
			p.fields(v, "watermark", map[string]func(*yaml.Node){
				"field":   func(v *yaml.Node) { p.str(v, "watermark field", &s.Watermark.Field) },
				"overlap": func(v *yaml.Node) { p.duration(v, "watermark overlap", &s.Watermark.Overlap) },
			})
		case SourceCursor, SourceNone:
			s.Kind = String{Value: k.Value, Pos: pos(k), Set: true}
			if v.Kind != yaml.MappingNode || len(v.Content) != 0 {
				if !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
					p.errorf(pos(v), "source %s takes no settings; write %s: {}", k.Value, k.Value)
				}
			}
		default:
			p.errorf(pos(k), "source: unknown kind %q%s", k.Value, didYouMean(k.Value, kinds))
		}
	}
	if !s.Kind.Set && len(n.Content) == 0 {
		p.errorf(pos(n), "source needs one of watermark, cursor, none")
	}
}

func (p *parser) destination(n *yaml.Node, d *Destination) {
	d.Pos = pos(n)
	p.fields(n, "destination", map[string]func(*yaml.Node){
		"table": func(v *yaml.Node) { p.str(v, "destination table", &d.Table) },
		"unique": func(v *yaml.Node) {
			d.UniquePos = pos(v)
			d.Unique = p.strings(v, "destination unique")
		},
		"write":      func(v *yaml.Node) { p.str(v, "destination write", &d.Write) },
		"newer_wins": func(v *yaml.Node) { p.str(v, "newer_wins", &d.NewerWins) },
		"stage":      func(v *yaml.Node) { p.boolean(v, "stage", &d.Stage) },
		"adopt":      func(v *yaml.Node) { p.boolean(v, "adopt", &d.Adopt) },
	})
}

func (p *parser) effect(n *yaml.Node, e *Effect) {
	e.Pos = pos(n)
	p.fields(n, "effect", map[string]func(*yaml.Node){
		"name":         func(v *yaml.Node) { p.str(v, "effect name", &e.Name) },
		"key":          func(v *yaml.Node) { p.template(v, "effect key", &e.Key) },
		"version":      func(v *yaml.Node) { p.integer(v, "effect version", &e.Version) },
		"when":         func(v *yaml.Node) { p.str(v, "effect when", &e.When) },
		"lease":        func(v *yaml.Node) { p.duration(v, "effect lease", &e.Lease) },
		"retention":    func(v *yaml.Node) { p.duration(v, "effect retention", &e.Retention) },
		"keep_result":  func(v *yaml.Node) { p.boolean(v, "keep_result", &e.KeepResult) },
		"max_attempts": func(v *yaml.Node) { p.integer(v, "max_attempts", &e.MaxAttempts) },
		"retry":        func(v *yaml.Node) { p.retry(v, &e.Retry) },
		"timeout":      func(v *yaml.Node) { p.duration(v, "effect timeout", &e.Timeout) },
		"rate":         func(v *yaml.Node) { p.rate(v, "effect rate", &e.Rate) },
		"concurrency":  func(v *yaml.Node) { p.integer(v, "effect concurrency", &e.Concurrency) },
		"redact":       func(v *yaml.Node) { e.Redact = p.redact(v) },
		"circuit":      func(v *yaml.Node) { p.circuit(v, &e.Circuit) },
		"publish":      func(v *yaml.Node) { e.Publish = p.publish(v) },
	})
}

// circuit reads an effect's circuit breaker, {failures, cool_down,
// max_cool_down}.
func (p *parser) circuit(n *yaml.Node, c *Circuit) {
	c.Pos = pos(n)
	if n.Kind != yaml.MappingNode {
		p.errorf(pos(n), "circuit must be a mapping such as {failures: 5, cool_down: 30s}, not %s", kindName(n))
		return
	}
	p.fields(n, "circuit", map[string]func(*yaml.Node){
		"failures":      func(v *yaml.Node) { p.integer(v, "circuit failures", &c.Failures) },
		"cool_down":     func(v *yaml.Node) { p.duration(v, "circuit cool_down", &c.CoolDown) },
		"max_cool_down": func(v *yaml.Node) { p.duration(v, "circuit max_cool_down", &c.MaxCoolDown) },
	})
}

// redact reads an effect's redact: a list of payload and result.
func (p *parser) redact(n *yaml.Node) []String {
	items := p.strings(n, "effect redact")
	allowed := []string{RedactPayload, RedactResult}
	seen := map[string]bool{}
	var out []String
	for _, it := range items {
		switch {
		case !slices.Contains(allowed, it.Value):
			p.errorf(it.Pos, "effect redact: unknown %q%s: list payload, result or both (redact: [payload, result])", it.Value, didYouMean(it.Value, allowed))
		case seen[it.Value]:
			p.errorf(it.Pos, "effect redact: %s is listed twice", it.Value)
		default:
			seen[it.Value] = true
			out = append(out, it)
		}
	}
	return out
}

// retry reads an effect's backoff, {initial, max}. A number there is
// almost always a count of attempts, which is max_attempts.
func (p *parser) retry(n *yaml.Node, r *Retry) {
	r.Pos = pos(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!int" {
		p.errorf(pos(n), "retry must be a mapping such as {initial: 1s, max: 1h}, not %s; a number of attempts is max_attempts", kindName(n))
		return
	}
	p.fields(n, "retry", map[string]func(*yaml.Node){
		"initial": func(v *yaml.Node) { p.duration(v, "retry initial", &r.Initial) },
		"max":     func(v *yaml.Node) { p.duration(v, "retry max", &r.Max) },
	})
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	return fmt.Sprintf("%q", n.Value)
}

// yamlErrorPos finds where a YAML syntax error is. yaml.v3 reports one
// line per error, and not the problem's: for parser errors it is the
// 0-based line of the enclosing construct (so one line early), for scanner
// errors the 1-based line where the token being scanned began. Neither says
// the column. So the position is found the way a reader would: the first
// line, and then the first column on it, at which the document read up to
// there already fails with the same message. Never before the line yaml.v3
// names minus one, and bounded, so that a huge spec costs a few parses.
func yamlErrorPos(data []byte, err error) Pos {
	reported, problem := yamlErrorLine(err)
	if reported == 0 {
		reported = 1
	}
	fails := func(prefix []byte) bool {
		var n yaml.Node
		err := yaml.Unmarshal(prefix, &n)
		if err == nil {
			return false
		}
		_, p := yamlErrorLine(err)
		return p == problem
	}
	// Line starts: starts[i] is the offset of line i+1.
	starts := []int{0}
	for i, c := range data {
		if c == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	lineEnd := func(line int) int { // offset just past line's newline
		if line < len(starts) {
			return starts[line]
		}
		return len(data)
	}
	budget := 16 * MaxSize // bytes parsed while probing, at most
	probe := func(prefix []byte) bool {
		budget -= len(prefix)
		return budget >= 0 && fails(prefix)
	}
	for line := max(1, reported-1); line <= len(starts) && budget > 0; line++ {
		if !probe(data[:lineEnd(line)]) {
			continue
		}
		// The line is found; now the first column that makes it fail.
		start := starts[line-1]
		col := 0
		for i, r := range string(data[start:lineEnd(line)]) {
			col++
			if probe(data[:start+i+utf8.RuneLen(r)]) {
				return Pos{line, col}
			}
		}
		return Pos{line, 1}
	}
	return Pos{reported, 1}
}

// yamlErrorLine splits a yaml.v3 error into the line it names (0 when it
// names none) and the problem text.
func yamlErrorLine(err error) (line int, problem string) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if n, text, ok := strings.Cut(rest, ":"); ok {
			if l, err := strconv.Atoi(n); err == nil {
				return l, strings.TrimSpace(text)
			}
		}
	}
	return 0, msg
}

func yamlErrorMsg(err error) string {
	_, problem := yamlErrorLine(err)
	return "invalid YAML: " + problem
}

func firstInvalidUTF8(data []byte) Pos {
	line, col := 1, 1
	for len(data) > 0 {
		r, size := utf8.DecodeRune(data)
		if r == utf8.RuneError && size <= 1 {
			return Pos{line, col}
		}
		if r == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
		data = data[size:]
	}
	return Pos{line, col}
}
