package crashsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemtest"
)

// The held-purge family: once the fixture has converged, a person's dry
// run of `idemgen ledger forget` on a done key stops inside its
// transaction, holding the key's ledger row (PostgreSQL's row lock,
// SQLite's write lock), while the job's purge, under the held family's
// short wait bound, deletes everything past retention. A purge runs
// outside any transaction, one statement at a time, on a timer that no
// person watches: it must end busy (idem.ErrBusy) within its bound, never
// wait as long as the holder holds. Once the forget has ended, a purge
// deletes every row past retention (purgeNow's checks).

const famHeldPurge = "held-purge"

type heldPurgeFamily[U any] struct{ baseFamily[U] }

func (*heldPurgeFamily[U]) about() familyAbout {
	return familyAbout{name: famHeldPurge, guarantees: []int{2, 5},
		what: "once the fixture has converged, a person's dry run of `idemgen ledger forget` on a done key " +
			"stops inside its transaction, holding the key's ledger row (PostgreSQL's row lock, SQLite's " +
			"write lock), while the job's purge, under a wait bound of 150 ms, deletes everything past " +
			"retention: the purge ends busy (`idem.ErrBusy`) within five of its bounds, never another " +
			"error, never a wait as long as the hold; the forget then ends without error, and a purge " +
			"deletes every row past retention"}
}

// plan: once, when an effect has a retention (nothing is purged without).
func (*heldPurgeFamily[U]) plan(d *discovery[U]) []simScenario {
	if !slices.ContainsFunc(d.job.Effects, func(fx Effect) bool { return fx.Retention > 0 }) {
		return nil
	}
	return []simScenario{newScenario(famHeldPurge)}
}

// checkEnd: the hold, the purge that meets it, then a purge after it.
func (*heldPurgeFamily[U]) checkEnd(ctx context.Context, r *simRun[U], _ simExpect[U]) {
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("%s: read the ledger: %v", famHeldPurge, err)
		return
	}
	retained := func(e idem.LedgerEntry) bool {
		return e.State == idem.StateDone && slices.ContainsFunc(r.job.Effects, func(fx Effect) bool {
			return fx.Name == e.Effect && fx.Retention > 0
		})
	}
	i := slices.IndexFunc(entries, retained)
	if i < 0 {
		return // nothing done to purge: every effect of the fixture parked
	}
	key := entries[i].Key
	r.mu.Lock()
	r.forgotAtEnd = true // the purges below forget the fixture's keys
	r.mu.Unlock()

	hold, locked, letGo := simHoldInTx()
	st, _, closeForget := r.db.incarnation(r.t, hold)
	defer func() {
		closeForget()
		r.worldMoved()
	}()
	forgot := make(chan error, 1)
	go func() {
		_, err := idem.Forget(ctx, st, "", key, r.now(), true)
		forgot <- err
	}()
	select {
	case <-locked:
	case err := <-forgot:
		r.violate("%s: the forget of %s ended (%v) before its transaction held the row: the family tests nothing", famHeldPurge, key, err)
		return
	}
	took, err := r.heldPurge(ctx, letGo)
	letGo()
	if err := <-forgot; err != nil {
		r.violate("%s: the dry-run forget of %s, held while the purge ran, returned %v; want no error", famHeldPurge, key, err)
	}
	switch {
	case took > simHeldRecordLate:
		r.violate("%s: the purge waited %s on the row of %s a forget's transaction held, past its wait bound of %s (%s allowed): a purge on a timer waits as long as any holder holds (ended with %v)",
			famHeldPurge, took.Round(time.Millisecond), key, simHeldWaitBound, simHeldRecordLate, err)
	case !errors.Is(err, idem.ErrBusy):
		r.violate("%s: the purge, meeting the row of %s a forget's transaction held, returned %v; want busy (idem.ErrBusy) within its bound",
			famHeldPurge, key, err)
	}
	r.purgeNow(ctx, "after a forget held a done row", true)
}

// heldPurge purges past every retention under the held family's wait
// bound and says how long the purge took and how it ended. After ten of
// those bounds (simHeldRecordHold) it lets the hold go, and the purge
// then ends as it may.
func (r *simRun[U]) heldPurge(ctx context.Context, letGo func()) (time.Duration, error) {
	later := r.pastEveryRetention()
	st, closeInc := r.helper()
	defer closeInc()
	clock := func() time.Time { return later }
	verbs := r.newVerbs(st, idem.WithClock(clock), idemtest.WithLeaseClock(clock), idem.WithWaitBound(simHeldWaitBound))
	start := time.Now()
	purged := make(chan error, 1)
	go func() {
		_, err := verbs.Purge(context.WithoutCancel(ctx))
		purged <- err
	}()
	select {
	case err := <-purged:
		return time.Since(start), err
	case <-time.After(simHeldRecordHold):
	}
	took := time.Since(start)
	letGo()
	select {
	case err := <-purged:
		return took, err
	case <-time.After(simHeldRecordBound):
		return took, fmt.Errorf("the purge went on waiting %s after the hold ended", simHeldRecordBound)
	}
}
