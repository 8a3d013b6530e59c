package generator

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/idemgen/idemgen/generator/internal/model"
	"github.com/idemgen/idemgen/generator/internal/spec"
	"github.com/idemgen/idemgen/generator/internal/sqlgen"
)

// Each dialect's migration directory holds, besides the goose migrations:
//
//   - SnapshotName: the schema the migrations produce, as data
//     (sqlgen.Snapshot), from which the next migration is planned;
//   - SumName: one "NAME h1:BASE64(SHA-256)" line per emitted migration, in
//     order, then one for the snapshot, so an emitted migration that was
//     edited by hand is caught rather than silently kept or rewritten.
//
// Neither ends in .sql, so goose, sqlc and other migration tools skip them.
// Both start with the Go-style idemgen header, like every non-SQL file idemgen emits.
const (
	SnapshotName = "idemgen.schema"
	SumName      = "idemgen.sum"
)

const sumNote = "// Hashes of the emitted migrations and the snapshot; idemgen refuses to go on if one no longer matches."

// migrationDir is what a dialect's migration directory holds now.
type migrationDir struct {
	dir string
	// sql are the *.sql files by base name.
	sql map[string][]byte
	// sum and snapshot are nil when absent.
	sum, snapshot []byte
}

func readMigrations(existing fs.FS, dir string) (*migrationDir, error) {
	st := &migrationDir{dir: dir, sql: map[string][]byte{}}
	if existing == nil {
		return st, nil
	}
	entries, err := fs.ReadDir(existing, dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("read %s: %w", dir, err)
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || path.Ext(name) != ".sql" && name != SumName && name != SnapshotName {
			continue
		}
		data, err := fs.ReadFile(existing, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		switch name {
		case SumName:
			st.sum = data
		case SnapshotName:
			st.snapshot = data
		default:
			st.sql[name] = data
		}
	}
	return st, nil
}

// sumEntry is one line of a sum file.
type sumEntry struct{ name, hash string }

func hashOf(data []byte) string {
	h := sha256.Sum256(data)
	return "h1:" + base64.StdEncoding.EncodeToString(h[:])
}

func renderSum(entries []sumEntry) []byte {
	var b bytes.Buffer
	b.WriteString(Header + "\n" + sumNote + "\n")
	for _, e := range entries {
		b.WriteString(e.name + " " + e.hash + "\n")
	}
	return b.Bytes()
}

func parseSum(data []byte) ([]sumEntry, error) {
	rest, ok := bytes.CutPrefix(data, []byte(Header+"\n"))
	if !ok {
		return nil, errors.New("its first line is not the idemgen header")
	}
	var out []sumEntry
	sc := bufio.NewScanner(bytes.NewReader(rest))
	for n := 2; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "//") {
			continue
		}
		name, hash, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(hash, "h1:") || strings.ContainsAny(name, "/ ") {
			return nil, fmt.Errorf("line %d is not NAME h1:HASH", n)
		}
		out = append(out, sumEntry{name, hash})
	}
	return out, sc.Err()
}

// number is a migration's goose version, from its name's numeric prefix.
func number(name string) (int, bool) {
	digits, _, ok := strings.Cut(name, "_")
	n, err := strconv.Atoi(digits)
	return n, ok && err == nil && n > 0
}

func migrationName(n int) string { return fmt.Sprintf("%05d_idemgen.sql", n) }

// next checks the directory against its sum and returns its files after this
// generate: the emitted migrations unchanged, a new one if the spec's schema
// moved away from the snapshot, the snapshot and the sum.
func (st *migrationDir) next(f *spec.File, p *model.Package, d model.Dialect) (Files, error) {
	want := sqlgen.SchemaOf(p, d)
	rel := func(name string) string { return path.Join(st.dir, name) }

	// A hand-written migration is never fed to sqlc, run or rewritten.
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(st.sql)) {
		if !bytes.HasPrefix(st.sql[name], []byte(SQLHeader+"\n")) {
			errs = append(errs, fmt.Errorf("%s has no idemgen header; idemgen owns %s and will not feed a hand-written migration to sqlc or apply it: move it out of the directory (and apply it with your own tooling), or remove it", rel(name), st.dir))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	var emitted []sumEntry
	var snap sqlgen.Snapshot
	switch {
	case st.sum == nil && st.snapshot == nil && len(st.sql) == 0:
		// A new package: its first migration creates everything.
		first := migrationName(1)
		data := sqlgen.InitialMigration(p, d)
		return st.files(map[string][]byte{first: data}, []sumEntry{{first, hashOf(data)}}, sqlgen.Snapshot{Last: first, Schema: want}), nil
	case st.sum == nil && st.snapshot == nil:
		// Emitted before idemgen kept snapshots: adopt the migrations if they
		// are exactly the first migration the spec asks for.
		first := migrationName(1)
		if len(st.sql) != 1 || !bytes.Equal(st.sql[first], sqlgen.InitialMigration(p, d)) {
			return nil, fmt.Errorf("%s holds migrations but no %s or %s (they came from an idemgen that kept no schema snapshot), and they are not the first migration this spec creates, so idemgen cannot tell which schema they produce: generate once with the spec they were made from, then change the spec", st.dir, SnapshotName, SumName)
		}
		return st.files(st.sql, []sumEntry{{first, hashOf(st.sql[first])}}, sqlgen.Snapshot{Last: first, Schema: want}), nil
	case st.sum == nil:
		return nil, fmt.Errorf("%s is missing but %s is there; restore it (from version control): without it idemgen cannot prove the emitted migrations are unchanged", rel(SumName), rel(SnapshotName))
	case st.snapshot == nil:
		return nil, fmt.Errorf("%s is missing but %s is there; restore it (from version control): idemgen plans the next migration from it", rel(SnapshotName), rel(SumName))
	}

	entries, err := parseSum(st.sum)
	if err != nil {
		return nil, fmt.Errorf("%s: %v; restore it (from version control)", rel(SumName), err)
	}
	listed := map[string]bool{}
	snapListed := false
	for _, e := range entries {
		if e.name == SnapshotName {
			snapListed = true
			if hashOf(st.snapshot) != e.hash {
				errs = append(errs, fmt.Errorf("%s was edited by hand (sum mismatch); idemgen plans migrations from it: restore it and put changes in the spec", rel(SnapshotName)))
			}
			continue
		}
		n, ok := number(e.name)
		if !ok || path.Ext(e.name) != ".sql" || len(emitted) > 0 && n <= must(number(emitted[len(emitted)-1].name)) {
			return nil, fmt.Errorf("%s: %q is not a migration in order; restore the file (from version control)", rel(SumName), e.name)
		}
		listed[e.name] = true
		emitted = append(emitted, e)
		data, ok := st.sql[e.name]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s is missing, but %s lists it; emitted migrations are append-only: restore it", rel(e.name), rel(SumName)))
		case hashOf(data) != e.hash:
			errs = append(errs, fmt.Errorf("%s was edited by hand (sum mismatch); emitted migrations are append-only: restore it and put changes in the spec", rel(e.name)))
		}
	}
	if !snapListed || len(emitted) == 0 {
		errs = append(errs, fmt.Errorf("%s lists no migrations or not the snapshot; restore it (from version control)", rel(SumName)))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	last := emitted[len(emitted)-1].name
	lastN := must(number(last))
	for _, name := range slices.Sorted(maps.Keys(st.sql)) {
		// An unlisted migration numbered after the last listed one is left by a
		// generate that stopped before writing the sum; it is planned again
		// (and rewritten or deleted). Any other is not idemgen's doing.
		if n, ok := number(name); !listed[name] && (!ok || n <= lastN) {
			errs = append(errs, fmt.Errorf("%s is not listed in %s; emitted migrations are append-only: remove it and put changes in the spec", rel(name), rel(SumName)))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if snap, err = sqlgen.ParseSnapshot(st.snapshot); err != nil {
		return nil, fmt.Errorf("%s: %v; restore it (from version control)", rel(SnapshotName), err)
	}
	if snap.Last != last {
		return nil, fmt.Errorf("%s describes the schema after %s, but the last migration %s lists is %s; restore both (from version control)", rel(SnapshotName), snap.Last, rel(SumName), last)
	}

	kept := map[string][]byte{}
	for _, e := range emitted {
		kept[e.name] = st.sql[e.name]
	}
	migs, after, err := sqlgen.ChangeMigration(snap.Schema, want, lastN+1, allowDrop(f))
	if ds := refusals(f, err); ds != nil {
		return nil, ds
	} else if err != nil {
		return nil, fmt.Errorf("%s: the spec changed in a way idemgen will not migrate:\n%w", st.dir, err)
	}
	for i, data := range migs {
		name := migrationName(lastN + 1 + i)
		kept[name] = data
		emitted = append(emitted, sumEntry{name, hashOf(data)})
		snap.Last = name
	}
	snap.Schema = after
	return st.files(kept, emitted, snap), nil
}

// files lays out the migrations, the snapshot and the sum (which lists the snapshot last).
func (st *migrationDir) files(migs map[string][]byte, emitted []sumEntry, snap sqlgen.Snapshot) Files {
	out := Files{}
	for name, data := range migs {
		out[path.Join(st.dir, name)] = data
	}
	snapData := sqlgen.MarshalSnapshot(snap)
	out[path.Join(st.dir, SnapshotName)] = snapData
	out[path.Join(st.dir, SumName)] = renderSum(append(slices.Clip(emitted), sumEntry{SnapshotName, hashOf(snapData)}))
	return out
}

func must(n int, _ bool) int { return n }

// allowDrop is the data the spec lets a migration drop (allow_drop).
func allowDrop(f *spec.File) sqlgen.AllowDrop {
	allow := sqlgen.AllowDrop{}
	for _, a := range f.AllowDrop {
		allow[a.Value] = true
	}
	return allow
}

// refusals turns the changes ChangeMigration refused into diagnostics at
// the place in the spec each is about: the field, the destination's table,
// the tables key, or the jobs list for a job that is gone. It returns nil
// when err holds no refusal.
func refusals(f *spec.File, err error) spec.Diagnostics {
	var errs []error
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	} else if err != nil {
		errs = []error{err}
	}
	var ds spec.Diagnostics
	for _, e := range errs {
		r, ok := e.(*sqlgen.Refusal)
		if !ok {
			return nil
		}
		ds = append(ds, spec.Diagnostic{File: f.Name, Pos: refusalPos(f, r), Severity: spec.Error, Msg: r.Msg})
	}
	return ds
}

func refusalPos(f *spec.File, r *sqlgen.Refusal) spec.Pos {
	if r.Tables != "" {
		if s := spec.TableKey(f, r.Tables); s.Set {
			return s.Pos
		}
		return cmp.Or(f.TablesPos, spec.Pos{Line: 1, Col: 1})
	}
	for _, j := range f.Jobs {
		d := j.Destination
		if d == nil || r.Table == "" || d.Table.Value != r.Table {
			continue
		}
		for _, fld := range j.Unit.Fields {
			if r.Column != "" && fld.Name.Value == r.Column {
				return fld.Pos
			}
		}
		return d.Table.Pos
	}
	return cmp.Or(f.JobsPos, spec.Pos{Line: 1, Col: 1})
}
