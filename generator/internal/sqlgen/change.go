package sqlgen

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/model"
)

// ChangeMigration plans the migrations that take the database from schema
// old (what the emitted migrations produce) to schema want (what the spec
// asks for now), numbered from number. It returns the migration files, none
// when nothing changes, and the schema the database has after them: want,
// except that columns keep the order the migrations give them (new ones
// last).
//
// A new index on a table that exists (one a newer idemgen keeps, such as
// the ledger's purge index) is built so that a large table can take it:
// PostgreSQL builds it with CREATE INDEX CONCURRENTLY IF NOT EXISTS, which
// does not stop writes but cannot run in a transaction, so those builds
// come in a migration of their own, after the transactional one, marked
// -- +goose NO TRANSACTION; SQLite runs CREATE INDEX IF NOT EXISTS in the
// transactional migration.
//
// What each change becomes:
//
//   - a new table: CREATE TABLE with its indexes; Down drops it. Besides
//     a new job's destination, this is how a bookkeeping table that a newer
//     idemgen adds (the parked table) reaches databases made before it.
//   - a removed destination table: DROP TABLE, with a comment that its rows
//     are dropped; Down creates it again, empty. Only when allowDrop names
//     the table (the spec's allow_drop); otherwise refused.
//   - a destination table renamed in the spec (same job, new name, the old
//     name gone): ALTER TABLE ... RENAME TO (Postgres also renames the unique
//     constraint, whose index name must stay unique in the schema).
//   - a new column: ALTER TABLE ADD COLUMN. A NOT NULL column without a
//     default is refused: existing rows have no value for it.
//   - a removed column: dropped, with a comment that its data is dropped.
//     Only when allowDrop names it as table.column (the table's new or old
//     name); otherwise refused.
//   - a column that becomes NOT NULL or nullable, a changed default, a
//     changed unique constraint: Postgres alters the column or drops and
//     adds the constraint; SQLite, which cannot alter columns or
//     constraints, rebuilds the table (create the new shape, copy the rows,
//     drop the old table, rename). A rebuild or SET NOT NULL over rows that
//     break the new shape fails, and goose rolls the migration back.
//   - a column type change, a renamed bookkeeping or version table, and a
//     changed primary key or CHECK are refused with an error.
//
// Down restores the old shape exactly; it fails (and rolls back) where
// that needs data an Up dropped, such as a NOT NULL column.
//
// A refused change comes back as a *Refusal (several joined with
// errors.Join), which names the table and column it is about so that the
// caller can point at the spec.
func ChangeMigration(old, want Schema, number int, allowDrop AllowDrop) ([][]byte, Schema, error) {
	c := changer{d: want.Dialect, allowDrop: allowDrop}
	next, err := c.plan(old, want)
	if err != nil {
		return nil, old, err
	}
	c.builds.up = append(c.builds.up, c.lateDrops.up...)
	c.builds.down = append(c.builds.down, c.lateDrops.down...)
	c.builds.notes = append(c.builds.notes, c.lateDrops.notes...)
	if len(c.up) == 0 && len(c.builds.up) == 0 {
		// Nothing to run; the snapshot may still change (a table adopted).
		return nil, next, nil
	}
	var files [][]byte
	if len(c.up) > 0 {
		slices.Reverse(c.down)
		files = append(files, render("migration.sql.tmpl", migration{
			Notes: append([]string{fmt.Sprintf("Migration %d: the schema the spec needs changed since migration %d.", number, number-1)}, c.notes...),
			Up:    c.up,
			Down:  c.down,
		}))
		number++
	}
	if len(c.builds.up) > 0 {
		slices.Reverse(c.builds.down)
		head := []string{
			fmt.Sprintf("Migration %d: builds indexes on tables that exist without stopping writes (CREATE INDEX CONCURRENTLY),", number),
			"which PostgreSQL cannot do inside a transaction, so goose runs it statement by statement. A build that",
			"fails leaves its index INVALID: drop it (DROP INDEX CONCURRENTLY name) before running the migrations again.",
		}
		if len(c.lateDrops.up) > 0 {
			head = append(head, "Indexes this version of idemgen no longer keeps are dropped last, the same way.")
		}
		files = append(files, render("migration.sql.tmpl", migration{
			Notes:         append(head, c.builds.notes...),
			Up:            c.builds.up,
			Down:          c.builds.down,
			NoTransaction: true,
		}))
	}
	return files, next, nil
}

// AllowDrop is the data a migration may drop: "table" for a whole
// destination table, "table.column" for one column (the spec's allow_drop).
type AllowDrop map[string]bool

// Refusal is a change of the spec that idemgen will not migrate. Table and
// Column say what it is about, as the spec names them now (or named them,
// for what is gone); Tables is the key under the spec's tables for a
// bookkeeping table. Any of them may be empty.
type Refusal struct {
	Table, Column, Tables string
	Msg                   string
}

func (r *Refusal) Error() string { return r.Msg }

// changer collects a migration's blocks. down is built in Up order and reversed at the end.
type changer struct {
	d         model.Dialect
	allowDrop AllowDrop
	up, down  []string
	notes     []string
	refused   []error
	// builds are PostgreSQL's index builds on tables that exist: the
	// migration after, run outside a transaction (CREATE INDEX CONCURRENTLY).
	// lateDrops are the bookkeeping indexes that go, dropped at its end.
	builds, lateDrops struct{ up, down, notes []string }
}

func (c *changer) add(up, down string) {
	c.up = append(c.up, up)
	c.down = append(c.down, down)
}

// refuse records a change idemgen will not migrate; about says what it
// concerns (Table, Column, Tables), format and args the message.
func (c *changer) refuse(about Refusal, format string, args ...any) {
	about.Msg = fmt.Sprintf(format, args...)
	c.refused = append(c.refused, &about)
}

func (c *changer) plan(old, want Schema) (Schema, error) {
	if old.Dialect != want.Dialect {
		return old, fmt.Errorf("the snapshot is for dialect %s, not %s", old.Dialect, want.Dialect)
	}
	if old.VersionTable != want.VersionTable {
		c.refuse(Refusal{Tables: "migrations"}, "the migration version table was renamed from %s to %s (tables.migrations); goose would apply every migration again: idemgen does not rename it, restore the old name", old.VersionTable, want.VersionTable)
	}
	for _, role := range BookkeepingRoles {
		o, w := byRole(old, role), byRole(want, role)
		if o != nil && w != nil && o.Name != w.Name {
			c.refuse(Refusal{Tables: role}, "the %s table was renamed from %s to %s (tables.%s); idemgen does not rename bookkeeping tables, which hold the package's state: restore the old name, or rename the table in the database yourself and start a new migration history", role, o.Name, w.Name, role)
		}
	}
	if len(c.refused) > 0 {
		return old, errors.Join(c.refused...)
	}

	// Pair each wanted table with the table it was: same name, or, for a
	// destination whose name changed, the same job's old table.
	oldOf := map[string]*Table{}
	taken := map[string]bool{}
	for i := range want.Tables {
		w := &want.Tables[i]
		if o := old.Table(w.Name); o != nil && (o.Role == w.Role || o.Role == RoleDestination && w.Role == RoleDestination) {
			oldOf[w.Name], taken[o.Name] = o, true
		} else if o != nil {
			c.refuse(Refusal{Table: w.Name}, "table %s changes role from %s to %s; idemgen cannot migrate that: choose another table name", w.Name, o.Role, w.Role)
		}
	}
	for i := range want.Tables {
		w := &want.Tables[i]
		if oldOf[w.Name] != nil || w.Role != RoleDestination {
			continue
		}
		for j := range old.Tables {
			o := &old.Tables[j]
			if o.Role == RoleDestination && o.Job == w.Job && !taken[o.Name] && want.Table(o.Name) == nil {
				oldOf[w.Name], taken[o.Name] = o, true
				break
			}
		}
	}

	next := Schema{Dialect: want.Dialect, VersionTable: want.VersionTable}
	// Dropped tables first, last created first.
	for i := len(old.Tables) - 1; i >= 0; i-- {
		o := old.Tables[i]
		if taken[o.Name] {
			continue
		}
		if o.Role != RoleDestination {
			c.refuse(Refusal{}, "bookkeeping table %s is gone from the wanted schema; this is an idemgen bug, please report it", o.Name)
			continue
		}
		if o.Adopted {
			// Never idemgen's: the service's migrations decide its fate.
			continue
		}
		if !c.allowDrop[o.Name] {
			c.refuse(Refusal{Table: o.Name}, "job %s is gone from the spec, so the next migration would drop its table %s and every row in it; to drop them, add %s to allow_drop (at the top of the spec); to keep them, keep the job (with adopt: true the table stays and idemgen no longer migrates it)", o.Job, o.Name, o.Name)
			continue
		}
		c.add(fmt.Sprintf("-- Drops table %s (job %s is gone from the spec) and every row in it.\nDROP TABLE %s;", o.Name, o.Job, o.Name), createTable(o))
	}
	for _, w := range want.Tables {
		o := oldOf[w.Name]
		switch {
		case w.Adopted:
			// The service's migrations own it (from now on, if idemgen
			// created it): nothing to run; Migrate checks its shape.
			next.Tables = append(next.Tables, w)
			continue
		case o != nil && o.Adopted:
			c.refuse(Refusal{Table: w.Name}, "table %s (job %s) is no longer adopted, but idemgen never created it and cannot take over a table the service's migrations made: keep adopt: true, or give the destination a new table name", w.Name, w.Job)
			continue
		}
		if o == nil {
			if w.Role != RoleDestination {
				c.notes = append(c.notes, fmt.Sprintf("It creates %s, the %s table that this version of idemgen keeps in every package; no spec change asked for it.", w.Name, w.Role))
			}
			c.add(createTable(w), "DROP TABLE "+w.Name+";")
			next.Tables = append(next.Tables, w)
			continue
		}
		next.Tables = append(next.Tables, c.alter(*o, w))
	}
	if len(c.refused) > 0 {
		return old, errors.Join(c.refused...)
	}
	return next, nil
}

func byRole(s Schema, role string) *Table {
	for i := range s.Tables {
		if s.Tables[i].Role == role {
			return &s.Tables[i]
		}
	}
	return nil
}

// alter migrates table o to the shape of w and returns the table it becomes.
func (c *changer) alter(o, w Table) Table {
	what := "table " + w.Name
	if w.Job != "" {
		what = fmt.Sprintf("table %s (job %s)", w.Name, w.Job)
	}
	if !slices.Equal(o.PrimaryKey, w.PrimaryKey) {
		c.refuse(Refusal{Table: w.Name}, "%s: its primary key changes from (%s) to (%s); idemgen cannot migrate that", what, strings.Join(o.PrimaryKey, ", "), strings.Join(w.PrimaryKey, ", "))
	}
	// The result: old columns in their order, wanted definitions, new ones last.
	res := w
	res.Columns = nil
	var added, dropped []Column
	var altered [][2]Column // old, new: nullability or default changed
	for _, oc := range o.Columns {
		wc := w.Column(oc.Name)
		if wc == nil {
			if !c.allowDrop[w.Name+"."+oc.Name] && !c.allowDrop[o.Name+"."+oc.Name] {
				c.refuse(Refusal{Table: w.Name, Column: oc.Name}, "%s: field %s is gone from the spec, so the next migration would drop column %s.%s and the data in it; to drop it, add %s.%s to allow_drop (at the top of the spec); to keep the data, keep the field (nullable, %s: <type>?, if the job no longer sets it)", what, oc.Name, w.Name, oc.Name, w.Name, oc.Name, oc.Name)
			}
			dropped = append(dropped, oc)
			continue
		}
		res.Columns = append(res.Columns, *wc)
		switch {
		case oc.Type != wc.Type:
			c.refuse(Refusal{Table: w.Name, Column: oc.Name}, "%s: column %s changes type from %s to %s; idemgen does not convert column types: add a field with a new name and remove the old one, or restore the type", what, oc.Name, oc.Type, wc.Type)
		case oc.PrimaryKey != wc.PrimaryKey || oc.Check != wc.Check:
			c.refuse(Refusal{Table: w.Name, Column: oc.Name}, "%s: column %s changes its primary key or CHECK; idemgen cannot migrate that", what, oc.Name)
		case oc.NotNull != wc.NotNull || oc.Default != wc.Default:
			altered = append(altered, [2]Column{oc, *wc})
		}
	}
	for _, wc := range w.Columns {
		if o.Column(wc.Name) != nil {
			continue
		}
		if wc.NotNull && wc.Default == "" {
			c.refuse(Refusal{Table: w.Name, Column: wc.Name}, "%s: new column %s is NOT NULL, but the table already exists and its rows have no value for it; make the field nullable (%s: <type>?), backfill it, and only then drop the ?", what, wc.Name, wc.Name)
		}
		if wc.PrimaryKey || wc.Check != "" {
			c.refuse(Refusal{Table: w.Name, Column: wc.Name}, "%s: new column %s has a primary key or CHECK; idemgen cannot add that to an existing table", what, wc.Name)
		}
		added = append(added, wc)
		res.Columns = append(res.Columns, wc)
	}
	uniqueChanged := !sameUnique(o.Unique, w.Unique)
	renamed := o.Name != w.Name
	if !renamed && len(added) == 0 && len(dropped) == 0 && len(altered) == 0 && !uniqueChanged && slices.EqualFunc(o.Indexes, w.Indexes, sameIndex) {
		// Nothing to do: keep the recorded table (its column order included).
		return o
	}
	if len(c.refused) > 0 {
		return res
	}

	if renamed {
		up := fmt.Sprintf("ALTER TABLE %s RENAME TO %s;", o.Name, w.Name)
		down := fmt.Sprintf("ALTER TABLE %s RENAME TO %s;", w.Name, o.Name)
		if c.d == model.Postgres && o.Unique != nil && !uniqueChanged {
			up += fmt.Sprintf("\nALTER TABLE %s RENAME CONSTRAINT %s TO %s;", w.Name, o.Unique.Name, w.Unique.Name)
			down = fmt.Sprintf("ALTER TABLE %s RENAME CONSTRAINT %s TO %s;\n", w.Name, w.Unique.Name, o.Unique.Name) + down
		}
		c.add(fmt.Sprintf("-- Job %s's destination table is renamed from %s to %s; its rows stay.\n", w.Job, o.Name, w.Name)+up, down)
		// SQLite keeps the constraint's old name inside the table; the name
		// is not in any namespace there, so the new one is recorded.
		o.Name = w.Name
		if o.Unique != nil && !uniqueChanged {
			o.Unique = w.Unique
		}
	}
	// Old indexes that go, before columns they use could be dropped; on
	// PostgreSQL, a bookkeeping table's after its new ones are built
	// (dropIndexAfterBuilds).
	for _, ix := range o.Indexes {
		if !slices.ContainsFunc(w.Indexes, func(x Index) bool { return sameIndex(x, ix) }) {
			if c.d == model.Postgres && o.Role != RoleDestination {
				c.dropIndexAfterBuilds(o, ix)
				continue
			}
			if o.Role != RoleDestination {
				c.notes = append(c.notes, fmt.Sprintf("It drops index %s on %s, which this version of idemgen no longer keeps; no spec change asked for it.", ix.Name, ix.on(o.Name)))
			}
			c.add("DROP INDEX "+ix.Name+";", createIndex(o.Name, ix))
		}
	}
	if c.d == model.SQLite && (len(dropped) > 0 || len(altered) > 0 || uniqueChanged) {
		c.rebuild(o, res, what, dropped, altered, uniqueChanged)
	} else {
		c.alterInPlace(o, res, added, dropped, altered, uniqueChanged)
	}
	for _, ix := range w.Indexes {
		if !slices.ContainsFunc(o.Indexes, func(x Index) bool { return sameIndex(x, ix) }) {
			c.addIndex(w, ix)
		}
	}
	return res
}

// addIndex builds index ix on table t, which exists and may be large. On
// PostgreSQL it goes to the builds, without a lock that stops writes:
//
//	CREATE INDEX CONCURRENTLY IF NOT EXISTS billing_idem_ledger_done ON billing_idem_ledger (job, effect, state, done_at);
//	-- Down: DROP INDEX CONCURRENTLY IF EXISTS billing_idem_ledger_done;
//
// On SQLite, which has no such build, into the migration itself:
//
//	CREATE INDEX IF NOT EXISTS billing_idem_ledger_done ON billing_idem_ledger (job, effect, state, done_at);
//	-- Down: DROP INDEX IF EXISTS billing_idem_ledger_done;
func (c *changer) addIndex(t Table, ix Index) {
	var note string
	if t.Role != RoleDestination {
		note = fmt.Sprintf("It adds index %s on %s, an index of the %s table that this version of idemgen keeps in every package; no spec change asked for it.", ix.Name, ix.on(t.Name), t.Role)
	}
	if c.d == model.Postgres {
		c.builds.up = append(c.builds.up, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s;", ix.Name, ix.on(t.Name)))
		c.builds.down = append(c.builds.down, fmt.Sprintf("DROP INDEX CONCURRENTLY IF EXISTS %s;", ix.Name))
		if note != "" {
			c.builds.notes = append(c.builds.notes, note)
		}
		return
	}
	if note != "" {
		c.notes = append(c.notes, note)
	}
	c.add(fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON %s;", ix.Name, ix.on(t.Name)), fmt.Sprintf("DROP INDEX IF EXISTS %s;", ix.Name))
}

// dropIndexAfterBuilds drops index ix of bookkeeping table t, which this
// idemgen no longer keeps, on PostgreSQL once the migration's builds are
// done, without a lock that stops writes: the queries it served use the
// new indexes by then, not a scan of the table.
//
//	DROP INDEX CONCURRENTLY IF EXISTS billing_idem_ledger_pending;
//	-- Down: CREATE INDEX CONCURRENTLY IF NOT EXISTS billing_idem_ledger_pending ON billing_idem_ledger (job, state, effect_key);
func (c *changer) dropIndexAfterBuilds(t Table, ix Index) {
	c.lateDrops.up = append(c.lateDrops.up, fmt.Sprintf("DROP INDEX CONCURRENTLY IF EXISTS %s;", ix.Name))
	c.lateDrops.down = append(c.lateDrops.down, fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s;", ix.Name, ix.on(t.Name)))
	c.lateDrops.notes = append(c.lateDrops.notes, fmt.Sprintf("It drops index %s on %s once the indexes above are built, as this version of idemgen no longer keeps it; no spec change asked for it.", ix.Name, ix.on(t.Name)))
}

// alterInPlace changes a table with ALTER TABLE: every change on Postgres,
// added columns only on SQLite.
func (c *changer) alterInPlace(o, w Table, added, dropped []Column, altered [][2]Column, uniqueChanged bool) {
	t := w.Name
	if uniqueChanged && o.Unique != nil {
		// Before any column it uses is dropped (which would drop it too).
		c.add(fmt.Sprintf("-- The unique constraint changes from (%s) to (%s).\nALTER TABLE %s DROP CONSTRAINT %s;", strings.Join(o.Unique.Columns, ", "), strings.Join(uniqueCols(w.Unique), ", "), t, o.Unique.Name),
			fmt.Sprintf("ALTER TABLE %s ADD CONSTRAINT %s UNIQUE (%s);", t, o.Unique.Name, strings.Join(o.Unique.Columns, ", ")))
	}
	for _, col := range added {
		if w.Role != RoleDestination {
			c.notes = append(c.notes, fmt.Sprintf("It adds %s.%s, a column of the %s table that this version of idemgen keeps in every package; no spec change asked for it.", t, col.Name, w.Role))
		}
		c.add(fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s;", t, columnDef(col, 0)), fmt.Sprintf("ALTER TABLE %s DROP COLUMN %s;", t, col.Name))
	}
	for _, a := range altered {
		oc, wc := a[0], a[1]
		var up, down []string
		if oc.NotNull != wc.NotNull {
			set, unset := "SET NOT NULL", "DROP NOT NULL"
			if !wc.NotNull {
				set, unset = unset, set
			}
			up = append(up, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s;", t, wc.Name, set))
			down = append(down, fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s %s;", t, wc.Name, unset))
		}
		if oc.Default != wc.Default {
			up = append(up, setDefault(t, wc))
			down = append(down, setDefault(t, oc))
		}
		if wc.NotNull && !oc.NotNull {
			up[0] = fmt.Sprintf("-- Fails, and rolls back, if %s.%s holds NULLs: backfill it first.\n", t, wc.Name) + up[0]
		}
		c.add(strings.Join(up, "\n"), strings.Join(down, "\n"))
	}
	for _, col := range dropped {
		down := fmt.Sprintf("ALTER TABLE %s ADD COLUMN %s;", t, columnDef(col, 0))
		if col.NotNull && col.Default == "" {
			down = fmt.Sprintf("-- Fails if %s has rows: the dropped data of NOT NULL column %s is gone.\n", t, col.Name) + down
		}
		c.add(fmt.Sprintf("-- Drops column %s.%s and the data in it.\nALTER TABLE %s DROP COLUMN %s;", t, col.Name, t, col.Name), down)
	}
	if uniqueChanged && w.Unique != nil {
		c.add(fmt.Sprintf("-- Fails, and rolls back, if rows repeat (%s).\nALTER TABLE %s ADD CONSTRAINT %s UNIQUE (%s);", strings.Join(w.Unique.Columns, ", "), t, w.Unique.Name, strings.Join(w.Unique.Columns, ", ")),
			fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT %s;", t, w.Unique.Name))
	}
}

func setDefault(table string, col Column) string {
	if col.Default == "" {
		return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s DROP DEFAULT;", table, col.Name)
	}
	return fmt.Sprintf("ALTER TABLE %s ALTER COLUMN %s SET DEFAULT %s;", table, col.Name, col.Default)
}

// rebuild changes a SQLite table the way SQLite documents for changes
// ALTER TABLE cannot make: create the new shape, copy the rows, drop the
// old table, rename the new one, and create its indexes again.
func (c *changer) rebuild(o, w Table, what string, dropped []Column, altered [][2]Column, uniqueChanged bool) {
	var why []string
	for _, col := range dropped {
		why = append(why, fmt.Sprintf("-- Drops column %s.%s and the data in it.", w.Name, col.Name))
	}
	for _, a := range altered {
		switch {
		case a[1].NotNull && !a[0].NotNull:
			why = append(why, fmt.Sprintf("-- Column %s becomes NOT NULL: fails, and rolls back, if it holds NULLs; backfill it first.", a[1].Name))
		case a[0].NotNull && !a[1].NotNull:
			why = append(why, fmt.Sprintf("-- Column %s becomes nullable.", a[1].Name))
		default:
			why = append(why, fmt.Sprintf("-- Column %s changes its default.", a[1].Name))
		}
	}
	if uniqueChanged {
		why = append(why, fmt.Sprintf("-- The unique constraint changes from (%s) to (%s): fails, and rolls back, if rows repeat.", strings.Join(uniqueCols(o.Unique), ", "), strings.Join(uniqueCols(w.Unique), ", ")))
	}
	head := fmt.Sprintf("-- SQLite cannot make these changes to %s in place, so the table is rebuilt.\n", what) + strings.Join(why, "\n")
	var downHead string
	for _, col := range dropped {
		if col.NotNull && col.Default == "" {
			downHead += fmt.Sprintf("-- Fails if %s has rows: the dropped data of NOT NULL column %s is gone.\n", w.Name, col.Name)
		}
	}
	kept := func(ix Index, other []Index) bool {
		return slices.ContainsFunc(other, func(x Index) bool { return sameIndex(x, ix) })
	}
	c.add(head+"\n"+copyTable(o, w, func(ix Index) bool { return kept(ix, o.Indexes) }),
		downHead+copyTable(w, o, func(ix Index) bool { return kept(ix, w.Indexes) }))
}

// copyTable rebuilds table from into shape to under the same name; the
// indexes of to that keep says exist on both shapes are created again.
func copyTable(from, to Table, keep func(Index) bool) string {
	tmp := "idemgen_rebuild_" + to.Name
	var common []string
	for _, col := range to.Columns {
		if from.Column(col.Name) != nil {
			common = append(common, col.Name)
		}
	}
	cols := strings.Join(common, ", ")
	stmts := []string{
		createTableAs(to, tmp),
		fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s;", tmp, cols, cols, to.Name),
		fmt.Sprintf("DROP TABLE %s;", to.Name),
		fmt.Sprintf("ALTER TABLE %s RENAME TO %s;", tmp, to.Name),
	}
	for _, ix := range to.Indexes {
		if keep(ix) {
			stmts = append(stmts, createIndex(to.Name, ix))
		}
	}
	return strings.Join(stmts, "\n")
}

func uniqueCols(u *Unique) []string {
	if u == nil {
		return nil
	}
	return u.Columns
}

func sameUnique(a, b *Unique) bool {
	return slices.Equal(uniqueCols(a), uniqueCols(b))
}

func sameIndex(a, b Index) bool {
	return a.Name == b.Name && slices.Equal(a.Columns, b.Columns) && a.Where == b.Where
}
