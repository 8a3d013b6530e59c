package sqlgen

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// Schema is the database schema of one package in one dialect, as data: what
// the package's migrations produce. The first migration renders it; later
// migrations are planned by comparing it (as recorded in the snapshot) with
// the schema the spec asks for now.
type Schema struct {
	Dialect model.Dialect `json:"dialect"`
	// VersionTable is goose's version table; renaming it would re-run every migration.
	VersionTable string `json:"version_table"`
	// Tables are in creation order.
	Tables []Table `json:"tables"`
}

// Table roles: the bookkeeping tables and job destinations.
const (
	RoleLedger      = "ledger"
	RoleProgress    = "progress"
	RoleSeen        = "seen"
	RoleParked      = "parked"
	RoleLimits      = "limits"
	RoleDestination = "destination"
)

// BookkeepingRoles are the roles of the tables every package owns.
var BookkeepingRoles = []string{RoleLedger, RoleProgress, RoleSeen, RoleParked, RoleLimits}

// Table is one table with its columns, keys and indexes.
type Table struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// Job is the job a destination table belongs to.
	Job     string   `json:"job,omitempty"`
	Columns []Column `json:"columns"`
	// PrimaryKey is a table-level primary key over several columns.
	PrimaryKey []string `json:"primary_key,omitempty"`
	Unique     *Unique  `json:"unique,omitempty"`
	Indexes    []Index  `json:"indexes,omitempty"`
	// Aligned pads column names into a column, as the bookkeeping tables are written.
	Aligned bool `json:"aligned,omitempty"`
	// Adopted is a destination the service's own migrations create and
	// change (destination adopt: true): no migration touches it, and the
	// generated Migrate checks its shape (idemrt.CheckTables).
	Adopted bool `json:"adopted,omitempty"`
}

// Column is one column. Destination columns use only Name, Type, NotNull and Default.
type Column struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	NotNull    bool   `json:"not_null,omitempty"`
	Default    string `json:"default,omitempty"`
	PrimaryKey bool   `json:"primary_key,omitempty"`
	Check      string `json:"check,omitempty"`
}

// Unique is a named table constraint: the ON CONFLICT target of a destination.
type Unique struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
}

// Index is a plain index; with Where, a partial one (only the rows that
// match it are in it).
type Index struct {
	Name    string   `json:"name"`
	Columns []string `json:"columns"`
	Where   string   `json:"where,omitempty"`
}

// on is what an index is built on, after its name: "t (a, b)", with its
// WHERE when partial.
func (ix Index) on(table string) string {
	s := fmt.Sprintf("%s (%s)", table, strings.Join(ix.Columns, ", "))
	if ix.Where != "" {
		s += " WHERE " + ix.Where
	}
	return s
}

// Column returns the named column, or nil.
func (t *Table) Column(name string) *Column {
	for i := range t.Columns {
		if t.Columns[i].Name == name {
			return &t.Columns[i]
		}
	}
	return nil
}

// Table returns the named table, or nil.
func (s *Schema) Table(name string) *Table {
	for i := range s.Tables {
		if s.Tables[i].Name == name {
			return &s.Tables[i]
		}
	}
	return nil
}

// SchemaOf is the schema the package asks for in dialect d.
func SchemaOf(p *model.Package, d model.Dialect) Schema {
	dd := newData(p, d)
	col := func(name, typ string, notNull bool) Column { return Column{Name: name, Type: typ, NotNull: notNull} }
	ledger := Table{Name: p.Tables.Ledger, Role: RoleLedger, Aligned: true, Columns: []Column{
		{Name: "effect_key", Type: dd.Text, PrimaryKey: true},
		col("job", dd.Text, true),
		col("effect", dd.Text, true),
		col("effect_version", dd.Int, true),
		col("job_version", dd.Int, true),
		col("unit_key", dd.Text, true),
		col("payload", dd.Bytes, true),
		{Name: "state", Type: dd.Text, NotNull: true, Check: "state IN ('pending', 'done', 'failed')"},
		{Name: "attempts", Type: dd.Int, NotNull: true, Default: "0"},
		col("lease_owner", dd.Text, false),
		col("lease_until", dd.Time, false),
		col("result", dd.Bytes, false),
		col("last_error", dd.Text, false),
		col("created_at", dd.Time, true),
		col("updated_at", dd.Time, true),
		col("done_at", dd.Time, false),
		// Why a row is failed, as columns rather than text: permanent is
		// the provider's Permanent on the last failure; parked_reason is
		// 'permanent' or 'max_attempts' while the row is failed, else NULL.
		{Name: "permanent", Type: dd.Bool, NotNull: true, Default: "false"},
		col("parked_reason", dd.Text, false),
		// When a failed attempt's row may be tried again, on the database's
		// clock (the effect's retry backoff, or the provider's RetryAfter).
		col("next_attempt_at", dd.Time, false),
	}, Indexes: ledgerIndexes(p.Tables.Ledger, d)}
	progress := Table{Name: p.Tables.Progress, Role: RoleProgress, Aligned: true, Columns: []Column{
		{Name: "job", Type: dd.Text, PrimaryKey: true},
		col("watermark", dd.Time, false),
		col("cursor_token", dd.Text, false),
		{Name: "cursor_position", Type: dd.BigInt, NotNull: true, Default: "0"},
		col("job_version", dd.Int, true),
		col("updated_at", dd.Time, true),
	}}
	seen := Table{Name: p.Tables.Seen, Role: RoleSeen, Aligned: true, Columns: []Column{
		col("job", dd.Text, true),
		col("unit_key", dd.Text, true),
		col("payload_hash", dd.Bytes, true),
		col("job_version", dd.Int, true),
		col("first_seen", dd.Time, true),
	}, PrimaryKey: []string{"job", "unit_key"}, Indexes: []Index{
		// Purge of handed-in key records: those past retention.
		{Name: p.Tables.Seen + "_first_seen", Columns: []string{"job", "first_seen"}},
	}}
	// One row per unit whose write failed and that has not been written
	// since: failing, parked after the unit's max_attempts, or put back
	// for retry by a person.
	parked := Table{Name: p.Tables.Parked, Role: RoleParked, Aligned: true, Columns: []Column{
		col("job", dd.Text, true),
		col("unit_key", dd.Text, true),
		col("payload", dd.Bytes, true),
		col("payload_hash", dd.Bytes, true),
		{Name: "attempts", Type: dd.Int, NotNull: true, Default: "0"},
		col("last_error", dd.Text, true),
		{Name: "state", Type: dd.Text, NotNull: true, Check: "state IN ('failing', 'parked', 'retry')"},
		col("mark", dd.Time, false),
		col("job_version", dd.Int, true),
		col("first_failed_at", dd.Time, true),
		col("updated_at", dd.Time, true),
	}, PrimaryKey: []string{"job", "unit_key"}, Indexes: []Index{
		{Name: p.Tables.Parked + "_state", Columns: []string{"job", "state", "unit_key"}},
	}}
	// The fleet-wide bounds of effects with a rate or a concurrency: per
	// effect, slot -1 paces its calls (held_until: the earliest start of the
	// next call), slots 0..concurrency-1 are its calls in flight (owner
	// and held_until: a worker's call, held until its lease ends), and
	// slot -2 is its gate (idem/idemrt/gate.go): gate 'paused' or 'open' until
	// held_until, or 'probe' (owner's one call, held until its lease
	// ends); failures in a row, opens in a row, since when, and the
	// provider's last answer (reason).
	limits := Table{Name: p.Tables.Limits, Role: RoleLimits, Aligned: true, Columns: []Column{
		col("job", dd.Text, true),
		col("effect", dd.Text, true),
		col("slot", dd.Int, true),
		col("owner", dd.Text, false),
		col("held_until", dd.Time, false),
		col("gate", dd.Text, false), // 'paused', 'open', 'probe' or NULL (closed)
		{Name: "failures", Type: dd.Int, NotNull: true, Default: "0"},
		{Name: "opens", Type: dd.Int, NotNull: true, Default: "0"},
		col("since", dd.Time, false),
		col("reason", dd.Text, false),
	}, PrimaryKey: []string{"job", "effect", "slot"}}
	s := Schema{Dialect: d, VersionTable: p.Tables.Migrations, Tables: []Table{ledger, progress, seen, parked, limits}}
	for i, j := range p.Jobs {
		sj := dd.Jobs[i]
		if sj.Table == "" {
			continue
		}
		s.Tables = append(s.Tables, Table{
			Name: sj.Table, Role: RoleDestination, Job: j.Name,
			Columns: slices.Clone(sj.Columns),
			Unique:  &Unique{Name: sj.Table + "_unique", Columns: slices.Clone(sj.Unique)},
			Adopted: j.Dest.Adopted,
		})
	}
	return s
}

// ledgerIndexes are the ledger's indexes. Each row is in two of them
// besides its key, whatever its state, on PostgreSQL: the two partial ones
// split the rows by state, so a reservation adds to _open and its
// completion to _done_at, and neither write pays for an index the other
// state needs. (Earlier idemgen kept five, _pending, _unit and _done
// holding every row; with three, a reservation and a completion cost
// about 40% less on PostgreSQL.) SQLite uses a partial index only
// for a query that repeats its WHERE word for word, and the open rows are
// read by state ('pending', 'failed'), so there _pending holds every row,
// as before.
func ledgerIndexes(ledger string, d model.Dialect) []Index {
	// Claims, drains, the backlog gauge and status: a job's open rows
	// (owed or parked) by state. On PostgreSQL a year of done rows, most
	// of a ledger, is not in it, so it stays the size of the backlog.
	open := Index{Name: ledger + "_open", Columns: []string{"job", "state", "effect_key"}, Where: "state <> 'done'"}
	if d == model.SQLite {
		open = Index{Name: ledger + "_pending", Columns: []string{"job", "state", "effect_key"}}
	}
	return []Index{
		open,
		// Purge and status: an effect's done rows by age, without reading
		// the rows it keeps.
		{Name: ledger + "_done_at", Columns: []string{"job", "effect", "done_at"}, Where: "state = 'done'"},
		// A unit's rows: purge of handed-in key records (whether any row
		// of the unit is left), and the earlier effect versions a write
		// looks up (DecidedUnits).
		{Name: ledger + "_unit_key", Columns: []string{"job", "unit_key"}},
	}
}

// createTable renders CREATE TABLE and the table's indexes, without a final newline.
func createTable(t Table) string {
	return createTableAs(t, t.Name)
}

// createTableAs renders t under another name (a SQLite rebuild's new table);
// its indexes are left out then, as they belong to the final name.
func createTableAs(t Table, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "CREATE TABLE %s (", name)
	width := 0
	if t.Aligned {
		for _, c := range t.Columns {
			width = max(width, len(c.Name))
		}
	}
	var lines []string
	for _, c := range t.Columns {
		lines = append(lines, "    "+columnDef(c, width))
	}
	if len(t.PrimaryKey) > 0 {
		lines = append(lines, "    PRIMARY KEY ("+strings.Join(t.PrimaryKey, ", ")+")")
	}
	if t.Unique != nil {
		lines = append(lines, "    CONSTRAINT "+t.Unique.Name+" UNIQUE ("+strings.Join(t.Unique.Columns, ", ")+")")
	}
	b.WriteString("\n" + strings.Join(lines, ",\n") + "\n);")
	if name == t.Name {
		for _, ix := range t.Indexes {
			b.WriteString("\n" + createIndex(t.Name, ix))
		}
	}
	return b.String()
}

func createIndex(table string, ix Index) string {
	return fmt.Sprintf("CREATE INDEX %s ON %s;", ix.Name, ix.on(table))
}

// columnDef is a column's definition; width pads its name.
func columnDef(c Column, width int) string {
	s := c.Name
	if width > 0 {
		s = fmt.Sprintf("%-*s", width, c.Name)
	}
	s += " " + c.Type
	if c.NotNull {
		s += " NOT NULL"
	}
	if c.Default != "" {
		s += " DEFAULT " + c.Default
	}
	if c.PrimaryKey {
		s += " PRIMARY KEY"
	}
	if c.Check != "" {
		s += " CHECK (" + c.Check + ")"
	}
	return s
}

// SnapshotHeader is the first line of a schema snapshot; the CLI manages
// files by it. A snapshot is not SQL (goose and other migration tools must
// not pick it up), so it takes the header form of non-SQL files.
const SnapshotHeader = "// Code generated by idemgen. DO NOT EDIT."

const snapshotNote = "// The schema the migrations beside this file produce; idemgen plans the next migration from it."

// Snapshot is what a dialect's snapshot file records: the schema after the
// last emitted migration, and that migration's name.
type Snapshot struct {
	Last   string `json:"last_migration"`
	Schema Schema `json:"schema"`
}

// MarshalSnapshot renders a snapshot file: the header, a note, then JSON
// with one line per table and per column, so that a spec change shows as a
// small diff in review.
func MarshalSnapshot(s Snapshot) []byte {
	compact := func(v any) string {
		data, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("sqlgen: marshal snapshot: %v", err)) // plain data: cannot fail
		}
		return string(data)
	}
	var b strings.Builder
	b.WriteString(SnapshotHeader + "\n" + snapshotNote + "\n")
	fmt.Fprintf(&b, "{\n  \"last_migration\": %s,\n  \"schema\": {\n    \"dialect\": %s,\n    \"version_table\": %s,\n    \"tables\": [",
		compact(s.Last), compact(s.Schema.Dialect), compact(s.Schema.VersionTable))
	for i, t := range s.Schema.Tables {
		if i > 0 {
			b.WriteString(",")
		}
		var cols []string
		for _, c := range t.Columns {
			cols = append(cols, "\n        "+compact(c))
		}
		t.Columns = nil
		head := compact(t)
		b.WriteString("\n      " + strings.Replace(head, `"columns":null`, `"columns":[`+strings.Join(cols, ",")+"\n      ]", 1))
	}
	b.WriteString("\n    ]\n  }\n}\n")
	return []byte(b.String())
}

// ParseSnapshot reads a snapshot file written by MarshalSnapshot.
func ParseSnapshot(data []byte) (Snapshot, error) {
	var s Snapshot
	rest, ok := bytes.CutPrefix(data, []byte(SnapshotHeader+"\n"))
	if !ok {
		return s, errors.New("its first line is not the idemgen header")
	}
	for bytes.HasPrefix(rest, []byte("//")) {
		_, rest, _ = bytes.Cut(rest, []byte("\n"))
	}
	dec := json.NewDecoder(bytes.NewReader(rest))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, err
	}
	if s.Last == "" || len(s.Schema.Tables) == 0 {
		return s, errors.New("it records no migration or no tables")
	}
	return s, nil
}
