package idemrt

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Recovery is what a person does about parked work: put it back (Retry,
// RetryParked) or forget a key on purpose (Forget). These functions are
// the one implementation: a generated Store's Retry, RetryParked and
// Forget call them, and so do `idemgen ledger retry` and `idemgen ledger
// reset`. Each runs in one transaction on the rows it locks first.

// ShownEffectState is the state an effect row is shown in (Change.State,
// the CLI): its ledger state (LedgerState), except StateLeased for a
// pending row whose lease (leaseUntil, zero: none) is live at now.
func ShownEffectState(state string, leaseUntil, now time.Time) string {
	if state == StatePending && !leaseUntil.IsZero() && leaseUntil.After(now) {
		return StateLeased
	}
	return state
}

// ErrNothingUnderKey is returned by Retry and Forget for a key no ledger
// row, parked-table row or handed-in key record is under.
var ErrNothingUnderKey = errors.New("no ledger row, parked unit or handed-in key record under this key")

// RefusedError is a recovery refused because of a row's state, such as an
// effect a worker holds under a live lease. Nothing was written.
type RefusedError struct{ Reasons []string }

func (e *RefusedError) Error() string { return strings.Join(e.Reasons, "; ") }

// The kinds of row a Change is about.
const (
	KindEffect   = "effect"    // a ledger row
	KindUnit     = "unit"      // a parked-table row: a unit whose write failed
	KindHandedIn = "handed_in" // a handed-in unit's key record
)

// Change is one row a recovery changed or removed (or, for a dry run,
// would remove).
type Change struct {
	Kind string `json:"kind"` // KindEffect, KindUnit or KindHandedIn
	Job  string `json:"job"`
	// Effect is the effect's name, for an effect row.
	Effect string `json:"effect,omitempty"`
	Key    string `json:"key"`
	// State is the row's state before the change: an effect's shown state
	// (ShownEffectState), a unit's parked-table state.
	State    string `json:"state,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// HeldEffect is a ledger row as recovery reads it, locked.
type HeldEffect struct {
	Key, Job, Effect string
	State            string // StatePending, StateDone or StateParked
	Attempts         int
	LeaseOwner       string
	LeaseUntil       time.Time // zero: no lease
}

// HeldUnit is a parked-table row or handed-in key record as recovery reads it.
type HeldUnit struct {
	Job, Key string
	State    string // a parked-table row's state; "" for a handed-in key record
	Attempts int
}

// Held is what recovery finds under a key, or parked in a job.
type Held struct {
	Effects  []HeldEffect
	Units    []HeldUnit // parked-table rows
	HandedIn []HeldUnit // handed-in key records
}

// RecoveryQuerier holds recovery's queries; every querier has them. The
// Lock queries lock what they return until the transaction ends.
type RecoveryQuerier interface {
	// LockUnderKey returns the ledger row whose effect key is key, and the
	// parked-table rows and handed-in key records whose unit key is key, of
	// every job.
	LockUnderKey(ctx context.Context, key string) (Held, error)
	// LockParked returns job's parked effects and parked units.
	LockParked(ctx context.Context, job string) (Held, error)
	// RetryEffect makes a parked effect owed again (attempts 0, no wait, no
	// park reason); false when the row is not parked.
	RetryEffect(ctx context.Context, key string, now time.Time) (bool, error)
	// ForgetEffect removes an effect's row unless it is under a lease live
	// at leaseNow; false when nothing was removed.
	ForgetEffect(ctx context.Context, key string, leaseNow time.Time) (bool, error)
	// ForgetUnit removes a parked-table row; ForgetHandedIn a handed-in key
	// record.
	ForgetUnit(ctx context.Context, job, unitKey string) (bool, error)
	ForgetHandedIn(ctx context.Context, job, unitKey string) (bool, error)
}

// Retry puts back what is parked under key, in job (every job when job is
// ""): the parked effect whose effect key it is is owed again with its
// attempts at 0, so the next Run or Drain performs it with the same key;
// the failing or parked unit whose unit key it is is written again from
// its stored payload by the next Run (Drain, for handed-in units). An
// effect that is not parked refuses the whole retry (*RefusedError): a
// leased one is a worker's, a pending one is owed already, a done one
// needs Forget. now is the time leases are compared on (the database's
// clock: StoreNow). It returns what it changed.
func Retry(ctx context.Context, st Store, job, key string, now time.Time) ([]Change, error) {
	var changes []Change
	err := st.InTx(ctx, func(q Querier) error {
		held, err := lockUnderKey(ctx, q, job, key, now)
		if err != nil {
			return err
		}
		if len(held.Effects)+len(held.Units) == 0 {
			return &RefusedError{[]string{fmt.Sprintf("%s is a handed-in unit's key record; its unit was written, so there is nothing to retry (forget the key to process it as new)", key)}}
		}
		var refused []string
		for _, e := range held.Effects {
			switch ShownEffectState(e.State, e.LeaseUntil, now) {
			case StateParked:
			case StatePending:
				refused = append(refused, fmt.Sprintf("effect %s is not parked: it is owed already, and the next run or drain performs it", e.Key))
			default:
				refused = append(refused, fmt.Sprintf("effect %s is not parked but %s", e.Key, e.State))
			}
		}
		if len(refused) > 0 {
			return &RefusedError{refused}
		}
		changes, err = putBack(ctx, q, held, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return changes, nil
}

// RetryParked puts every parked effect and parked unit of the jobs back,
// as Retry does, in one transaction, and returns what it changed.
func RetryParked(ctx context.Context, st Store, now time.Time, jobs ...string) ([]Change, error) {
	var changes []Change
	err := st.InTx(ctx, func(q Querier) error {
		changes = nil
		for _, job := range jobs {
			held, err := q.LockParked(ctx, job)
			if err != nil {
				return err
			}
			put, err := putBack(ctx, q, held, now)
			if err != nil {
				return err
			}
			changes = append(changes, put...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return changes, nil
}

// putBack puts held's effects back to pending and its units back for
// retry, and returns what it changed. A row that changed state since it
// was locked is an error, not a silent change.
func putBack(ctx context.Context, q Querier, held Held, now time.Time) ([]Change, error) {
	for _, e := range held.Effects {
		if err := one(q.RetryEffect(ctx, e.Key, now))("put back effect " + e.Key); err != nil {
			return nil, err
		}
	}
	for _, u := range held.Units {
		if err := one(q.RetryUnit(ctx, u.Job, u.Key, now))("put back unit " + u.Key); err != nil {
			return nil, err
		}
	}
	return held.changes(now), nil
}

// Forget forgets key on purpose, in job (every job when job is ""): it
// removes the ledger row whose effect key it is, and the parked-table row
// and handed-in key record whose unit key it is, and returns them. An
// effect a worker holds under a lease live at now refuses the whole
// forget (*RefusedError). With dryRun it returns what it would remove and
// writes nothing.
//
// Forgetting has consequences the caller chose: an effect whose row is
// gone is owed again only if a write decides it again (a backfill, a
// version bump); a handed-in key is processed as new when handed in
// again; a parked unit is attempted again when it is fetched or handed in
// again.
func Forget(ctx context.Context, st Store, job, key string, now time.Time, dryRun bool) ([]Change, error) {
	var changes []Change
	err := st.InTx(ctx, func(q Querier) error {
		held, err := lockUnderKey(ctx, q, job, key, now)
		if err != nil {
			return err
		}
		changes = held.changes(now)
		if dryRun {
			return nil
		}
		for _, e := range held.Effects {
			if err := one(q.ForgetEffect(ctx, e.Key, now))("remove effect " + e.Key); err != nil {
				return err
			}
		}
		for _, u := range held.Units {
			if err := one(q.ForgetUnit(ctx, u.Job, u.Key))("remove unit " + u.Key); err != nil {
				return err
			}
		}
		for _, h := range held.HandedIn {
			if err := one(q.ForgetHandedIn(ctx, h.Job, h.Key))("remove handed-in key " + h.Key); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return changes, nil
}

// lockUnderKey locks what is kept under key in job (every job when job is
// ""): ErrNothingUnderKey when nothing is, and *RefusedError when an
// effect there is under a lease live at now (a worker may be calling its
// provider right now).
func lockUnderKey(ctx context.Context, q Querier, job, key string, now time.Time) (Held, error) {
	held, err := q.LockUnderKey(ctx, key)
	if err != nil {
		return Held{}, err
	}
	held = held.of(job)
	if len(held.Effects)+len(held.Units)+len(held.HandedIn) == 0 {
		return Held{}, fmt.Errorf("%s: %w", key, ErrNothingUnderKey)
	}
	var refused []string
	for _, e := range held.Effects {
		if ShownEffectState(e.State, e.LeaseUntil, now) == StateLeased {
			refused = append(refused, e.leased())
		}
	}
	if len(refused) > 0 {
		return Held{}, &RefusedError{refused}
	}
	return held, nil
}

// StoreNow is the time recovery compares leases on: the database's clock
// when st can read it (DBClock), else the local clock.
func StoreNow(ctx context.Context, st Store) (time.Time, error) {
	if c, ok := st.(DBClock); ok {
		now, err := c.DBNow(ctx)
		if err != nil {
			return time.Time{}, fmt.Errorf("read the database clock: %w", err)
		}
		return now, nil
	}
	return time.Now(), nil
}

// of keeps the rows of job; every row when job is "".
func (h Held) of(job string) Held {
	if job == "" {
		return h
	}
	var out Held
	for _, e := range h.Effects {
		if e.Job == job {
			out.Effects = append(out.Effects, e)
		}
	}
	for _, u := range h.Units {
		if u.Job == job {
			out.Units = append(out.Units, u)
		}
	}
	for _, k := range h.HandedIn {
		if k.Job == job {
			out.HandedIn = append(out.HandedIn, k)
		}
	}
	return out
}

// changes are held's rows as Changes, in the order recovery changes them:
// effects, units, handed-in key records.
func (h Held) changes(now time.Time) []Change {
	var out []Change
	for _, e := range h.Effects {
		out = append(out, Change{Kind: KindEffect, Job: e.Job, Effect: e.Effect, Key: e.Key, State: ShownEffectState(e.State, e.LeaseUntil, now), Attempts: e.Attempts})
	}
	for _, u := range h.Units {
		out = append(out, Change{Kind: KindUnit, Job: u.Job, Key: u.Key, State: u.State, Attempts: u.Attempts})
	}
	for _, k := range h.HandedIn {
		out = append(out, Change{Kind: KindHandedIn, Job: k.Job, Key: k.Key})
	}
	return out
}

// leased says why an effect under a live lease is left alone.
func (e HeldEffect) leased() string {
	owner := "a worker"
	if e.LeaseOwner != "" {
		owner = "worker " + e.LeaseOwner
	}
	return fmt.Sprintf("effect %s is leased by %s until %s: it may be calling the provider right now; wait for the lease to end",
		e.Key, owner, e.LeaseUntil.UTC().Format(time.RFC3339))
}

// one turns a guarded write's "changed a row" answer into an error naming
// what when it changed none.
func one(changed bool, err error) func(what string) error {
	return func(what string) error {
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if !changed {
			return fmt.Errorf("%s: the row changed since it was read", what)
		}
		return nil
	}
}
