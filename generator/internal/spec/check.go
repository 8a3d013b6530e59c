package spec

// Severity policy. A finding is an error when the generated code would be
// wrong (a key that is not deterministic, a unique constraint the key does
// not determine, an effect that could run twice or never) or would not build
// (a name that is not valid Go or SQL, a name idemgen needs for itself).
// It is a warning when the spec is legal and the code correct, but the spec
// probably does not say what its author meant (a setting that can never take
// effect, a key that a version bump will not change, a null rendered as "").
// Warnings never stop generation.

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Check runs every semantic rule over a parsed spec: the mistakes `vet`
// reports and `generate` refuses. Warnings do not stop generation.
// It accepts any File Parse returns, even one Parse reported errors for,
// and checks what Parse could read, so that one run reports every finding:
// it says nothing where Parse already reported an error, nor calls a key
// missing whose value Parse refused.
func Check(f *File) Diagnostics {
	if f == nil || f.parsed.fromParse && !f.parsed.read {
		return nil
	}
	c := &checker{reporter: &reporter{file: f.Name}, f: f}
	c.file()
	// What stands where Parse already reported an error is that error's
	// consequence, not a finding of its own.
	var ds Diagnostics
	for _, d := range c.diags {
		if !f.parsed.at[d.Pos] {
			ds = append(ds, d)
		}
	}
	return ds.Sorted()
}

// givenBadly reports whether key was given in the mapping at parent but
// Parse refused its value (and said why): it is not missing.
func (c *checker) givenBadly(parent Pos, key string) bool {
	return c.f.parsed.values[parent][key]
}

// Field types a unit field may have; a trailing "?" makes it nullable.
var FieldTypes = []string{"string", "int32", "int64", "float64", "bool", "time", "bytes", "json", "uuid"}

// Dialects idemgen emits stores for.
var Dialects = []string{"postgres", "sqlite"}

// Write modes of a destination and when-conditions of an effect.
var (
	WriteModes = []string{"upsert", "insert_once"}
	WhenValues = []string{"inserted", "changed", "always"}
)

// Defaults applied when a key is not given.
const (
	DefaultOut         = "."
	DefaultWrite       = "upsert"
	DefaultWhen        = "always"
	DefaultLease       = 5 * time.Minute
	DefaultMaxAttempts = 5
	DefaultVersion     = 1
	// An effect's backoff between failed attempts (retry); the runtime's
	// idemrt.DefaultRetry.
	DefaultRetryInitial = time.Second
	DefaultRetryMax     = time.Hour
)

// MaxNameLen bounds job and effect names, which become parts of Go names.
const MaxNameLen = 48

// MaxSQLNameLen is PostgreSQL's identifier limit; longer names are cut silently.
const MaxSQLNameLen = 63

// BookkeepingPrefix starts the columns idemgen adds to destination tables.
const BookkeepingPrefix = "idemgen_"

// DefaultTableNames returns the bookkeeping table names of a package
// (ledger, progress, seen, parked, migrations), honouring the renames in tables.
func DefaultTableNames(f *File) (ledger, progress, seen, parked, limits, migrations string) {
	n := tableNames(f)
	return n[0], n[1], n[2], n[3], n[4], n[5]
}

// tableKeys are the keys under tables, in the order tableNames returns them.
var tableKeys = [6]string{"ledger", "progress", "seen", "parked", "limits", "migrations"}

func tableValues(f *File) [6]String {
	t := f.Tables
	return [6]String{t.Ledger, t.Progress, t.Seen, t.Parked, t.Limits, t.Migrations}
}

// TableKey returns the rename of one bookkeeping table, by its key under
// tables (ledger, progress, seen, parked, limits, migrations).
func TableKey(f *File, key string) String {
	for i, k := range tableKeys {
		if k == key {
			return tableValues(f)[i]
		}
	}
	return String{}
}

// tableNames returns each bookkeeping table's name: its rename, or <package>_idem_<key>.
func tableNames(f *File) [6]string {
	var names [6]string
	for i, s := range tableValues(f) {
		names[i] = f.Package.Value + "_idem_" + tableKeys[i]
		if s.Set {
			names[i] = s.Value
		}
	}
	return names
}

var (
	snakeRe    = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	exportedRe = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
	identRe    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	callRe     = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$`)
	driveRe    = regexp.MustCompile(`^[A-Za-z]:`)
)

// Names a key may not use: they change from run to run.
var runTied = set("now", "today", "time", "timestamp", "run_id", "run", "random", "rand", "uuid", "nonce")

// Type names idemgen generates in every package, besides the per-job ones.
var reservedTypes = set("Store", "Report", "Option", "Window", "UnitResult", "EffectResult",
	"ParkedUnit", "Permanent", "ErrPermanent", "ErrParked")
var reservedTypeSuffixes = []string{"Source", "Effects", "Job"}

var goKeywords = set("break", "case", "chan", "const", "continue", "default", "defer", "else",
	"fallthrough", "for", "func", "go", "goto", "if", "import", "interface", "map", "package",
	"range", "return", "select", "struct", "switch", "type", "var")

var goPredeclared = set("any", "append", "bool", "byte", "cap", "clear", "close", "comparable",
	"complex", "complex64", "complex128", "copy", "delete", "error", "false", "float32", "float64",
	"imag", "int", "int8", "int16", "int32", "int64", "iota", "len", "make", "max", "min", "new",
	"nil", "panic", "print", "println", "real", "recover", "rune", "string", "true", "uint",
	"uint8", "uint16", "uint32", "uint64", "uintptr")

// sqlReserved holds words that cannot be used as a column or table name
// without quoting in PostgreSQL or SQLite, plus system column names that
// would clash (ctid, rowid, ...). Generated SQL never quotes names, so a
// name from this list would break a migration or a query.
var sqlReserved = set(
	// PostgreSQL reserved key words.
	"all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric", "both",
	"case", "cast", "check", "collate", "column", "constraint", "create", "current_catalog",
	"current_date", "current_role", "current_time", "current_timestamp", "current_user",
	"default", "deferrable", "desc", "distinct", "do", "else", "end", "except", "false",
	"fetch", "for", "foreign", "from", "grant", "group", "having", "in", "initially",
	"intersect", "into", "lateral", "leading", "limit", "localtime", "localtimestamp", "not",
	"null", "offset", "on", "only", "or", "order", "placing", "primary", "references",
	"returning", "select", "session_user", "some", "symmetric", "table", "then", "to",
	"trailing", "true", "union", "unique", "user", "using", "variadic", "when", "where",
	"window", "with",
	// PostgreSQL words reserved for column names and types, and SQLite keywords
	// that are not accepted as bare names everywhere.
	"authorization", "between", "binary", "by", "collation", "concurrently", "cross",
	"delete", "drop", "escape", "exists", "freeze", "full", "glob", "ilike", "index",
	"inner", "insert", "is", "isnull", "join", "key", "left", "like", "match", "natural",
	"notnull", "outer", "overlaps", "regexp", "right", "set", "similar", "tablesample",
	"transaction", "update", "values", "verbose", "alter", "autoincrement", "conflict",
	"indexed", "raise", "replace", "trigger", "view",
	// System columns.
	"ctid", "xmin", "xmax", "cmin", "cmax", "tableoid", "oid", "rowid", "_rowid_",
)

// Usual names for field types and dialects, for suggestions edit distance misses.
var typeAliases = map[string]string{
	"int": "int64", "integer": "int64", "bigint": "int64", "long": "int64", "int8": "int64",
	"smallint": "int32", "int4": "int32", "uint32": "int64",
	"float": "float64", "double": "float64", "real": "float64", "float32": "float64", "numeric": "float64", "decimal": "float64",
	"str": "string", "text": "string", "varchar": "string",
	"boolean":   "bool",
	"timestamp": "time", "timestamptz": "time", "datetime": "time", "date": "time", "time.time": "time",
	"bytea": "bytes", "blob": "bytes", "[]byte": "bytes", "byte": "bytes",
	"jsonb": "json", "object": "json",
	"guid": "uuid",
}

var dialectAliases = map[string]string{
	"pg": "postgres", "postgresql": "postgres", "psql": "postgres", "pgx": "postgres",
	"sqlite3": "sqlite",
}

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// suggestWith prefers a known alias, then the nearest candidate.
func suggestWith(s string, aliases map[string]string, candidates []string) string {
	if a, ok := aliases[strings.ToLower(s)]; ok {
		return fmt.Sprintf(" (did you mean %s?)", a)
	}
	return didYouMean(s, candidates)
}

type checker struct {
	*reporter
	f *File
}

// firstSeen remembers where a name was first used, to report repeats.
type firstSeen map[string]Pos

func (s firstSeen) repeat(name string, p Pos) (Pos, bool) {
	if first, ok := s[name]; ok {
		return first, true
	}
	s[name] = p
	return Pos{}, false
}

// jobCtx checks one job; the maps passed to its methods carry what must be
// unique across jobs.
type jobCtx struct {
	*checker
	j      *Job
	prefix string            // `job "name": ` for messages
	fields map[string]*Field // fields with valid names
	names  []string          // field names in order, for suggestions
	broken map[string]bool   // names of fields already reported as invalid
	keyUse []string          // unit fields the unit key uses, nil if the key is unusable
}

func (c *checker) file() {
	f := c.f
	c.pkg()
	c.out()
	c.dialects()
	c.tables()
	c.allowDrop()
	if len(f.Jobs) == 0 && !c.givenBadly(f.parsed.root, "jobs") {
		p := f.JobsPos
		if p.Line == 0 {
			p = Pos{1, 1}
		}
		c.errorf(p, "spec: no jobs; a spec needs at least one")
	}
	jobNames, unitTypes, effectNames, tables, effectKeys := firstSeen{}, firstSeen{}, firstSeen{}, firstSeen{}, map[string]string{}
	names := tableNames(f)
	bookkeeping := set(names[:]...)
	for i := range f.Jobs {
		j := &f.Jobs[i]
		jc := &jobCtx{checker: c, j: j, prefix: fmt.Sprintf("job #%d: ", i+1)}
		if j.Name.Set && j.Name.Value != "" {
			jc.prefix = fmt.Sprintf("job %q: ", j.Name.Value)
		}
		jc.name(jobNames)
		jc.unit(unitTypes)
		jc.source()
		jc.destination(tables, bookkeeping)
		jc.effects(effectNames, effectKeys)
		jc.river()
		jc.consume()
	}
}

// riverQueueName is River's own rule for queue names (river/client.go), so a
// bad queue is refused here, with its position, not when a worker starts.
var riverQueueName = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

func validRiverQueue(q string) bool { return len(q) <= 64 && riverQueueName.MatchString(q) }

// river checks the job's river key: PostgreSQL only, a periodic interval
// exactly when there is a Run to call, and a queue name River accepts.
func (jc *jobCtx) river() {
	r := jc.j.River
	if r == nil {
		return
	}
	if !slices.ContainsFunc(jc.f.Dialects, func(d String) bool { return d.Value == "postgres" }) {
		jc.errorf(r.Pos, "%sriver needs the postgres dialect (River runs on PostgreSQL); add postgres to dialects", jc.prefix)
	}
	switch q := r.Queue; {
	case q.Set && !validRiverQueue(q.Value):
		jc.errorf(q.Pos, "%sriver queue %q is not a River queue name (lower-case letters and digits, joined by - or _, at most 64)", jc.prefix, q.Value)
	case !q.Set && jc.f.Package.Value != "" && !validRiverQueue(jc.f.Package.Value):
		jc.errorf(r.Pos, "%sriver: the default queue, the package name %q, is not a River queue name; set queue", jc.prefix, jc.f.Package.Value)
	}
	switch kind := jc.j.Source.Kind.Value; kind {
	case SourceNone:
		if r.Every.Set {
			jc.errorf(r.Every.Pos, "%sriver every: a job of handed-in units (source: none) has no Run to schedule; units are enqueued with the generated insert helper", jc.prefix)
		}
	case SourceWatermark, SourceCursor:
		switch {
		case !r.Every.Set && jc.givenBadly(r.Pos, "every"):
		case !r.Every.Set:
			jc.errorf(r.Pos, "%sriver: missing every (how often the periodic River job calls Run, e.g. every: 5m)", jc.prefix)
		case r.Every.Value < time.Second:
			jc.errorf(r.Every.Pos, "%sriver every %s is shorter than River's smallest period, 1s", jc.prefix, r.Every.Text)
		}
	}
}

func (c *checker) pkg() {
	p := c.f.Package
	switch {
	case !p.Set && c.givenBadly(c.f.parsed.root, "package"):
	case !p.Set:
		c.errorf(Pos{1, 1}, "spec: missing package (the Go package name of the generated code)")
	case !snakeRe.MatchString(p.Value):
		c.errorf(p.Pos, "package %q is not a valid Go package name (lower-case letters, digits and _, starting with a letter)", p.Value)
	case goKeywords[p.Value]:
		c.errorf(p.Pos, "package %q is a Go keyword", p.Value)
	case goPredeclared[p.Value]:
		c.errorf(p.Pos, "package %q is a Go predeclared identifier; importing it would shadow %s", p.Value, p.Value)
	case p.Value == "main":
		c.errorf(p.Pos, "package main cannot be imported; name the package after what it does")
	case strings.HasSuffix(p.Value, "_test"):
		c.errorf(p.Pos, "package %q ends in _test, which go reserves for external test packages", p.Value)
	default:
		for _, t := range tableNames(c.f) {
			if len(t) > MaxSQLNameLen {
				c.errorf(p.Pos, "package %q is too long: its table %s would exceed %d characters (shorten it or rename the table under tables)", p.Value, t, MaxSQLNameLen)
				break
			}
		}
	}
}

func (c *checker) out() {
	o := c.f.Out
	if !o.Set {
		return
	}
	v := o.Value
	switch {
	case v == "":
		c.errorf(o.Pos, "out is empty; omit it to generate next to the spec")
	case strings.ContainsRune(v, '\\'):
		c.errorf(o.Pos, "out %q contains a backslash; use / to separate directories", v)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		c.errorf(o.Pos, "out %q contains control characters", v)
	case path.IsAbs(v) || driveRe.MatchString(v):
		c.errorf(o.Pos, "out %q must be a relative path (relative to the spec file)", v)
	default:
		if cl := path.Clean(v); cl == ".." || strings.HasPrefix(cl, "../") {
			c.errorf(o.Pos, "out %q escapes the spec's directory", v)
		}
	}
}

func (c *checker) dialects() {
	f := c.f
	if len(f.Dialects) == 0 {
		if c.givenBadly(f.parsed.root, "dialects") {
			return
		}
		p := f.DialectsPos
		if p.Line == 0 {
			p = Pos{1, 1}
		}
		c.errorf(p, "spec: dialects needs at least one of %s", strings.Join(Dialects, ", "))
		return
	}
	seen := firstSeen{}
	for _, d := range f.Dialects {
		if !slices.Contains(Dialects, d.Value) {
			c.errorf(d.Pos, "dialect %q is not one of %s%s", d.Value, strings.Join(Dialects, ", "), suggestWith(d.Value, dialectAliases, Dialects))
			continue
		}
		if first, dup := seen.repeat(d.Value, d.Pos); dup {
			c.errorf(d.Pos, "dialect %s is repeated (first at line %d)", d.Value, first.Line)
		}
	}
}

func (c *checker) tables() {
	names, values := tableNames(c.f), tableValues(c.f)
	for i, s := range values {
		if !s.Set || !c.sqlName(s, "tables."+tableKeys[i]) {
			continue
		}
		// A rename may also land on another table's default name.
		for k := range tableKeys {
			if k != i && names[k] == s.Value && (k < i || !values[k].Set) {
				c.errorf(s.Pos, "tables.%s: table %s is already the %s table", tableKeys[i], s.Value, tableKeys[k])
				break
			}
		}
	}
}

// allowDrop checks the consent to migrations that drop data: each entry a
// table or a table.column, both SQL names, none repeated.
func (c *checker) allowDrop() {
	seen := firstSeen{}
	for _, a := range c.f.AllowDrop {
		table, column, hasColumn := strings.Cut(a.Value, ".")
		if !snakeRe.MatchString(table) || hasColumn && !snakeRe.MatchString(column) {
			c.errorf(a.Pos, "allow_drop %q is not a table or a table.column (lower-case SQL names)", a.Value)
			continue
		}
		if first, dup := seen.repeat(a.Value, a.Pos); dup {
			c.errorf(a.Pos, "allow_drop %s is repeated (first at line %d)", a.Value, first.Line)
		}
	}
}

// goName is how a snake_case name is compared with others once it is a Go
// name: InvoiceSync and Invoicesync are one name to a reader, and initialism
// rules may make them one to the generator.
func goName(snake string) string { return "\x00" + strings.ReplaceAll(snake, "_", "") }

// sqlName checks a table name; it reports and returns false when unusable.
func (c *checker) sqlName(s String, what string) bool {
	switch {
	case s.Value == "":
		c.errorf(s.Pos, "%s is empty", what)
	case !snakeRe.MatchString(s.Value):
		c.errorf(s.Pos, "%s %q is not a valid SQL name (lower-case letters, digits and _, starting with a letter)", what, s.Value)
	case len(s.Value) > MaxSQLNameLen:
		c.errorf(s.Pos, "%s %q is longer than %d characters", what, s.Value, MaxSQLNameLen)
	case sqlReserved[s.Value]:
		c.errorf(s.Pos, "%s %q is an SQL reserved word", what, s.Value)
	default:
		return true
	}
	return false
}

// fileJobNames are job names whose file, idemgen_<job>.go, is one the
// package already writes.
var fileJobNames = set("store", "postgres", "sqlite", "postgres_ledger", "sqlite_ledger", "river", "crashsim_test")

func (jc *jobCtx) name(jobNames firstSeen) {
	n := jc.j.Name
	switch {
	case !n.Set && jc.givenBadly(jc.j.Pos, "name"):
	case !n.Set || n.Value == "":
		jc.errorf(jc.j.Pos, "%smissing name", jc.prefix)
	case !snakeRe.MatchString(n.Value):
		jc.errorf(n.Pos, "job name %q must be snake_case (lower-case letters, digits and _, starting with a letter)", n.Value)
	case len(n.Value) > MaxNameLen:
		jc.errorf(n.Pos, "job name %q is longer than %d characters", n.Value, MaxNameLen)
	case fileJobNames[n.Value]:
		jc.errorf(n.Pos, "job name %q would share its file with the package's idemgen_%s.go; pick another name", n.Value, n.Value)
	default:
		if first, dup := jobNames.repeat(n.Value, n.Pos); dup {
			jc.errorf(n.Pos, "job name %q is repeated (first at line %d)", n.Value, first.Line)
		} else if first, dup := jobNames.repeat(goName(n.Value), n.Pos); dup {
			jc.errorf(n.Pos, "job name %q becomes the same Go name as the job at line %d", n.Value, first.Line)
		}
	}
	if v := jc.j.Version; v.Set && v.Value < 1 {
		jc.errorf(v.Pos, "%sversion must be at least 1, not %d", jc.prefix, v.Value)
	}
}

func (jc *jobCtx) unit(unitTypes firstSeen) {
	u := &jc.j.Unit
	if u.Pos.Line == 0 {
		if jc.givenBadly(jc.j.Pos, "unit") {
			return
		}
		jc.errorf(jc.j.Pos, "%smissing unit (type, fields and key)", jc.prefix)
		return
	}
	jc.unitType(unitTypes)
	jc.unitFields()
	if m := u.MaxAttempts; m.Set && m.Value < 1 {
		jc.errorf(m.Pos, "%sunit max_attempts must be at least 1, not %d", jc.prefix, m.Value)
	}
	if !u.Key.Set {
		if jc.givenBadly(u.Pos, "key") {
			return
		}
		jc.errorf(u.Pos, "%sunit: missing key (the idempotency key, e.g. \"%s:{%s}\")", jc.prefix, jc.keyExample(), cmpOr(jc.names, "id"))
		return
	}
	phs, ok := jc.template(u.Key, false)
	if !ok {
		return
	}
	used := fieldsOf(phs)
	if len(used) == 0 {
		jc.errorf(u.Key.Pos, "%sunit key %q has no placeholder; every unit would have the same key", jc.prefix, u.Key.Value)
		return
	}
	for _, ph := range phs {
		for i, name := range ph.fields {
			if fld := typed(jc.fields[name]); fld != nil && nullable(fld.Type.Value) {
				jc.warnf(u.Key.PosAt(ph.offs[i]), "%sunit key uses nullable field %s; a null renders as an empty string in the key", jc.prefix, name)
			}
		}
	}
	jc.keyUse = used
}

func (jc *jobCtx) keyExample() string {
	if jc.j.Name.Value != "" && snakeRe.MatchString(jc.j.Name.Value) {
		return jc.j.Name.Value
	}
	return "job"
}

func (jc *jobCtx) unitType(unitTypes firstSeen) {
	t := jc.j.Unit.Type
	switch {
	case !t.Set && jc.givenBadly(jc.j.Unit.Pos, "type"):
		return
	case !t.Set || t.Value == "":
		jc.errorf(jc.j.Unit.Pos, "%sunit: missing type (the Go struct name, e.g. Invoice)", jc.prefix)
		return
	case !exportedRe.MatchString(t.Value):
		jc.errorf(t.Pos, "%sunit type %q must be an exported Go name (a capital letter, then letters and digits)", jc.prefix, t.Value)
		return
	case reservedTypes[t.Value]:
		jc.errorf(t.Pos, "%sunit type %s is a name idemgen generates; pick another", jc.prefix, t.Value)
		return
	}
	for _, suf := range reservedTypeSuffixes {
		if strings.HasSuffix(t.Value, suf) {
			jc.errorf(t.Pos, "%sunit type %s ends in %s, which idemgen reserves for the names it generates", jc.prefix, t.Value, suf)
			return
		}
	}
	// A unit type named after a job or an effect is fine: the derived Go
	// name gives way (model.giveWay).
	if first, dup := unitTypes.repeat(t.Value, t.Pos); dup {
		jc.errorf(t.Pos, "%sunit type %s is repeated (first at line %d)", jc.prefix, t.Value, first.Line)
	}
}

func nullable(typ string) bool { return strings.HasSuffix(typ, "?") }

func validType(typ string) bool {
	return slices.Contains(FieldTypes, strings.TrimSuffix(typ, "?"))
}

// typed returns a field whose type is valid, or nil: checks on types skip
// fields whose type was already reported.
func typed(fld *Field) *Field {
	if fld == nil || !fld.Type.Set || !validType(fld.Type.Value) {
		return nil
	}
	return fld
}

func baseType(typ string) string { return strings.TrimSuffix(typ, "?") }

func (jc *jobCtx) unitFields() {
	u := &jc.j.Unit
	jc.fields, jc.broken = map[string]*Field{}, map[string]bool{}
	if len(u.Fields) == 0 && u.FieldsPos.Line == 0 && jc.givenBadly(u.Pos, "fields") {
		return
	}
	if len(u.Fields) == 0 {
		p := u.FieldsPos
		if p.Line == 0 {
			p = u.Pos
		}
		jc.errorf(p, "%sunit needs at least one field", jc.prefix)
		return
	}
	for i := range u.Fields {
		fld := &u.Fields[i]
		name := fld.Name.Value
		if !jc.fieldName(fld) {
			jc.broken[name] = true
		} else {
			if prev, dup := jc.fields[name]; dup {
				jc.errorf(fld.Name.Pos, "%sunit field %s is repeated (first at line %d)", jc.prefix, name, prev.Name.Pos.Line)
			} else {
				jc.fields[name] = fld
				jc.names = append(jc.names, name)
			}
		}
		typ := fld.Type.Value
		if !fld.Type.Set {
			continue // the parser said why
		}
		if !validType(typ) {
			base := baseType(typ)
			jc.errorf(fld.Type.Pos, "%sunit field %s: type %q is not one of %s, optionally followed by ?%s",
				jc.prefix, name, typ, strings.Join(FieldTypes, " "), suggestWith(base, typeAliases, FieldTypes))
		}
	}
}

// fieldName checks a field's name; false means it cannot be referred to.
func (jc *jobCtx) fieldName(fld *Field) bool {
	n := fld.Name
	switch {
	case !n.Set || n.Value == "":
		jc.errorf(fld.Pos, "%sunit field has no name", jc.prefix)
		return false
	case !snakeRe.MatchString(n.Value):
		jc.errorf(n.Pos, "%sunit field %q must be snake_case (lower-case letters, digits and _, starting with a letter)", jc.prefix, n.Value)
		return false
	case len(n.Value) > MaxSQLNameLen:
		jc.errorf(n.Pos, "%sunit field %s is longer than %d characters", jc.prefix, n.Value, MaxSQLNameLen)
	case strings.HasPrefix(n.Value, BookkeepingPrefix):
		jc.errorf(n.Pos, "%sunit field %s: the %s prefix is reserved for idemgen's bookkeeping columns", jc.prefix, n.Value, BookkeepingPrefix)
	case sqlReserved[n.Value]:
		jc.errorf(n.Pos, "%sunit field %s is an SQL reserved word; pick another name", jc.prefix, n.Value)
	case n.Value == "version" || n.Value == "job_version":
		jc.errorf(n.Pos, "%sunit field %s would be ambiguous with {%s} in effect keys; pick another name", jc.prefix, n.Value, n.Value)
	}
	return true
}

func (jc *jobCtx) source() {
	s := &jc.j.Source
	if s.Pos.Line == 0 {
		if jc.givenBadly(jc.j.Pos, "source") {
			return
		}
		jc.errorf(jc.j.Pos, "%smissing source (one of watermark, cursor, none)", jc.prefix)
		return
	}
	if s.Kind.Value != SourceWatermark {
		return
	}
	w := &s.Watermark
	if !w.Overlap.Set && !jc.givenBadly(w.Pos, "overlap") {
		jc.errorf(w.Pos, "%swatermark without overlap; rows committed late behind the high-water mark would be missed (e.g. overlap: 10m)", jc.prefix)
	}
	if !w.Field.Set && jc.givenBadly(w.Pos, "field") {
		return
	}
	if !w.Field.Set || w.Field.Value == "" {
		jc.errorf(w.Pos, "%swatermark: missing field (a unit field of type time)", jc.prefix)
		return
	}
	fld, ok := jc.field(w.Field, "watermark field")
	if !ok || typed(fld) == nil {
		return
	}
	switch typ := fld.Type.Value; {
	case typ == "time?":
		jc.errorf(w.Field.Pos, "%swatermark field %s is nullable (time?); a unit without it would never be picked up", jc.prefix, fld.Name.Value)
	case typ != "time":
		jc.errorf(w.Field.Pos, "%swatermark field %s is %s, not time", jc.prefix, fld.Name.Value, typ)
	}
}

// field resolves a reference to a unit field, reporting an unknown one.
func (jc *jobCtx) field(ref String, what string) (*Field, bool) {
	if fld := jc.fields[ref.Value]; fld != nil {
		return fld, true
	}
	if jc.unknownField(ref.Value) {
		jc.errorf(ref.Pos, "%s%s %s is not a unit field%s", jc.prefix, what, ref.Value, didYouMean(ref.Value, jc.names))
	}
	return nil, false
}

func (jc *jobCtx) destination(tables firstSeen, bookkeeping map[string]bool) {
	d := jc.j.Destination
	if d == nil {
		return
	}
	switch t := d.Table; {
	case !t.Set && jc.givenBadly(d.Pos, "table"):
	case !t.Set:
		jc.errorf(d.Pos, "%sdestination: missing table", jc.prefix)
	case !jc.sqlName(t, jc.prefix+"destination table"):
	case bookkeeping[t.Value]:
		jc.errorf(t.Pos, "%sdestination table %s is one of idemgen's bookkeeping tables", jc.prefix, t.Value)
	default:
		if first, dup := tables.repeat(t.Value, t.Pos); dup {
			jc.errorf(t.Pos, "%sdestination table %s is already the destination of another job (line %d)", jc.prefix, t.Value, first.Line)
		}
	}
	write := DefaultWrite
	if d.Write.Set {
		write = d.Write.Value
		if !slices.Contains(WriteModes, write) {
			jc.errorf(d.Write.Pos, "%sdestination write %q is not one of %s%s", jc.prefix, write, strings.Join(WriteModes, ", "), didYouMean(write, WriteModes))
		}
	}
	jc.unique(d)
	if nw := d.NewerWins; nw.Set {
		if fld, ok := jc.field(nw, "newer_wins"); ok {
			switch typ := fld.Type.Value; {
			case typed(fld) == nil:
			case nullable(typ):
				jc.errorf(nw.Pos, "%snewer_wins field %s is nullable; a null cannot be compared", jc.prefix, nw.Value)
			case !slices.Contains([]string{"time", "int32", "int64", "float64", "string"}, typ):
				jc.errorf(nw.Pos, "%snewer_wins field %s is %s; it must be time, int32, int64, float64 or string", jc.prefix, nw.Value, typ)
			}
			if write == "insert_once" {
				jc.warnf(nw.Pos, "%snewer_wins has no effect with write: insert_once (rows are never overwritten)", jc.prefix)
			} else if slices.Contains(jc.uniqueNames(d), nw.Value) {
				jc.warnf(nw.Pos, "%snewer_wins field %s is part of the unique constraint, so it is equal on every conflict and decides nothing", jc.prefix, nw.Value)
			}
		}
	}
}

// uniqueNames returns the destination's unique fields, or the key's by default.
func (jc *jobCtx) uniqueNames(d *Destination) []string {
	if d.UniquePos.Line == 0 {
		return jc.keyUse
	}
	var out []string
	for _, u := range d.Unique {
		out = append(out, u.Value)
	}
	return out
}

func (jc *jobCtx) unique(d *Destination) {
	if d.UniquePos.Line == 0 {
		// Defaults to the key's fields: determined by construction, but a
		// nullable one would let duplicates in.
		for _, name := range jc.keyUse {
			if fld := typed(jc.fields[name]); fld != nil && nullable(fld.Type.Value) {
				jc.errorf(d.Pos, "%sdestination unique defaults to the key's fields, and %s is nullable; NULLs never conflict, so duplicates would be let in (list unique fields explicitly)", jc.prefix, name)
			}
		}
		return
	}
	if len(d.Unique) == 0 {
		jc.errorf(d.UniquePos, "%sdestination unique must name at least one field (or be left out to use the key's fields)", jc.prefix)
		return
	}
	seen := firstSeen{}
	for _, u := range d.Unique {
		fld, ok := jc.field(u, "destination unique field")
		if !ok {
			continue
		}
		if first, dup := seen.repeat(u.Value, u.Pos); dup {
			jc.errorf(u.Pos, "%sdestination unique field %s is repeated (first at line %d, column %d)", jc.prefix, u.Value, first.Line, first.Col)
			continue
		}
		if typed(fld) != nil && nullable(fld.Type.Value) {
			jc.errorf(u.Pos, "%sdestination unique field %s is nullable; NULLs never conflict, so duplicates would be let in", jc.prefix, u.Value)
		}
		if jc.keyUse != nil && !slices.Contains(jc.keyUse, u.Value) {
			jc.errorf(u.Pos, "%sdestination unique field %s is not determined by the key", jc.prefix, u.Value)
		}
	}
}
