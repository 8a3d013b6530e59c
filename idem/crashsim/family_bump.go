package crashsim

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"
)

type bumpFamily[U any] struct{ baseFamily[U] }

func (*bumpFamily[U]) about() familyAbout {
	return familyAbout{name: "bump", guarantees: []int{6},
		what: "an effect's or the job's version bumped mid-history"}
}

// plan: each effect's version bumped, and (a watermark job with a
// destination) the job's.
func (*bumpFamily[U]) plan(d *discovery[U]) []simScenario {
	var plan []simScenario
	for i := range d.job.Effects {
		sc := newScenario("bump")
		sc.bump = i + 1
		plan = append(plan, sc)
	}
	if d.job.HasDest && d.job.Source == SourceWatermarkName {
		sc := newScenario("bump")
		sc.bump = -1
		plan = append(plan, sc)
	}
	return plan
}

func (*bumpFamily[U]) sample(all []simScenario) []simScenario { return all }

func (*bumpFamily[U]) exactCalls(simScenario) bool { return true }

// beforePhase bumps the versions before phase 1.
func (*bumpFamily[U]) beforePhase(r *simRun[U], phase int) {
	if phase == 1 {
		r.versions = r.versions.bumped(r.sc.bump)
	}
}

// afterConvergence: a bump reaches old units when they are processed
// again: a backfill of every unit, in mark order.
func (*bumpFamily[U]) afterConvergence(r *simRun[U]) {
	if r.job.Source != SourceWatermarkName {
		return
	}
	r.setClock(r.now().Add(time.Minute))
	r.window.mu.Lock()
	all := slices.Collect(maps.Values(r.window.units))
	r.window.mu.Unlock()
	slices.SortFunc(all, func(a, b U) int {
		if c := r.job.MarkOf(a).Compare(r.job.MarkOf(b)); c != 0 {
			return c
		}
		return strings.Compare(r.job.keyOf(a), r.job.keyOf(b))
	})
	for _, u := range all {
		r.history = append(r.history, simDelivery[U]{unit: u, versions: r.versions})
	}
	r.record(r.runTask(len(r.phases)-1, workBackfill))
}

// checkEnd: a job version bump recomputes upserted rows; an insert_once
// row is never changed (checkRows holds it to its first written version).
func (*bumpFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	if r.sc.bump < 0 && r.job.HasDest && !r.job.InsertOnce {
		verbs, closeInc := r.aux(r.now)
		stale, err := verbs.Stale(ctx, 100)
		closeInc()
		if err != nil || len(stale) > 0 {
			r.violate("end: after a job version bump and a backfill, rows of the old version remain: %v (err %v)", stale, err)
		}
	}
}
