package crashsim

import (
	"context"
	"encoding/json"
	"reflect"
	"time"

	"github.com/idemgen/idemgen/idem"
)

// The older-alone family: a watermark job whose destination keeps the
// newer version (newer_wins) is served an older copy of a key after the
// key's newer version, where that copy is written alone: in phase 0 just
// after the newer version, in the same page (a key's later copy goes in
// a round of its own: a lone unit's statement), in phase 1 a phase after
// the newer version was written (with batch1, a batch of its own; else
// in a batch with others). The
// newer version must stay, the older copy must be counted unchanged and
// decide no effect (a `when: changed` effect fires on what the write did).

const (
	famOlderAlone = "older-alone"
	simBatchOfOne = "batch1" // older-alone's variant: batches of one unit
)

type olderAloneFamily[U any] struct {
	baseFamily[U]
	older map[int]U // by phase: the older copy served then
}

func (*olderAloneFamily[U]) about() familyAbout {
	return familyAbout{name: famOlderAlone, guarantees: []int{1, 3, 4},
		what: "a watermark job with `newer_wins`: an older copy of a key (its `newer_wins` value lower, " +
			"its other data changed) is served after the key's newer version, alone where it is written: " +
			"in phase 0 just after it in the same page (the key's later round, one unit: a lone unit's " +
			"statement), in phase 1 a phase after it was written; once in batches, once in batches of " +
			"one, then crashed at hits spread over it; the newer version must stay and the older copy " +
			"be counted unchanged, deciding no effect (rows, report counts, effects checked)"}
}

// plan: a watermark job that upserts with newer_wins, whose key holds
// no newer_wins field (its older copy is the same key).
func (*olderAloneFamily[U]) plan(d *discovery[U]) []simScenario {
	j := d.job
	if j.Source != SourceWatermarkName || !j.HasDest || j.InsertOnce || j.NewerWins == "" || j.Stage {
		return nil
	}
	if _, ok := olderCopy(j, j.Unit(3, 1)); !ok {
		return nil
	}
	one := newScenario(famOlderAlone)
	one.variant = simBatchOfOne
	plan := []simScenario{newScenario(famOlderAlone), one}
	for i := 1; i <= 2; i++ {
		sc := newScenario(famOlderAlone)
		sc.at = i * d.secondPhase / 3
		sc.crashAt = []int{sc.at}
		plan = append(plan, sc)
	}
	return plan
}

func (f *olderAloneFamily[U]) setup(*simRun[U]) { f.older = map[int]U{} }

// options: batch1 writes each unit in a batch of its own.
func (*olderAloneFamily[U]) options(r *simRun[U]) []idem.Option {
	if r.sc.variant == simBatchOfOne {
		return []idem.Option{idem.WithBatchSize(1)}
	}
	return nil
}

// beforePhase registers the phase's older copy with the window: in
// phase 0 one of unit 1 just after it (the window's first, so both are in
// its first page), in phase 1 one of unit 3 (written in phase 0) after
// unit 7.
func (f *olderAloneFamily[U]) beforePhase(r *simRun[U], phase int) {
	j := r.job
	anchor, of := map[int]int{0: 1, 1: 7}[phase], map[int]int{0: 1, 1: 3}[phase]
	older, ok := olderCopy(j, j.Unit(of, 1))
	if !ok {
		return
	}
	f.older[phase] = older
	r.window.mu.Lock()
	r.window.echo[j.keyOf(j.Unit(anchor, 1))] = &simEcho[U]{unit: older, after: true}
	r.window.mu.Unlock()
}

// playPhase: the older copy is delivered after the phase's units.
func (f *olderAloneFamily[U]) playPhase(r *simRun[U], phase int) {
	if older, ok := f.older[phase]; ok {
		r.mu.Lock()
		r.history = append(r.history, simDelivery[U]{unit: older, versions: r.versions})
		r.mu.Unlock()
	}
	r.runPhase(phase, phasePlay{})
}

// exactCalls: the older copy decides nothing.
func (*olderAloneFamily[U]) exactCalls(sc simScenario) bool { return sc.at < 0 }

// checkEnd: without a fault, every run's report counts.
func (*olderAloneFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	if r.sc.at < 0 {
		r.checkUnfaulted(ctx)
	}
}

// olderCopy is an older copy of newer: the fixture's revision 0 of its
// unit (every other field changed) with the newer_wins value just below
// newer's, and a mark no later than newer's; false when the job's key
// would change with it, or no lower value exists.
func olderCopy[U any](j *Job[U], newer U) (U, bool) {
	var id int
	for id = 1; id <= 9 && j.keyOf(j.Unit(id, 1)) != j.keyOf(newer); id++ {
	}
	older := j.Unit(id, 0)
	fields, store := settableUnit(&older)
	lower := setJustBelow(oracleField(fields.Addr().Interface(), j.NewerWins), oracleField(&newer, j.NewerWins))
	store()
	if !lower {
		return older, false
	}
	if j.MarkOf != nil && j.SetMark != nil && j.MarkOf(older).After(j.MarkOf(newer)) {
		j.SetMark(&older, j.MarkOf(newer))
	}
	if j.keyOf(older) != j.keyOf(newer) || oracleCompare(older, newer, j.NewerWins) >= 0 || oracleJSON(older) == oracleJSON(newer) {
		return older, false
	}
	return older, true
}

// setJustBelow sets v, a newer_wins field, just below nv, the same field
// of the newer copy; false when no lower value exists.
func setJustBelow(v, nv reflect.Value) bool {
	if v.Kind() == reflect.Pointer {
		if nv.IsNil() {
			return false
		}
		v.Set(reflect.New(v.Type().Elem()))
		v, nv = v.Elem(), nv.Elem()
	}
	switch x := nv.Interface().(type) {
	case time.Time:
		v.Set(reflect.ValueOf(x.Add(-time.Second)))
		return true
	case json.RawMessage, []byte:
		return false
	}
	switch nv.Kind() {
	case reflect.Int32, reflect.Int64:
		v.SetInt(nv.Int() - 1)
	case reflect.Float64:
		v.SetFloat(nv.Float() - 0.5)
	case reflect.String:
		if nv.Len() == 0 {
			return false
		}
		v.SetString(nv.String()[:nv.Len()-1])
	default:
		return false
	}
	return true
}
