package crashsim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/idemgen/idemgen/idem"
)

// The forget family: a person forgets keys through the runtime's recovery
// (idem.Forget, what the generated store's Forget and `idemgen ledger
// forget` call). While worker A holds an effect's live lease (paused just
// before its call), forgetting that key must be refused and change
// nothing. Once the scenario has converged and every end check has run,
// forgetting one done effect key beside the others must remove its row and
// nothing else.

type forgetFamily[U any] struct{ baseFamily[U] }

func (*forgetFamily[U]) about() familyAbout {
	return familyAbout{name: "forget", guarantees: []int{8},
		what: "a person forgets (`idem.Forget`, the code of the generated store and `idemgen ledger " +
			"forget`) a key whose effect a paused worker holds under a live lease: refused, the ledger " +
			"unchanged; after the re-run and backfill, forgetting one done key removes its row and " +
			"leaves every other row as it was"}
}

// plan: at each effect's first call.
func (*forgetFamily[U]) plan(d *discovery[U]) []simScenario {
	return atFirstCalls(d, "forget")
}

func (*forgetFamily[U]) exactCalls(simScenario) bool { return true }

func (f *forgetFamily[U]) playPhase(r *simRun[U], phase int) {
	r.runPhase(phase, phasePlay{pauseAt: r.atScenarioHit, interlude: func(_ int, a *simTask) { f.interlude(r, a) }})
}

// interlude: A holds key's live lease; a person tries to forget it.
func (*forgetFamily[U]) interlude(r *simRun[U], a *simTask) {
	ctx := context.Background()
	r.mu.Lock()
	key := r.pausedKey
	r.mu.Unlock()
	if key == "" {
		a.finish()
		return
	}
	before := r.ledgerRows(ctx, "forget under a live lease")
	st, closeInc := r.helper()
	changes, err := idem.Forget(ctx, st, "", key, r.now(), false)
	closeInc()
	var refused *idem.RefusedError
	if !errors.As(err, &refused) || len(changes) != 0 {
		r.violate("forget: forgetting %s while worker %s holds its live lease returned %+v, %v; want it refused", key, simOwner(a.inc.id), changes, err)
	}
	if after := r.ledgerRows(ctx, "forget under a live lease"); !slices.Equal(before, after) {
		r.violate("forget: a refused forget of %s changed the ledger:\n  before %v\n  after  %v", key, before, after)
	}
	a.finish()
}

// checkAfterRerun forgets one done effect key at the end: its row goes,
// every other row stays as it was.
func (*forgetFamily[U]) checkAfterRerun(ctx context.Context, r *simRun[U]) {
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("forget: read the ledger: %v", err)
		return
	}
	i := slices.IndexFunc(entries, func(e idem.LedgerEntry) bool { return e.State == idem.StateDone })
	if i < 0 {
		return
	}
	key := entries[i].Key
	before := r.ledgerRows(ctx, "forget one key")
	st, closeInc := r.helper()
	changes, err := idem.Forget(ctx, st, "", key, r.now(), false)
	closeInc()
	effects := slices.DeleteFunc(slices.Clone(changes), func(c idem.Change) bool { return c.Kind != idem.KindEffect })
	if err != nil || len(effects) != 1 || effects[0].Key != key {
		r.violate("forget: forgetting done effect %s returned %+v, %v; want its one ledger row", key, changes, err)
	}
	want := slices.DeleteFunc(before, func(row string) bool { return rowKey(row) == key })
	if after := r.ledgerRows(ctx, "forget one key"); !slices.Equal(want, after) {
		r.violate("forget: forgetting %s left the ledger\n  %v\nwant every other row as it was\n  %v", key, after, want)
	}
}

// ledgerRows reads the ledger as comparable lines, in key order.
func (r *simRun[U]) ledgerRows(ctx context.Context, where string) []string {
	entries, err := r.db.observer().Auto().Ledger(ctx)
	if err != nil {
		r.violate("%s: read the ledger: %v", where, err)
		return nil
	}
	rows := make([]string, len(entries))
	for i, e := range entries {
		rows[i] = fmt.Sprintf("%q %s %s %d %s %q", e.Key, e.Effect, e.State, e.Attempts, e.LeaseOwner, e.Result)
	}
	slices.Sort(rows)
	return rows
}

// rowKey is the key of a ledgerRows line (quoted first).
func rowKey(row string) string {
	q, err := strconv.QuotedPrefix(row)
	if err != nil {
		return ""
	}
	k, _ := strconv.Unquote(q)
	return k
}
