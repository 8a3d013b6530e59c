package idemops

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemrt"
)

// The states an effect is shown in (idemrt.ShownEffectState): its ledger
// state, or leased while a worker's lease on it is live.
const (
	EffectPending = idem.StatePending // owed: the next run or drain performs it
	EffectLeased  = idem.StateLeased  // owed and held by a worker whose lease has not run out
	EffectDone    = idem.StateDone
	EffectParked  = idem.StateParked // max_attempts or a permanent failure
)

// The states of a parked-table row (idem/idemrt/parked.go).
const (
	unitFailing = idem.UnitStateFailing
	unitParked  = idem.UnitStateParked
	unitRetry   = idem.UnitStateRetry
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
	State         string     `json:"state"` // pending, leased, done or parked
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
	// Redacted lists what the spec's redact hides of the row (payload,
	// result): Payload is then the JSON string "[redacted]", Result nil.
	Redacted []string `json:"redacted,omitempty"`
	// ProviderCalls says what the attempts tell of the calls the provider
	// got with this key (providerCalls).
	ProviderCalls string `json:"provider_calls"`
}

// providerCalls says what e's attempts tell of the calls its provider got
// with its key. Each counted attempt called it at most once (one whose
// worker stopped first made none); a provider's "not now" (RetryAfter)
// is a call the ledger does not count. A done row with more than one
// attempt and no failure on record was performed again after attempts
// that left no answer (a worker stopped or lost its lease mid-call): the
// provider may have got the key more than once, and the same key is what
// lets it tell.
func providerCalls(e Effect) string {
	switch {
	case e.Attempts == 0:
		return "none counted"
	case e.Attempts == 1 && e.State == EffectDone:
		return "1: the provider answered the first attempt"
	case e.Attempts == 1:
		return "at most 1"
	case e.State == EffectDone && e.LastError == nil:
		return fmt.Sprintf("up to %d: a repeat; %s before the one that succeeded left no answer (a worker stopped or lost its lease mid-call), so the provider may have got this key %d times",
			e.Attempts, attemptsText(e.Attempts-1), e.Attempts)
	}
	return fmt.Sprintf("at most %d, one per counted attempt", e.Attempts)
}

func attemptsText(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// Redacted is what a redacted payload reads as (a JSON string), and a
// redacted result is shown as.
const Redacted = "[redacted]"

var redactedJSON = json.RawMessage(`"` + Redacted + `"`)

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
	// PayloadRedacted: an effect of the job redacts its payload (the
	// spec's redact), and Payload is the JSON string "[redacted]".
	PayloadRedacted bool `json:"payload_redacted,omitempty"`
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
	// Next is the cursor of List's next page (Filter.After); "" when no
	// row follows.
	Next string `json:"next,omitempty"`
}

// Empty reports whether no row was found.
func (r *Rows) Empty() bool { return len(r.Effects)+len(r.Units)+len(r.HandedIn) == 0 }

// Filter selects the rows List returns; empty fields select all.
type Filter struct {
	Job, Effect string
	State       string // one of States; parked selects parked effects and parked units
	Prefix      string // of the effect key, or of the unit key for units
	// Limit is how many rows a page holds, effects and units together; 0:
	// every row, in one page.
	Limit int
	// After is the cursor a page's Rows.Next gave: the listing goes on
	// after that row. "" starts from the first.
	After string
}

// Cursors name the last row of a page: "effect:" and its effect key, or
// "unit:" and its job, ":" and its unit key.
const (
	effectCursor = "effect:"
	unitCursor   = "unit:"
)

// prefixEnd follows a prefix to bound the keys that start with it: in
// bytewise order every key with prefix P lies in [P, P+prefixEnd), but
// for keys holding U+10FFFF right after P, which substr still finds
// where bytewiseKeys is false, and which no key generator writes.
const prefixEnd = "\U0010FFFF"

// List returns a page of the ledger rows and parked-table rows the filter
// selects, without payloads: ledger rows ordered by effect key, then
// parked-table rows ordered by job and unit key, and the cursor of the next
// page. Each page reads on the tables' primary keys, so it costs the same
// however large the ledger is. Handed-in key records are not listed (there
// is one per unit ever handed in); Show finds them.
func (d *DB) List(ctx context.Context, f Filter) (*Rows, error) {
	if f.State != "" && !slices.Contains(States, f.State) {
		return nil, fmt.Errorf("unknown state %q (states: %s)", f.State, strings.Join(States, ", "))
	}
	rows := &Rows{Effects: []Effect{}, Units: []Unit{}, HandedIn: []HandedIn{}}
	// Which kinds the state can select; units have no effect.
	effects := f.State != unitFailing && f.State != unitRetry
	units := f.Effect == "" && (f.State == "" || f.State == unitFailing || f.State == unitParked || f.State == unitRetry)
	var afterEffect, afterJob, afterUnit string
	switch {
	case f.After == "":
	case strings.HasPrefix(f.After, effectCursor):
		afterEffect = strings.TrimPrefix(f.After, effectCursor)
	case strings.HasPrefix(f.After, unitCursor):
		var ok bool
		afterJob, afterUnit, ok = strings.Cut(strings.TrimPrefix(f.After, unitCursor), ":")
		if !ok {
			return nil, fmt.Errorf("cursor %q: want unit:JOB:KEY", f.After)
		}
		effects = false // the effects came before
	default:
		return nil, fmt.Errorf("cursor %q is not one a page gave (effect:KEY or unit:JOB:KEY)", f.After)
	}
	// fetch is how many rows the next kind may read: one more than the
	// page has room for says whether a next page exists.
	fetch := func(shown int) int {
		if f.Limit <= 0 {
			return 0
		}
		return f.Limit - shown + 1
	}

	var err error
	if effects {
		// A state's rows of every job are read job by job, each a range of
		// the (job, state, effect_key) index, and merged in key order: in
		// effect key order alone, the primary key's, a page of parked rows
		// reads past every done row between them (99 in 100 on a ledger
		// of a year).
		jobs := []string{f.Job}
		if f.Job == "" && f.State != "" {
			if jobs, err = d.ledgerJobs(ctx); err != nil {
				return nil, err
			}
		}
		for _, job := range jobs {
			more, err := d.listEffects(ctx, f, job, afterEffect, fetch(0))
			if err != nil {
				return nil, err
			}
			rows.Effects = append(rows.Effects, more...)
		}
		slices.SortFunc(rows.Effects, func(a, b Effect) int { return strings.Compare(a.Key, b.Key) })
		if n := fetch(0); n > 0 && len(rows.Effects) > n {
			rows.Effects = rows.Effects[:n]
		}
		if f.Limit > 0 && len(rows.Effects) > f.Limit {
			rows.Effects = rows.Effects[:f.Limit]
			rows.Next = effectCursor + rows.Effects[f.Limit-1].Key
			return rows, nil
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
			if d.bytewiseKeys {
				add("unit_key >= ? AND unit_key < ?", f.Prefix, f.Prefix+prefixEnd)
			}
		}
		if f.State != "" {
			add("state = ?", f.State)
		}
		if afterJob != "" || afterUnit != "" {
			add("(job > ? OR job = ? AND unit_key > ?)", afterJob, afterJob, afterUnit)
		}
		if rows.Units, err = d.units(ctx, where, args, fetch(len(rows.Effects)), false); err != nil {
			return nil, err
		}
		if room := f.Limit - len(rows.Effects); f.Limit > 0 && len(rows.Units) > room {
			rows.Units = rows.Units[:room]
			if room > 0 {
				last := rows.Units[room-1]
				rows.Next = unitCursor + last.Job + ":" + last.Key
			} else {
				rows.Next = effectCursor + rows.Effects[len(rows.Effects)-1].Key
			}
		}
	}
	return rows, nil
}

// listEffects reads List's effects of one job ("" for every job) after a
// key, at most limit (0: all).
func (d *DB) listEffects(ctx context.Context, f Filter, job, afterEffect string, limit int) ([]Effect, error) {
	where, args := []string{}, []any{}
	add := func(cond string, a ...any) { where = append(where, cond); args = append(args, a...) }
	if job != "" {
		add("job = ?", job)
	}
	if f.Effect != "" {
		add("effect = ?", f.Effect)
	}
	if f.Prefix != "" {
		add("substr(effect_key, 1, ?) = ?", utf8.RuneCountInString(f.Prefix), f.Prefix)
		if d.bytewiseKeys {
			add("effect_key >= ? AND effect_key < ?", f.Prefix, f.Prefix+prefixEnd)
		}
	}
	if afterEffect != "" {
		add("effect_key > ?", afterEffect)
	}
	switch now := d.now(); f.State {
	case EffectPending:
		add("state = 'pending' AND (lease_until IS NULL OR lease_until <= ?)", d.at(now))
	case EffectLeased:
		add("state = 'pending' AND lease_until > ?", d.at(now))
	case EffectDone:
		add("state = 'done'")
	case EffectParked:
		add("state = '" + idemrt.StoredParked + "'")
	}
	return d.effects(ctx, where, args, limit, false)
}

// Show returns every row under key, with payloads: the ledger row whose
// effect key it is, and the parked-table row and handed-in key record
// whose unit key it is. A job narrows it to that job's rows.
func (d *DB) Show(ctx context.Context, key, job string) (*Rows, error) {
	return d.underKey(ctx, key, job)
}

// underKey reads the rows under key, of job if given.
func (d *DB) underKey(ctx context.Context, key, job string) (*Rows, error) {
	rows := &Rows{Units: []Unit{}, HandedIn: []HandedIn{}}
	effWhere, effArgs := []string{"effect_key = ?"}, []any{key}
	if job != "" {
		effWhere, effArgs = append(effWhere, "job = ?"), append(effArgs, job)
	}
	var err error
	if rows.Effects, err = d.effects(ctx, effWhere, effArgs, 0, true); err != nil {
		return nil, err
	}
	// The parked table and the key records are keyed on (job, unit_key): a
	// unit key is looked up in each job, never by a scan.
	err = d.eachJob(ctx, d.t.Parked, job, func(job string) error {
		units, err := d.units(ctx, []string{"job = ?", "unit_key = ?"}, []any{job, key}, 0, true)
		rows.Units = append(rows.Units, units...)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = d.eachJob(ctx, d.t.Seen, job, func(job string) error {
		seen, err := d.handedIn(ctx, []string{"job = ?", "unit_key = ?"}, []any{job, key})
		rows.HandedIn = append(rows.HandedIn, seen...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// eachJob calls f with job, or when job is "", with every job table holds
// rows of (jobsIn).
func (d *DB) eachJob(ctx context.Context, table, job string, f func(job string) error) error {
	jobs := []string{job}
	if job == "" {
		var err error
		if jobs, err = d.jobsIn(ctx, table); err != nil {
			return err
		}
	}
	for _, j := range jobs {
		if err := f(j); err != nil {
			return err
		}
	}
	return nil
}

func (d *DB) effects(ctx context.Context, where []string, args []any, limit int, payload bool) ([]Effect, error) {
	cols := "effect_key, job, effect, effect_version, job_version, unit_key, state, attempts, lease_owner, lease_until, result, last_error, created_at, updated_at, done_at"
	if d.retryCols {
		cols += ", next_attempt_at, parked_reason"
	}
	if payload {
		cols += ", payload"
	}
	query := "SELECT " + cols + " FROM " + d.t.Ledger + whereClause(where) + " ORDER BY effect_key" + limitClause(limit)
	rs, err := d.db.QueryContext(ctx, d.q(query), args...)
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
		var stored string
		dest := []any{&e.Key, &e.Job, &e.Effect, &e.EffectVersion, &e.JobVersion, &e.UnitKey, &stored, &e.Attempts,
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
		e.State = idemrt.ShownEffectState(idemrt.LedgerState(stored), idemrt.ValueOr(e.LeaseUntil), now)
		if fx := d.effect(e.Job, e.Effect); fx != nil {
			e.MaxAttempts = fx.MaxAttempts
			if fx.RedactPayload {
				e.Redacted = append(e.Redacted, "payload")
				if payload {
					e.Payload = redactedJSON
				}
			}
			if fx.RedactResult {
				e.Redacted, e.Result = append(e.Redacted, "result"), nil
			}
		}
		e.ProviderCalls = providerCalls(e)
		out = append(out, e)
	}
	return out, rs.Err()
}

func (d *DB) units(ctx context.Context, where []string, args []any, limit int, payload bool) ([]Unit, error) {
	cols := "job, unit_key, state, attempts, last_error, mark, job_version, first_failed_at, updated_at"
	if payload {
		cols += ", payload"
	}
	query := "SELECT " + cols + " FROM " + d.t.Parked + whereClause(where) + " ORDER BY job, unit_key" + limitClause(limit)
	rs, err := d.db.QueryContext(ctx, d.q(query), args...)
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
			u.MaxAttempts = j.UnitMaxAttempts
			// A unit's payload is what its effects' payloads are made of.
			if slices.ContainsFunc(j.Effects, func(e *EffectSpec) bool { return e.RedactPayload }) {
				u.PayloadRedacted = true
				if payload {
					u.Payload = redactedJSON
				}
			}
		}
		out = append(out, u)
	}
	return out, rs.Err()
}

func (d *DB) handedIn(ctx context.Context, where []string, args []any) ([]HandedIn, error) {
	query := "SELECT job, unit_key, job_version, first_seen FROM " + d.t.Seen + whereClause(where) + " ORDER BY job, unit_key"
	rs, err := d.db.QueryContext(ctx, d.q(query), args...)
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
var ErrNotFound = idem.ErrNothingUnderKey

// RefusedError is a write refused because of a row's state, such as an
// effect a worker holds under a live lease. Nothing was written.
type RefusedError = idem.RefusedError

// Change is one row a write changed or removed.
type Change = idem.Change

// Retry puts back what is parked under key (of job, if given), as the
// generated Store's Retry does: the runtime's idem.Retry, on this database.
// Logged.
func (d *DB) Retry(ctx context.Context, key, job string) ([]Change, error) {
	if err := d.canRecover(); err != nil {
		return nil, err
	}
	now, err := d.recoveryNow(ctx)
	if err != nil {
		return nil, err
	}
	changes, err := idem.Retry(ctx, d.st, job, key, now)
	if err != nil {
		return nil, err
	}
	d.logChanges("idemgen ledger: put back for retry", changes)
	return changes, nil
}

// RetryAllParked puts every parked effect and parked unit of job (of every
// job of the spec when job is "") back: the runtime's idem.RetryParked, as
// the generated Store's RetryParked does. One transaction; logged.
func (d *DB) RetryAllParked(ctx context.Context, job string) ([]Change, error) {
	if err := d.canRecover(); err != nil {
		return nil, err
	}
	jobs := []string{job}
	if job == "" {
		jobs = nil
		for _, j := range d.pkg.Jobs {
			jobs = append(jobs, j.Name)
		}
	}
	now, err := d.recoveryNow(ctx)
	if err != nil {
		return nil, err
	}
	changes, err := idem.RetryParked(ctx, d.st, now, jobs...)
	if err != nil {
		return nil, err
	}
	d.logChanges("idemgen ledger: put back for retry", changes)
	return changes, nil
}

// Reset forgets key on purpose (of job, if given): the runtime's
// idem.Forget, as the generated Store's Forget does. With dryRun it returns
// what it would remove and writes nothing. Logged.
func (d *DB) Reset(ctx context.Context, key, job string, dryRun bool) ([]Change, error) {
	if err := d.canRecover(); err != nil {
		return nil, err
	}
	now, err := d.recoveryNow(ctx)
	if err != nil {
		return nil, err
	}
	changes, err := idem.Forget(ctx, d.st, job, key, now, dryRun)
	if err != nil {
		return nil, err
	}
	if !dryRun {
		d.logChanges("idemgen ledger: reset: removed", changes)
	}
	return changes, nil
}

// recoveryNow is the time recovery compares leases on: the database's
// clock (idemrt.StoreNow), as the generated Store's Retry, RetryParked and
// Forget compare them, unless SetClock set one.
func (d *DB) recoveryNow(ctx context.Context) (time.Time, error) {
	if d.clockSet {
		return d.now(), nil
	}
	return idemrt.StoreNow(ctx, d.st)
}

// canRecover refuses a write on a database whose ledger predates the
// columns recovery sets: the runtime's statements name them.
func (d *DB) canRecover() error {
	if !d.retryCols {
		return fmt.Errorf("package %s: the ledger %s lacks the columns of a newer migration (next_attempt_at, parked_reason); apply the package's migrations (Store.Migrate) before changing rows", d.pkg.Name, d.t.Ledger)
	}
	return nil
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
