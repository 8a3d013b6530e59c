package ops

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The states an effect is shown in. The ledger stores pending, done and
// failed; a pending row under a live lease is shown leased, and a failed
// one parked, the word the reports and the README use for it.
const (
	EffectPending = "pending" // owed: the next run or drain performs it
	EffectLeased  = "leased"  // owed and held by a worker whose lease has not run out
	EffectDone    = "done"
	EffectParked  = "parked" // ledger state failed: max_attempts or a permanent failure
)

// The states of a parked-table row, as the runtime stores them
// (idem/parked.go).
const (
	unitFailing = "failing"
	unitParked  = "parked"
	unitRetry   = "retry"
)

// States lists the values a Filter's State may take.
var States = []string{EffectPending, EffectLeased, EffectDone, EffectParked, unitFailing, unitRetry}

// Effect is one ledger row: an effect owed, done or parked.
type Effect struct {
	Key           string     `json:"key"`
	Job           string     `json:"job"`
	Effect        string     `json:"effect"`
	EffectVersion int        `json:"effect_version"`
	JobVersion    int        `json:"job_version"`
	UnitKey       string     `json:"unit_key"`
	State         string     `json:"state"`        // pending, leased, done or parked
	StoredState   string     `json:"stored_state"` // pending, done or failed
	Attempts      int        `json:"attempts"`
	MaxAttempts   int        `json:"max_attempts,omitempty"` // from the spec; 0 when it no longer has the effect
	LeaseOwner    *string    `json:"lease_owner"`
	LeaseUntil    *time.Time `json:"lease_until"`
	LastError     *string    `json:"last_error"`
	// NextAttemptAt: a failed attempt's row is not claimed before it (the
	// effect's retry backoff, or the provider's RetryAfter).
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	// ParkedReason says why a parked row is: "permanent" or "max_attempts".
	ParkedReason *string         `json:"parked_reason"`
	Result       []byte          `json:"result"` // kept with keep_result
	Payload      json.RawMessage `json:"payload,omitempty"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
	DoneAt       *time.Time      `json:"done_at"`
}

// Unit is one row of the parked table: a unit whose write failed.
type Unit struct {
	Job           string          `json:"job"`
	Key           string          `json:"key"`
	State         string          `json:"state"` // failing, parked or retry
	Attempts      int             `json:"attempts"`
	MaxAttempts   int             `json:"max_attempts,omitempty"` // the job's unit.max_attempts; 0: never parked
	LastError     string          `json:"last_error"`
	Mark          *time.Time      `json:"mark"` // the unit's watermark field, for watermark jobs
	JobVersion    int             `json:"job_version"`
	Payload       json.RawMessage `json:"payload,omitempty"`
	FirstFailedAt time.Time       `json:"first_failed_at"`
	UpdatedAt     time.Time       `json:"updated_at"`
}

// HandedIn is the record of a handed-in unit's key (source: none), with
// which a replay is recognised as one.
type HandedIn struct {
	Job        string    `json:"job"`
	Key        string    `json:"key"`
	JobVersion int       `json:"job_version"`
	FirstSeen  time.Time `json:"first_seen"`
}

// Rows are the rows found under a key or a filter.
type Rows struct {
	Effects  []Effect   `json:"effects"`
	Units    []Unit     `json:"units"`
	HandedIn []HandedIn `json:"handed_in"`
}

// Empty reports whether no row was found.
func (r *Rows) Empty() bool { return len(r.Effects)+len(r.Units)+len(r.HandedIn) == 0 }

// Filter selects the rows List returns; empty fields select all.
type Filter struct {
	Job, Effect string
	State       string // one of States; parked selects parked effects and parked units
	Prefix      string // of the effect key, or of the unit key for units
	Limit       int    // at most this many rows of each kind; 0: all
}

// List returns the ledger rows and parked-table rows the filter selects,
// ordered by job and key, without payloads. Handed-in key records are not
// listed (there is one per unit ever handed in); Show finds them.
func (d *DB) List(ctx context.Context, f Filter) (*Rows, error) {
	if f.State != "" && !slices.Contains(States, f.State) {
		return nil, fmt.Errorf("unknown state %q (states: %s)", f.State, strings.Join(States, ", "))
	}
	rows := &Rows{Effects: []Effect{}, Units: []Unit{}, HandedIn: []HandedIn{}}
	// Which kinds the state can select; units have no effect.
	effects := f.State != unitFailing && f.State != unitRetry
	units := f.Effect == "" && (f.State == "" || f.State == unitFailing || f.State == unitParked || f.State == unitRetry)

	var err error
	if effects {
		where, args := []string{}, []any{}
		add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
		if f.Job != "" {
			add("job = ?", f.Job)
		}
		if f.Effect != "" {
			add("effect = ?", f.Effect)
		}
		if f.Prefix != "" {
			add("substr(effect_key, 1, ?) = ?", utf8.RuneCountInString(f.Prefix), f.Prefix)
		}
		switch now := d.now(); f.State {
		case EffectPending:
			add("state = 'pending' AND (lease_until IS NULL OR lease_until <= ?)", d.at(now))
		case EffectLeased:
			add("state = 'pending' AND lease_until > ?", d.at(now))
		case EffectDone:
			add("state = 'done'")
		case EffectParked:
			add("state = 'failed'")
		}
		if rows.Effects, err = d.effects(ctx, d.db, where, args, f.Limit, false, false); err != nil {
			return nil, err
		}
	}
	if units {
		where, args := []string{}, []any{}
		add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
		if f.Job != "" {
			add("job = ?", f.Job)
		}
		if f.Prefix != "" {
			add("substr(unit_key, 1, ?) = ?", utf8.RuneCountInString(f.Prefix), f.Prefix)
		}
		if f.State != "" {
			add("state = ?", f.State)
		}
		if rows.Units, err = d.units(ctx, d.db, where, args, f.Limit, false, false); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// Show returns every row under key, with payloads: the ledger row whose
// effect key it is, and the parked-table row and handed-in key record
// whose unit key it is. A job narrows it to that job's rows.
func (d *DB) Show(ctx context.Context, key, job string) (*Rows, error) {
	return d.underKey(ctx, d.db, key, job, false)
}

// underKey reads the rows under key; lock locks them for the caller's
// transaction.
func (d *DB) underKey(ctx context.Context, q querier, key, job string, lock bool) (*Rows, error) {
	rows := &Rows{}
	effWhere, effArgs := []string{"effect_key = ?"}, []any{key}
	unitWhere, unitArgs := []string{"unit_key = ?"}, []any{key}
	if job != "" {
		effWhere, effArgs = append(effWhere, "job = ?"), append(effArgs, job)
		unitWhere, unitArgs = append(unitWhere, "job = ?"), append(unitArgs, job)
	}
	var err error
	if rows.Effects, err = d.effects(ctx, q, effWhere, effArgs, 0, true, lock); err != nil {
		return nil, err
	}
	if rows.Units, err = d.units(ctx, q, unitWhere, unitArgs, 0, true, lock); err != nil {
		return nil, err
	}
	if rows.HandedIn, err = d.handedIn(ctx, q, unitWhere, unitArgs, lock); err != nil {
		return nil, err
	}
	return rows, nil
}

func (d *DB) effects(ctx context.Context, q querier, where []string, args []any, limit int, payload, lock bool) ([]Effect, error) {
	cols := "effect_key, job, effect, effect_version, job_version, unit_key, state, attempts, lease_owner, lease_until, result, last_error, created_at, updated_at, done_at"
	if d.retryCols {
		cols += ", next_attempt_at, parked_reason"
	}
	if payload {
		cols += ", payload"
	}
	query := "SELECT " + cols + " FROM " + d.t.Ledger + whereClause(where) + " ORDER BY job, effect_key" + limitClause(limit) + d.lockClause(lock)
	rs, err := q.QueryContext(ctx, d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.t.Ledger, err)
	}
	defer rs.Close()
	now := d.now()
	out := []Effect{}
	for rs.Next() {
		var e Effect
		var leaseUntil, created, updated, done, next dbTime
		var body []byte
		dest := []any{&e.Key, &e.Job, &e.Effect, &e.EffectVersion, &e.JobVersion, &e.UnitKey, &e.StoredState, &e.Attempts,
			&e.LeaseOwner, &leaseUntil, &e.Result, &e.LastError, &created, &updated, &done}
		if d.retryCols {
			dest = append(dest, &next, &e.ParkedReason)
		}
		if payload {
			dest = append(dest, &body)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read %s: %w", d.t.Ledger, err)
		}
		e.LeaseUntil, e.CreatedAt, e.UpdatedAt, e.DoneAt, e.NextAttemptAt = leaseUntil.ptr(), created.t, updated.t, done.ptr(), next.ptr()
		e.Payload = jsonPayload(body)
		e.State = effectState(e.StoredState, e.LeaseUntil, now)
		if fx := d.effect(e.Job, e.Effect); fx != nil {
			e.MaxAttempts = fx.MaxAttempts
		}
		out = append(out, e)
	}
	return out, rs.Err()
}

func (d *DB) units(ctx context.Context, q querier, where []string, args []any, limit int, payload, lock bool) ([]Unit, error) {
	cols := "job, unit_key, state, attempts, last_error, mark, job_version, first_failed_at, updated_at"
	if payload {
		cols += ", payload"
	}
	query := "SELECT " + cols + " FROM " + d.t.Parked + whereClause(where) + " ORDER BY job, unit_key" + limitClause(limit) + d.lockClause(lock)
	rs, err := q.QueryContext(ctx, d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.t.Parked, err)
	}
	defer rs.Close()
	out := []Unit{}
	for rs.Next() {
		var u Unit
		var mark, first, updated dbTime
		var body []byte
		dest := []any{&u.Job, &u.Key, &u.State, &u.Attempts, &u.LastError, &mark, &u.JobVersion, &first, &updated}
		if payload {
			dest = append(dest, &body)
		}
		if err := rs.Scan(dest...); err != nil {
			return nil, fmt.Errorf("read %s: %w", d.t.Parked, err)
		}
		u.Mark, u.FirstFailedAt, u.UpdatedAt = mark.ptr(), first.t, updated.t
		u.Payload = jsonPayload(body)
		if j := d.job(u.Job); j != nil {
			u.MaxAttempts = j.Unit.MaxAttempts
		}
		out = append(out, u)
	}
	return out, rs.Err()
}

func (d *DB) handedIn(ctx context.Context, q querier, where []string, args []any, lock bool) ([]HandedIn, error) {
	query := "SELECT job, unit_key, job_version, first_seen FROM " + d.t.Seen + whereClause(where) + " ORDER BY job, unit_key" + d.lockClause(lock)
	rs, err := q.QueryContext(ctx, d.q(query), args...)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", d.t.Seen, err)
	}
	defer rs.Close()
	out := []HandedIn{}
	for rs.Next() {
		var h HandedIn
		var first dbTime
		if err := rs.Scan(&h.Job, &h.Key, &h.JobVersion, &first); err != nil {
			return nil, fmt.Errorf("read %s: %w", d.t.Seen, err)
		}
		h.FirstSeen = first.t
		out = append(out, h)
	}
	return out, rs.Err()
}

func whereClause(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return " WHERE " + strings.Join(conds, " AND ")
}

func limitClause(n int) string {
	if n <= 0 {
		return ""
	}
	return fmt.Sprintf(" LIMIT %d", n)
}

func (d *DB) lockClause(lock bool) string {
	if !lock {
		return ""
	}
	return d.forUpdate()
}

// effectState is the state an effect row is shown in.
func effectState(stored string, leaseUntil *time.Time, now time.Time) string {
	switch {
	case stored == "failed":
		return EffectParked
	case stored == "pending" && leaseUntil != nil && leaseUntil.After(now):
		return EffectLeased
	}
	return stored
}

// jsonPayload keeps a stored payload (the unit as JSON) as JSON, or as a
// JSON string should it be anything else.
func jsonPayload(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	s, _ := json.Marshal(string(b))
	return s
}

// ErrNotFound is returned for a key no row is under.
var ErrNotFound = errors.New("no ledger row, parked unit or handed-in key record under this key")

// RefusedError is a write refused because of a row's state, such as an
// effect a worker holds under a live lease. Nothing was written.
type RefusedError struct{ Reasons []string }

func (e *RefusedError) Error() string { return strings.Join(e.Reasons, "; ") }

// Change is one row a write changed or removed.
type Change struct {
	Kind string `json:"kind"` // effect, unit or handed_in
	Job  string `json:"job"`
	// Effect is the effect's name for an effect row.
	Effect string `json:"effect,omitempty"`
	Key    string `json:"key"`
	// State is the row's state before the change.
	State    string `json:"state,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
}

// Retry puts the parked effect whose key is key, and the failing or parked
// units under key (of job, if given), back: the effect is owed again with
// its attempts at 0, as a fresh reservation is, and the next run or drain
// performs it; a unit is put back as the runtime's Store.Retry does
// (RetryUnit: state retry, attempts 0), and the next run (drain, for
// handed-in units) writes it from its stored payload. An effect that is
// not parked is refused: a leased one is a worker's, a pending one is owed
// already, a done one would need reset. One transaction; logged.
func (d *DB) Retry(ctx context.Context, key, job string) ([]Change, error) {
	var changes []Change
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		now := d.now()
		rows, err := d.underKey(ctx, tx, key, job, true)
		if err != nil {
			return err
		}
		if len(rows.Effects)+len(rows.Units) == 0 {
			if len(rows.HandedIn) > 0 {
				return &RefusedError{[]string{fmt.Sprintf("%s is a handed-in unit's key record; its unit was written, so there is nothing to retry (reset forgets the key)", key)}}
			}
			return fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		var refused []string
		for _, e := range rows.Effects {
			switch e.State {
			case EffectParked:
			case EffectLeased:
				refused = append(refused, leasedReason(e))
			case EffectPending:
				refused = append(refused, fmt.Sprintf("effect %s is not parked: it is owed already, and the next run or drain performs it", e.Key))
			default:
				refused = append(refused, fmt.Sprintf("effect %s is not parked but %s", e.Key, e.State))
			}
		}
		if len(refused) > 0 {
			return &RefusedError{refused}
		}
		changes, err = d.putBack(ctx, tx, rows.Effects, rows.Units, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	d.logChanges("idemgen ledger: put back for retry", changes)
	return changes, nil
}

// putBack puts effects back to pending and units back for retry, inside tx,
// and returns what it changed.
func (d *DB) putBack(ctx context.Context, tx *sql.Tx, effects []Effect, units []Unit, now time.Time) ([]Change, error) {
	var changes []Change
	for _, e := range effects {
		if err := d.retryEffect(ctx, tx, e.Key, now); err != nil {
			return nil, err
		}
		changes = append(changes, Change{Kind: "effect", Job: e.Job, Effect: e.Effect, Key: e.Key, State: e.State, Attempts: e.Attempts})
	}
	for _, u := range units {
		if err := d.retryUnit(ctx, tx, u.Job, u.Key, now); err != nil {
			return nil, err
		}
		changes = append(changes, Change{Kind: "unit", Job: u.Job, Key: u.Key, State: u.State, Attempts: u.Attempts})
	}
	return changes, nil
}

// RetryAllParked puts every parked effect and parked unit of job (of every
// job of the spec when job is "") back, as Retry does. One transaction; logged.
func (d *DB) RetryAllParked(ctx context.Context, job string) ([]Change, error) {
	jobs := []string{job}
	if job == "" {
		jobs = nil
		for _, j := range d.pkg.Jobs {
			jobs = append(jobs, j.Name)
		}
	}
	var changes []Change
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		now := d.now()
		for _, job := range jobs {
			effects, err := d.effects(ctx, tx, []string{"job = ?", "state = 'failed'"}, []any{job}, 0, false, true)
			if err != nil {
				return err
			}
			units, err := d.units(ctx, tx, []string{"job = ?", "state = 'parked'"}, []any{job}, 0, false, true)
			if err != nil {
				return err
			}
			put, err := d.putBack(ctx, tx, effects, units, now)
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
	d.logChanges("idemgen ledger: put back for retry", changes)
	return changes, nil
}

// retryEffect makes a parked effect owed again, in the state ReserveEffect
// creates it in (pending, attempts 0, no lease), so ClaimEffect takes it
// on the next drain and ReleaseEffect counts max_attempts afresh. The last
// error stays, for history. Guarded by state: a row no longer parked is an
// error, not a silent change.
func (d *DB) retryEffect(ctx context.Context, tx *sql.Tx, key string, now time.Time) error {
	res, err := tx.ExecContext(ctx, d.q(`UPDATE `+d.t.Ledger+`
SET state = 'pending', attempts = 0, lease_owner = NULL, lease_until = NULL, updated_at = ?
WHERE effect_key = ? AND state = 'failed'`), d.at(now), key)
	return oneRow(res, err, "put back effect "+key)
}

// retryUnit is the runtime's RetryUnit.
func (d *DB) retryUnit(ctx context.Context, tx *sql.Tx, job, key string, now time.Time) error {
	res, err := tx.ExecContext(ctx, d.q(`UPDATE `+d.t.Parked+` SET state = 'retry', attempts = 0, updated_at = ?
WHERE job = ? AND unit_key = ?`), d.at(now), job, key)
	return oneRow(res, err, "put back unit "+key)
}

func oneRow(res sql.Result, err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n != 1 {
		return fmt.Errorf("%s: %d rows changed, want 1", what, n)
	}
	return nil
}

func leasedReason(e Effect) string {
	owner := "a worker"
	if e.LeaseOwner != nil {
		owner = "worker " + *e.LeaseOwner
	}
	return fmt.Sprintf("effect %s is leased by %s until %s: it may be calling the provider right now; wait for the lease to end",
		e.Key, owner, e.LeaseUntil.UTC().Format(time.RFC3339))
}

// Reset forgets key on purpose: it removes the ledger row whose effect key
// it is and the parked-table row and handed-in key record whose unit key it
// is (of job, if given), and returns them. An effect a worker holds under a
// live lease refuses the whole reset. With dryRun it returns what it would
// remove and writes nothing. One transaction; logged.
//
// Forgetting has consequences the caller chose: an effect whose row is
// gone is owed again only if a write decides it again; a handed-in key is
// processed as new when handed in again; a parked unit is attempted again
// when it is fetched or handed in again.
func (d *DB) Reset(ctx context.Context, key, job string, dryRun bool) ([]Change, error) {
	var changes []Change
	err := d.inTx(ctx, func(tx *sql.Tx) error {
		rows, err := d.underKey(ctx, tx, key, job, true)
		if err != nil {
			return err
		}
		if rows.Empty() {
			return fmt.Errorf("%s: %w", key, ErrNotFound)
		}
		var refused []string
		for _, e := range rows.Effects {
			if e.State == EffectLeased {
				refused = append(refused, leasedReason(e))
			}
		}
		if len(refused) > 0 {
			return &RefusedError{refused}
		}
		for _, e := range rows.Effects {
			changes = append(changes, Change{Kind: "effect", Job: e.Job, Effect: e.Effect, Key: e.Key, State: e.State, Attempts: e.Attempts})
		}
		for _, u := range rows.Units {
			changes = append(changes, Change{Kind: "unit", Job: u.Job, Key: u.Key, State: u.State, Attempts: u.Attempts})
		}
		for _, h := range rows.HandedIn {
			changes = append(changes, Change{Kind: "handed_in", Job: h.Job, Key: h.Key})
		}
		if dryRun {
			return nil
		}
		now := d.now()
		for _, e := range rows.Effects {
			// The lease is checked again where the row goes, should a
			// dialect's lock ever let a claim in between.
			res, err := tx.ExecContext(ctx, d.q(`DELETE FROM `+d.t.Ledger+`
WHERE effect_key = ? AND NOT (state = 'pending' AND lease_until IS NOT NULL AND lease_until > ?)`), e.Key, d.at(now))
			if err := oneRow(res, err, "remove effect "+e.Key); err != nil {
				return err
			}
		}
		for _, u := range rows.Units {
			res, err := tx.ExecContext(ctx, d.q(`DELETE FROM `+d.t.Parked+` WHERE job = ? AND unit_key = ?`), u.Job, u.Key)
			if err := oneRow(res, err, "remove unit "+u.Key); err != nil {
				return err
			}
		}
		for _, h := range rows.HandedIn {
			res, err := tx.ExecContext(ctx, d.q(`DELETE FROM `+d.t.Seen+` WHERE job = ? AND unit_key = ?`), h.Job, h.Key)
			if err := oneRow(res, err, "remove handed-in key "+h.Key); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !dryRun {
		d.logChanges("idemgen ledger: reset: removed", changes)
	}
	return changes, nil
}

// logChanges logs each committed change, with its key.
func (d *DB) logChanges(msg string, changes []Change) {
	for _, c := range changes {
		attrs := []any{slog.String("package", d.pkg.Name), slog.String("job", c.Job), slog.String("kind", c.Kind)}
		if c.Effect != "" {
			attrs = append(attrs, slog.String("effect", c.Effect))
		}
		attrs = append(attrs, slog.String("key", c.Key), slog.String("was", c.State))
		d.log.Info(msg, attrs...)
	}
}
