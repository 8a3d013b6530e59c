package crashsim

// The harness plays every job with its unit type erased: Run turns a
// Job[U] into a Job[any] at the door, and the harness's generic code runs
// on any. Go compiles a generic function once per type it is used with,
// in the package that uses it, so without this each job of each generated
// package compiled the whole harness again in its tests (about 4.5 s per
// job on two cores, in every build of a generated package's tests). Now
// the harness compiles once, with this package (where a build cache keeps
// it), and a generated package compiles only the adapters below.
//
// What crosses the door, each way:
//   - units: the fixture's and the destination's, boxed as any; the
//     generated code gets its own type back (retyped);
//   - sources: the harness serves from windowSource[any] and
//     cursorSource[any]; the generated job fetches through WindowSource[U]
//     and CursorSource[U], typed views of them;
//   - the engine's job: the harness edits a view of its declarations
//     (idemrt.Job[any]), which editErased writes back into idemrt.Job[U].

import (
	"context"
	"reflect"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idembroker"
	"github.com/idemgen/idemgen/idem/idemrt"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// WindowSource is the source a generated watermark job fetches from in
// the crash simulation: a typed view of the harness's own.
type WindowSource[U any] struct{ of *windowSource[any] }

func (s *WindowSource[U]) Fetch(ctx context.Context, w idem.Window, page string) ([]U, string, error) {
	units, next, err := s.of.Fetch(ctx, w, page)
	return retyped[U](units), next, err
}

// CursorSource is the source a generated cursor job fetches from in the
// crash simulation: a typed view of the harness's own.
type CursorSource[U any] struct{ of *cursorSource[any] }

func (s *CursorSource[U]) Fetch(ctx context.Context, cursor string) ([]U, string, error) {
	units, next, err := s.of.Fetch(ctx, cursor)
	return retyped[U](units), next, err
}

// eraseJob is job as the harness plays it: the same declarations, its
// functions over units taking and giving any.
func eraseJob[U any](job *Job[U]) *Job[any] {
	e := &Job[any]{}
	copyDeclared(e, job) // a field added to Job comes along
	if job.Unit != nil {
		e.Unit = func(id, rev int) any { return job.Unit(id, rev) }
	}
	if job.MarkOf != nil {
		e.MarkOf = func(u any) time.Time { return job.MarkOf(u.(U)) }
	}
	if job.SetMark != nil {
		e.SetMark = func(u *any, at time.Time) {
			typed := (*u).(U)
			job.SetMark(&typed, at)
			*u = typed
		}
	}
	if job.Rows != nil {
		e.Rows = func(ctx context.Context, st idem.Store) ([]any, error) {
			rows, err := job.Rows(ctx, st)
			return retyped[any](rows), err
		}
	}
	if job.NewJob != nil {
		e.NewJob = func(st idem.Store, src any, fx *Provider, opts ...idem.Option) (Verbs[any], error) {
			switch s := src.(type) {
			case *windowSource[any]:
				src = &WindowSource[U]{of: s}
			case *cursorSource[any]:
				src = &CursorSource[U]{of: s}
			}
			verbs, err := job.NewJob(st, src, fx, opts...)
			return eraseVerbs(verbs), err
		}
	}
	e.retype = func(edit func(*idemrt.Job[any])) idem.Option {
		return idemtest.WithJobEdit(func(d *idemrt.Job[U]) { editErased(d, edit) })
	}
	return e
}

// eraseVerbs is verbs with Process taking units as any.
func eraseVerbs[U any](verbs Verbs[U]) Verbs[any] {
	e := Verbs[any]{Run: verbs.Run, Drain: verbs.Drain, Backfill: verbs.Backfill, Purge: verbs.Purge, Stale: verbs.Stale}
	if verbs.ConsumeFrom != nil {
		e.ConsumeFrom = func(ctx context.Context, src idembroker.Source, opts ...idembroker.Option) error {
			return verbs.ConsumeFrom(ctx, src, opts...)
		}
	}
	if verbs.Process != nil {
		e.Process = func(ctx context.Context, units ...any) (idem.Report, error) {
			return verbs.Process(ctx, retyped[U](units)...)
		}
	}
	return e
}

// retyped is units as To: from their type to any, or back.
func retyped[To, From any](units []From) []To {
	if units == nil {
		return nil
	}
	out := make([]To, len(units))
	for i, u := range units {
		out[i] = any(u).(To)
	}
	return out
}

// withEdit is the option that applies edit to the engine's job as built.
// On the erased job Run plays, the edit is of idemrt.Job[any], and retype
// carries it over to the generated idemrt.Job[U].
func (j *Job[U]) withEdit(edit func(*idemrt.Job[U])) idem.Option {
	if j.retype != nil {
		if erased, ok := any(edit).(func(*idemrt.Job[any])); ok {
			return j.retype(erased)
		}
	}
	return idemtest.WithJobEdit(edit)
}

// editErased applies edit, an edit of the harness's view of d, to d: the
// view holds d's declarations (every field but the functions over units),
// and what edit sets there, an effect's key function included, comes back.
func editErased[U any](d *idemrt.Job[U], edit func(*idemrt.Job[any])) {
	view := &idemrt.Job[any]{Effects: make([]idemrt.Effect[any], len(d.Effects))}
	copyDeclared(view, d)
	for i := range d.Effects {
		copyDeclared(&view.Effects[i], &d.Effects[i])
	}
	edit(view)
	copyDeclared(d, view)
	for i := range d.Effects {
		copyDeclared(&d.Effects[i], &view.Effects[i])
		if keyOf := view.Effects[i].KeyOf; keyOf != nil {
			d.Effects[i].KeyOf = func(u U) string { return keyOf(u) }
		}
	}
}

// copyDeclared copies each exported field of *src whose type *dst's field
// of the same place shares: between two instances of one generic struct
// (crashsim's Job, idemrt's Job and Effect), every field but those over
// units.
func copyDeclared(dst, src any) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()
	for i := range d.NumField() {
		if d.Type().Field(i).IsExported() && d.Field(i).Type() == s.Field(i).Type() {
			d.Field(i).Set(s.Field(i))
		}
	}
}
