// Package model is the resolved form of a spec: Go names, SQL names and
// types, key templates and table layouts, decided once so that emitters only
// render and never decide policy.
package model

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/generator/internal/spec"
)

// Dialect is a SQL dialect a package is generated for.
type Dialect string

const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// Package is one generated Go package.
type Package struct {
	Name     string
	Dialects []Dialect
	Tables   Tables
	Jobs     []*Job
}

// Has reports whether the package is generated for d.
func (p *Package) Has(d Dialect) bool {
	for _, x := range p.Dialects {
		if x == d {
			return true
		}
	}
	return false
}

// Tables are the bookkeeping tables the package owns.
type Tables struct {
	Ledger, Progress, Seen, Parked, Limits, Migrations string
}

// SourceKind is where a job's units come from.
type SourceKind string

const (
	SourceWatermark SourceKind = "watermark"
	SourceCursor    SourceKind = "cursor"
	SourceNone      SourceKind = "none"
)

// Job is one job of the package.
type Job struct {
	Name    string // snake_case, as in the spec
	GoName  string // InvoiceSync
	Doc     string
	Version int
	Unit    *Unit
	Key     Key
	Source  SourceKind
	// Watermark and Overlap are set for watermark sources.
	Watermark *Field
	Overlap   time.Duration
	Dest      *Dest
	Effects   []*Effect
	// River is set when the job runs on River (spec key river).
	River *River
	// Consume is set when the job's units arrive from a broker (spec key consume).
	Consume *Consume
}

// River is how a job runs on River: its queue, its job kinds, and for
// watermark and cursor jobs how often the periodic job calls Run.
type River struct {
	Queue string
	// Kind is the River job kind of a handed-in unit ("billing.payment_webhook");
	// Kind+".run" and Kind+".drain" are the periodic kinds.
	Kind  string
	Every time.Duration // zero for source: none
}

// Lower is the job's Go name with a lower-case first letter.
func (j *Job) Lower() string { return lowerFirst(j.GoName) }

// ComparesReplays reports whether the job needs its destination compared
// with a unit: a handed-in key new to the ledger (its records purged past
// retention) whose write left the row as it was acts as new only when the
// row holds the unit's data. Only an insert_once row, or one where newer
// data won, can differ from the unit after such a write.
func (j *Job) ComparesReplays() bool {
	return j.Source == SourceNone && j.Dest != nil && (j.Dest.Write == InsertOnce || j.Dest.NewerWins != nil)
}

// Unit is the struct a job handles.
type Unit struct {
	GoName string
	Fields []*Field
	// MaxAttempts parks a unit whose write failed in this many runs; 0: never.
	MaxAttempts int
}

// Type is a spec field type.
type Type string

const (
	String  Type = "string"
	Int32   Type = "int32"
	Int64   Type = "int64"
	Float64 Type = "float64"
	Bool    Type = "bool"
	Time    Type = "time"
	Bytes   Type = "bytes"
	JSON    Type = "json"
	UUID    Type = "uuid"
)

// Field is one unit field and its destination column.
type Field struct {
	Name     string // snake_case: the column name and JSON name
	GoName   string
	Type     Type
	Nullable bool
}

// Pointer reports whether the Go field is a pointer (nullable scalars).
// Nullable bytes and json use nil slices instead.
func (f *Field) Pointer() bool { return f.Nullable && f.Type != Bytes && f.Type != JSON }

// Key is a parsed key template.
type Key struct {
	Text  string
	Parts []KeyPart
	// Seps are the separator characters the template puts between
	// placeholders; values are escaped for them so rendering is injective.
	Seps string
}

// KeyPart is literal text, one field, or a sha256 over fields.
type KeyPart struct {
	Literal string
	Field   *Field
	SHA256  []*Field
}

// Fields lists every field the key uses, in order, without repeats.
func (k Key) Fields() []*Field {
	var out []*Field
	seen := map[*Field]bool{}
	add := func(f *Field) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, p := range k.Parts {
		if p.Field != nil {
			add(p.Field)
		}
		for _, f := range p.SHA256 {
			add(f)
		}
	}
	return out
}

// Write is how a destination row is written.
type Write string

const (
	Upsert     Write = "upsert"
	InsertOnce Write = "insert_once"
)

// Dest is a job's destination table.
type Dest struct {
	Table     string
	Unique    []*Field
	Data      []*Field // the fields not in Unique, compared to detect change
	Write     Write
	NewerWins *Field
	Stage     bool
	// Adopted: the service's own migrations own the table; idemgen emits
	// no DDL for it and checks its shape at Migrate instead.
	Adopted bool
}

// When decides an effect relative to the destination write.
type When string

const (
	WhenInserted When = "inserted"
	WhenChanged  When = "changed"
	WhenAlways   When = "always"
)

// Effect is one side effect of a job.
type Effect struct {
	Name        string
	GoName      string
	Key         Key
	Version     int
	When        When
	Lease       time.Duration
	Retention   time.Duration
	KeepResult  bool
	MaxAttempts int
	// Retry is the backoff between failed attempts as the spec sets it; a
	// bound it does not set is zero (the runtime's default).
	Retry Backoff
	// Timeout bounds one provider call; zero: no bound.
	Timeout time.Duration
	// Rate and Concurrency bound the effect's provider calls across every
	// worker sharing the database; zero: no bound.
	Rate        Rate
	Concurrency int
	// RedactPayload and RedactResult: the spec's redact. The operations
	// page, `idemgen ledger` and their JSON show neither the stored
	// payload nor the kept result of such an effect's rows.
	RedactPayload, RedactResult bool
	// Circuit opens the effect after failures in a row across the fleet;
	// zero: none.
	Circuit Circuit
	// Publish is set when the effect publishes the unit to a broker (spec
	// key publish): no provider, and its result is the broker's ack.
	Publish *Publish
}

// Circuit is an effect's circuit breaker (spec circuit; idemrt.Circuit).
type Circuit struct {
	Failures    int32
	CoolDown    time.Duration
	MaxCoolDown time.Duration // 0: the runtime's default, 8 times CoolDown
}

// Rate is N provider calls per period (a second, a minute or an hour).
type Rate struct {
	N   int32
	Per time.Duration
}

// Backoff is the wait between failed attempts of an effect: Initial after
// the first failure, doubling up to Max.
type Backoff struct {
	Initial, Max time.Duration
}

// Defaults for optional spec values.
const (
	DefaultLease       = 5 * time.Minute
	DefaultMaxAttempts = 5
)

// Resolve builds the model from a spec that spec.Check accepted. It returns
// an error rather than panicking if the spec was not checked.
func Resolve(f *spec.File) (*Package, error) {
	p := &Package{Name: f.Package.Value}
	for _, d := range f.Dialects {
		p.Dialects = append(p.Dialects, Dialect(d.Value))
	}
	t := &p.Tables
	t.Ledger, t.Progress, t.Seen, t.Parked, t.Limits, t.Migrations = spec.DefaultTableNames(f)
	for i := range f.Jobs {
		j, err := resolveJob(&f.Jobs[i])
		if err != nil {
			return nil, fmt.Errorf("job %q: %w", f.Jobs[i].Name.Value, err)
		}
		if r := f.Jobs[i].River; r != nil {
			j.River = &River{Queue: or(r.Queue.Value, p.Name), Kind: p.Name + "." + j.Name, Every: r.Every.Value}
		}
		p.Jobs = append(p.Jobs, j)
	}
	giveWay(p)
	return p, nil
}

// giveWay keeps the names idemgen derives from job and effect names out of
// the way of the unit types the spec names: a job called weekly_summary
// whose unit is `WeeklySummary` becomes the type `WeeklySummaryJob`, and an
// effect whose name is taken by a unit type or a job becomes <Name>Effect.
// The spec's own names never change.
func giveWay(p *Package) {
	taken := map[string]bool{}
	for _, j := range p.Jobs {
		taken[j.Unit.GoName] = true
	}
	for _, j := range p.Jobs {
		if taken[j.GoName] {
			j.GoName += "Job"
		}
	}
	for _, j := range p.Jobs {
		taken[j.GoName] = true
	}
	for _, j := range p.Jobs {
		for _, e := range j.Effects {
			if taken[e.GoName] {
				e.GoName += "Effect"
			}
		}
	}
}

func resolveJob(sj *spec.Job) (*Job, error) {
	j := &Job{
		Name:    sj.Name.Value,
		GoName:  GoName(sj.Name.Value),
		Doc:     sj.Doc.Value,
		Version: orInt(sj.Version, 1),
		Unit:    &Unit{GoName: sj.Unit.Type.Value, MaxAttempts: orInt(sj.Unit.MaxAttempts, 0)},
		Source:  SourceKind(sj.Source.Kind.Value),
	}
	byName := map[string]*Field{}
	for _, sf := range sj.Unit.Fields {
		typ, nullable := strings.CutSuffix(sf.Type.Value, "?")
		f := &Field{Name: sf.Name.Value, GoName: GoName(sf.Name.Value), Type: Type(typ), Nullable: nullable}
		j.Unit.Fields = append(j.Unit.Fields, f)
		byName[f.Name] = f
	}
	var err error
	if j.Key, err = ParseKey(sj.Unit.Key.Value, byName, nil); err != nil {
		return nil, err
	}
	if j.Source == SourceWatermark {
		j.Watermark = byName[sj.Source.Watermark.Field.Value]
		j.Overlap = sj.Source.Watermark.Overlap.Value
		if j.Watermark == nil {
			return nil, fmt.Errorf("watermark field %q is not a unit field", sj.Source.Watermark.Field.Value)
		}
	}
	if sd := sj.Destination; sd != nil {
		d := &Dest{Table: sd.Table.Value, Write: Write(or(sd.Write.Value, string(Upsert))), Stage: sd.Stage.Value, Adopted: sd.Adopt.Value}
		if len(sd.Unique) == 0 {
			d.Unique = j.Key.Fields()
		}
		for _, u := range sd.Unique {
			f := byName[u.Value]
			if f == nil {
				return nil, fmt.Errorf("unique field %q is not a unit field", u.Value)
			}
			d.Unique = append(d.Unique, f)
		}
		if len(d.Unique) == 0 {
			return nil, fmt.Errorf("destination %q has no unique fields", d.Table)
		}
		inUnique := map[*Field]bool{}
		for _, f := range d.Unique {
			inUnique[f] = true
		}
		for _, f := range j.Unit.Fields {
			if !inUnique[f] {
				d.Data = append(d.Data, f)
			}
		}
		if sd.NewerWins.Value != "" {
			if d.NewerWins = byName[sd.NewerWins.Value]; d.NewerWins == nil {
				return nil, fmt.Errorf("newer_wins field %q is not a unit field", sd.NewerWins.Value)
			}
		} else if j.Watermark != nil && d.Write == Upsert {
			// A watermark field orders versions by definition. Guarding the
			// upsert with it is what makes two overlapping runs converge: the
			// slower one can no longer overwrite newer data with what it fetched.
			d.NewerWins = j.Watermark
		}
		j.Dest = d
	}
	if sc := sj.Consume; sc != nil {
		if j.Consume, err = resolveConsume(sc, byName); err != nil {
			return nil, err
		}
	}
	for _, se := range sj.Effects {
		e := &Effect{
			Name:        se.Name.Value,
			GoName:      GoName(se.Name.Value),
			Version:     orInt(se.Version, 1),
			When:        When(or(se.When.Value, string(WhenAlways))),
			Lease:       DefaultLease,
			Retention:   se.Retention.Value,
			KeepResult:  se.KeepResult.Value,
			MaxAttempts: orInt(se.MaxAttempts, DefaultMaxAttempts),
		}
		if se.Lease.Set {
			e.Lease = se.Lease.Value
		}
		for _, r := range se.Redact {
			e.RedactPayload = e.RedactPayload || r.Value == spec.RedactPayload
			e.RedactResult = e.RedactResult || r.Value == spec.RedactResult
		}
		resolveLimits(e, &se)
		if sp := se.Publish; sp != nil {
			e.Publish = &Publish{Broker: Broker(sp.Broker.Value), To: sp.To.Value}
			e.KeepResult = true
		}
		vars := map[string]string{"version": fmt.Sprint(e.Version), "job_version": fmt.Sprint(j.Version)}
		if e.Key, err = ParseKey(se.Key.Value, byName, vars); err != nil {
			return nil, fmt.Errorf("effect %q: %w", e.Name, err)
		}
		j.Effects = append(j.Effects, e)
	}
	return j, nil
}

// resolveLimits copies what the spec sets of an effect's retry and
// timeout; what it does not set stays zero. (Rate and concurrency are
// refused by spec.Check until the runtime keeps them.)
func resolveLimits(e *Effect, se *spec.Effect) {
	e.Retry = Backoff{Initial: se.Retry.Initial.Value, Max: se.Retry.Max.Value}
	e.Timeout = se.Timeout.Value
	if se.Rate.Set {
		e.Rate = Rate{N: int32(se.Rate.N), Per: se.Rate.Per}
	}
	e.Concurrency = orInt(se.Concurrency, 0)
	if c := se.Circuit; c.Failures.Set && c.CoolDown.Set {
		e.Circuit = Circuit{Failures: int32(c.Failures.Value), CoolDown: c.CoolDown.Value}
		if c.MaxCoolDown.Set {
			e.Circuit.MaxCoolDown = c.MaxCoolDown.Value
		}
	}
}

// ParseKey splits a key template into parts. vars are placeholders replaced
// by fixed text (an effect's {version}).
func ParseKey(text string, fields map[string]*Field, vars map[string]string) (Key, error) {
	k := Key{Text: text}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			k.Parts = append(k.Parts, KeyPart{Literal: lit.String()})
			lit.Reset()
		}
	}
	rest := text
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			lit.WriteString(rest)
			break
		}
		lit.WriteString(rest[:open])
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return k, fmt.Errorf("key %q: unclosed {", text)
		}
		name := strings.TrimSpace(rest[open+1 : open+end])
		rest = rest[open+end+1:]
		if v, ok := vars[name]; ok {
			lit.WriteString(v)
			continue
		}
		if args, ok := strings.CutPrefix(name, "sha256("); ok {
			args, ok = strings.CutSuffix(args, ")")
			if !ok {
				return k, fmt.Errorf("key %q: malformed sha256(...)", text)
			}
			var part KeyPart
			for _, a := range strings.Split(args, ",") {
				f := fields[strings.TrimSpace(a)]
				if f == nil {
					return k, fmt.Errorf("key %q: %q is not a unit field", text, strings.TrimSpace(a))
				}
				part.SHA256 = append(part.SHA256, f)
			}
			flush()
			k.Parts = append(k.Parts, part)
			continue
		}
		f := fields[name]
		if f == nil {
			return k, fmt.Errorf("key %q: %q is not a unit field", text, name)
		}
		flush()
		k.Parts = append(k.Parts, KeyPart{Field: f})
	}
	flush()
	// Only text between two placeholders can make rendering ambiguous; a
	// fixed prefix or suffix cannot, so single-placeholder keys need no escaping.
	seps := map[rune]bool{}
	for i, p := range k.Parts {
		if i == 0 || i == len(k.Parts)-1 || p.Literal == "" {
			continue
		}
		for _, c := range p.Literal {
			if (c >= utf8.RuneSelf || !isAlnum(byte(c))) && !seps[c] {
				seps[c] = true
				k.Seps += string(c)
			}
		}
	}
	return k, nil
}

// initialisms are upper-cased whole in Go names, as golint and most Go code do.
var initialisms = map[string]bool{
	"id": true, "url": true, "uri": true, "http": true, "https": true, "api": true, "uuid": true,
	"json": true, "sql": true, "ip": true, "html": true, "xml": true, "utc": true, "tls": true,
	"ttl": true, "db": true, "cpu": true, "sha": true, "ui": true, "acl": true,
}

// Initialisms lists the words GoName upper-cases, for sqlc's matching option.
func Initialisms() []string {
	out := make([]string, 0, len(initialisms))
	for k := range initialisms {
		out = append(out, k)
	}
	return out
}

// GoName turns snake_case into an exported Go name: invoice_id -> InvoiceID.
func GoName(s string) string {
	var b strings.Builder
	for _, part := range strings.Split(s, "_") {
		if part == "" {
			continue
		}
		if initialisms[part] {
			b.WriteString(strings.ToUpper(part))
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]) + part[1:])
	}
	return b.String()
}

func lowerFirst(s string) string {
	// Lower a leading initialism whole: URLFetch -> urlFetch.
	for w := range initialisms {
		if up := strings.ToUpper(w); strings.HasPrefix(s, up) && (len(s) == len(up) || isUpper(s[len(up)])) {
			return w + s[len(up):]
		}
	}
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}

func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orInt(i spec.Int, def int) int {
	if !i.Set {
		return def
	}
	return i.Value
}
