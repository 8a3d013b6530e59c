package generator

import (
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
)

// AdoptedWarnings compares the adopted destinations (adopt: true) of a
// checked spec with the shape the last generate recorded for them in
// existing, the output directory (nil: none), and warns, at the job's
// adopt, of every field that is gone from the spec while its column was
// NOT NULL without a default. idemgen changes no adopted table, so the
// column stays; the job's inserts leave it out from now on, and if the
// table still has it NOT NULL without a default they fail, and the
// generated Migrate refuses the table (idemrt.CheckTables) at deploy.
// Each warning gives what the service's own migrations must run, per
// dialect of the spec: on PostgreSQL the statement, which runs as it is on
// a table with rows; on SQLite, which cannot drop NOT NULL in place, the
// choices.
//
// The recorded shape is the snapshot beside each dialect's migrations
// (SnapshotName), which lists adopted tables too: the columns idemgen
// declared for them when it last generated. Once a generate has written
// the new snapshot the warning is not given again.
func AdoptedWarnings(existing fs.FS, f *Spec) Diagnostics {
	if existing == nil {
		return nil
	}
	p, err := model.Resolve(f)
	if err != nil {
		return nil
	}
	// gone lists, per job and column, the dialects in which the column left.
	type leaving struct {
		job      int
		table    string
		column   string
		dialects []model.Dialect
	}
	var gone []*leaving
	find := func(job int, column string) *leaving {
		for _, l := range gone {
			if l.job == job && l.column == column {
				return l
			}
		}
		l := &leaving{job: job, table: p.Jobs[job].Dest.Table, column: column}
		gone = append(gone, l)
		return l
	}
	for _, d := range p.Dialects {
		data, err := fs.ReadFile(existing, path.Join(sqlgen.LayoutOf(d).Migrations, SnapshotName))
		if err != nil {
			continue
		}
		snap, err := sqlgen.ParseSnapshot(data)
		if err != nil {
			continue // generate says what is wrong with it
		}
		want := sqlgen.SchemaOf(p, d)
		for i, j := range p.Jobs {
			if j.Dest == nil || !j.Dest.Adopted {
				continue
			}
			// Adopted now, whether or not idemgen created it before.
			o := snap.Schema.Table(j.Dest.Table)
			if o == nil || o.Role != sqlgen.RoleDestination {
				continue
			}
			w := want.Table(j.Dest.Table)
			for _, oc := range o.Columns {
				if w.Column(oc.Name) != nil || !oc.NotNull || oc.Default != "" {
					continue
				}
				l := find(i, oc.Name)
				l.dialects = append(l.dialects, d)
			}
		}
	}
	var ds Diagnostics
	for _, l := range gone {
		sd := f.Jobs[l.job].Destination
		pos := sd.Adopt.Pos
		if !sd.Adopt.Set {
			pos = sd.Table.Pos
		}
		ds = append(ds, spec.Diagnostic{File: f.Name, Pos: pos, Severity: spec.Warning, Msg: adoptedFieldGone(p.Jobs[l.job].Name, l.table, l.column, l.dialects)})
	}
	return ds
}

// adoptedFieldGone says what the table of an adopted destination needs
// once a field left the spec: its column stays, NOT NULL without a default
// as idemgen declared it, and the job's inserts no longer write it.
func adoptedFieldGone(job, table, column string, dialects []model.Dialect) string {
	var b strings.Builder
	fmt.Fprintf(&b, "job %q: field %s is gone from the spec, but adopted table %s keeps its column, which idemgen declared NOT NULL without a default: "+
		"while the table has it so, the job's inserts, which no longer write it, fail, and Migrate refuses the table; "+
		"change it in the service's own migrations", job, column, table)
	for _, d := range dialects {
		switch d {
		case model.Postgres:
			fmt.Fprintf(&b, "\non PostgreSQL this runs as it is, on a table with rows too:\nALTER TABLE %s ALTER COLUMN %s DROP NOT NULL;", table, column)
		case model.SQLite:
			fmt.Fprintf(&b, "\non SQLite, which cannot drop NOT NULL or add a default to a column in place: rebuild %s with %s nullable or with a default "+
				"(create the new table, copy the rows, drop the old one, rename the new one), or keep the field in the spec so that the job goes on writing it", table, column)
		}
	}
	return b.String()
}
