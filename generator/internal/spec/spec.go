// Package spec reads idemgen spec files: YAML in, spec values with their
// positions out, and every mistake reported with its line and column.
package spec

import (
	"time"
	"unicode/utf8"
)

// File is one parsed spec. Every value keeps the position it came from so
// later stages can point at it.
type File struct {
	Name     string // the file name used in diagnostics
	Version  Int
	Package  String
	Out      String
	Dialects []String
	Tables   Tables
	Jobs     []Job
	// AllowDrop consents to migrations that drop data: "table" for a
	// destination table, "table.column" for one column.
	AllowDrop []String

	AllowDropPos Pos // zero when allow_drop was not given

	// parsed says what Parse could not read, so that Check, which runs on
	// whatever Parse salvaged, reports neither a value the parser already
	// refused nor, as missing, a key that was given.
	parsed parseFailures

	DialectsPos Pos // zero when dialects was not given
	TablesPos   Pos // zero when tables was not given
	JobsPos     Pos // zero when jobs was not given
}

// parseFailures are the places of Parse's errors, and per mapping (by its
// position) the keys whose values Parse could not read.
type parseFailures struct {
	// read: Parse got as far as the document's keys; a spec it gave up on
	// before (bad YAML, an unsupported version) holds nothing to check.
	fromParse, read bool
	root            Pos
	at              map[Pos]bool
	values          map[Pos]map[string]bool
}

// Tables renames the bookkeeping tables a generated package owns.
type Tables struct {
	Ledger     String
	Progress   String
	Seen       String
	Parked     String
	Limits     String
	Migrations String
}

// Job is one unit of work and what is done with it.
type Job struct {
	Pos         Pos
	Name        String
	Doc         String
	Version     Int
	Unit        Unit
	Source      Source
	Destination *Destination
	Effects     []Effect
	River       *River // nil when the job does not run on River
	// Consume: units arrive from a broker (nil when they do not).
	Consume *Consume
}

// River runs a job on River (github.com/riverqueue/river), PostgreSQL only.
type River struct {
	Pos   Pos
	Queue String
	Every Duration
}

// Unit describes the struct the job handles and its idempotency key.
type Unit struct {
	Pos    Pos
	Type   String
	Fields []Field
	Key    String
	// MaxAttempts parks a unit whose write failed in this many runs.
	MaxAttempts Int

	FieldsPos Pos // zero when fields was not given
}

// Field is one unit field; Type is the spec type with an optional trailing "?".
type Field struct {
	Pos  Pos
	Name String
	Type String
}

// Source kinds.
const (
	SourceWatermark = "watermark"
	SourceCursor    = "cursor"
	SourceNone      = "none"
)

// Source says where units come from; Kind is one of the Source* constants.
type Source struct {
	Pos       Pos
	Kind      String
	Watermark Watermark
}

// Watermark is the time window configuration of a watermark source.
type Watermark struct {
	Pos     Pos
	Field   String
	Overlap Duration
}

// Destination is the table units are written to.
type Destination struct {
	Pos       Pos
	Table     String
	Unique    []String
	UniquePos Pos // zero when unique was not given
	Write     String
	NewerWins String
	Stage     Bool
	// Adopt: the table is created and migrated by the service's own
	// migrations; idemgen creates nothing for it and checks it at Migrate.
	Adopt Bool
}

// Effect is a side effect outside the database, guarded by the ledger.
type Effect struct {
	Pos         Pos
	Name        String
	Key         String
	Version     Int
	When        String
	Lease       Duration
	Retention   Duration
	KeepResult  Bool
	MaxAttempts Int
	Retry       Retry
	Timeout     Duration
	Rate        Rate
	Concurrency Int
	// Redact lists what the operations page, `idemgen ledger` and their
	// JSON hide of the effect's rows: payload, result or both.
	Redact  []String
	Circuit Circuit
	// Publish: the effect publishes the unit to a broker (nil when the
	// service provides the effect's code).
	Publish *Publish
}

// Circuit is an effect's circuit breaker (idemrt.Circuit): failures in a row
// across the fleet open it for cool_down, doubling with each reopening up
// to max_cool_down. Pos is zero when not given.
type Circuit struct {
	Pos         Pos
	Failures    Int
	CoolDown    Duration
	MaxCoolDown Duration
}

// What an effect's redact may list.
const (
	RedactPayload = "payload"
	RedactResult  = "result"
)

// Retry is an effect's backoff between failed attempts; a bound not given
// takes its default (DefaultRetryInitial, DefaultRetryMax).
type Retry struct {
	Pos     Pos // zero when retry was not given
	Initial Duration
	Max     Duration
}

// Rate is a number of calls per second, minute or hour (50/s, 600/m, 1000/h)
// with its position and its text as written.
type Rate struct {
	N    int
	Per  time.Duration // time.Second, time.Minute or time.Hour
	Text string
	Pos  Pos
	Set  bool
}

// String is a scalar string with its position; Set is false when the key was absent.
type String struct {
	Value string
	Pos   Pos
	Set   bool

	// textCol is the column where Value starts verbatim on Pos.Line, or 0
	// when it does not (folded, escaped, block scalars).
	textCol int
}

// PosAt returns the position of the byte offset i of Value: exact when the
// value stands verbatim on one line in the file, else the value's own position.
func (s String) PosAt(i int) Pos {
	if s.textCol == 0 || i < 0 || i > len(s.Value) {
		return s.Pos
	}
	return Pos{s.Pos.Line, s.textCol + utf8.RuneCountInString(s.Value[:i])}
}

// Int is a scalar integer with its position.
type Int struct {
	Value int
	Pos   Pos
	Set   bool
}

// Bool is a scalar boolean with its position.
type Bool struct {
	Value bool
	Pos   Pos
	Set   bool
}

// Duration is a Go duration with its position and its text as written.
type Duration struct {
	Value time.Duration
	Text  string
	Pos   Pos
	Set   bool
}
