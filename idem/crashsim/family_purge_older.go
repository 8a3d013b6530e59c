package crashsim

import (
	"context"
	"slices"
)

// The purge-older family: a handed-in job whose destination keeps the
// newer version (newer_wins), every effect with a retention. A key
// handed in again with other data is a mismatch while the key's record
// lasts, so the write's newer_wins guard is reached only once retention
// has purged the record: then a replay is new. Once the fixture has
// converged, everything is purged past retention and an older copy of a
// key (its newer_wins value lower, its other data changed) is handed in.
// The row must keep the newer version; the copy is counted unchanged,
// never a mismatch or an error, and decides no effect, whatever the
// effect's `when`: its data is not the destination's. Handed in again it
// is answered the same, and the row's own version handed in then is no
// mismatch: the older copy left no record of its data for the key.

const famPurgeOlder = "purge-older"

type purgeOlderFamily[U any] struct{ baseFamily[U] }

func (*purgeOlderFamily[U]) about() familyAbout {
	return familyAbout{name: famPurgeOlder, guarantees: []int{1, 2, 7},
		what: "a handed-in job with `newer_wins`, every effect with a retention: once the fixture has " +
			"converged, a purge past every retention forgets its keys, and an older copy of a key (its " +
			"`newer_wins` value lower, its other data changed) is handed in twice: the row keeps the " +
			"newer version, the copy is counted unchanged (no mismatch, no error) and decides no effect, " +
			"whatever its `when`; the row's own version handed in after it is no mismatch"}
}

// plan: once, for a handed-in newer_wins upsert whose key records a purge
// forgets (every effect has a retention; without effects, or with one
// kept forever, the records are kept forever).
func (*purgeOlderFamily[U]) plan(d *discovery[U]) []simScenario {
	j := d.job
	if j.Source != SourceNoneName || !j.HasDest || j.InsertOnce || j.NewerWins == "" || len(j.Effects) == 0 {
		return nil
	}
	if slices.ContainsFunc(j.Effects, func(fx Effect) bool { return fx.Retention <= 0 }) {
		return nil
	}
	if _, ok := olderCopy(j, j.Unit(1, 1)); !ok {
		return nil
	}
	return []simScenario{newScenario(famPurgeOlder)}
}

func (*purgeOlderFamily[U]) exactCalls(simScenario) bool { return true }

// checkEnd: the purge, then the older copy, twice, then the row's own
// version.
func (*purgeOlderFamily[U]) checkEnd(ctx context.Context, r *simRun[U], exp simExpect[U]) {
	key := r.job.keyOf(r.phases[0][0])
	newer, ok := exp.rows[key]
	if !ok {
		return // the fixture's first unit was parked or never written
	}
	older, ok := olderCopy(r.job, newer)
	if !ok {
		return
	}
	r.mu.Lock()
	r.forgotAtEnd = true
	r.mu.Unlock()
	r.purgeNow(ctx, "past every retention, before an older copy", true)
	verbs, closeInc := r.aux(r.now)
	defer closeInc()
	for try := range 2 {
		r.prov.mu.Lock()
		before := r.prov.n
		r.prov.mu.Unlock()
		rep, err := verbs.Process(ctx, older)
		r.prov.mu.Lock()
		calls := r.prov.n - before
		r.prov.mu.Unlock()
		if err != nil || rep.Unchanged != 1 || rep.Mismatched+rep.Inserted+rep.Updated+rep.Failed != 0 || calls != 0 {
			r.violate("%s: an older copy of %s handed in after its records were purged (try %d) answered %v, %s, %d provider calls; want unchanged, no error, no call (the row keeps the newer version)",
				famPurgeOlder, key, try+1, err, rep, calls)
		}
	}
	r.checkRows(ctx, exp)
	if rep, err := verbs.Process(ctx, newer); err != nil || rep.Mismatched != 0 {
		r.violate("%s: %s's own version handed in after the older copy answered %v, %s; want no mismatch: the row holds its data",
			famPurgeOlder, key, err, rep)
	}
}
