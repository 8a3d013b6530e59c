package idemrt

import (
	"time"

	"github.com/idemgen/idemgen/idem"

	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/templates/idemrt/internal/pgdb"
)

// pgStore runs the package's queries on PostgreSQL through pgx.
type pgStore struct{ pool *pgxpool.Pool }

func (s pgStore) InTx(ctx context.Context, fn func(q idem.Querier) error) error {
	return idem.PgInTx(ctx, s.pool, func(tx pgx.Tx) error { return fn(newPgQuerier(tx)) })
}

func (s pgStore) Auto() idem.Querier { return newPgQuerier(s.pool) }

// WritesConcurrently tells the engine that a second batch transaction may
// write while the first is open (idem.WithWriteAhead).
func (pgStore) WritesConcurrently() bool { return true }

// DBNow reads the database's clock, which leases are compared on.
func (s pgStore) DBNow(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := s.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&now)
	return now, err
}

// Pool returns the pool the store runs on (River workers open their transactions on it).
func (s pgStore) Pool() *pgxpool.Pool { return s.pool }

// PgTx runs the queries in a transaction the caller owns (ProcessTx, a River worker).
func (s pgStore) PgTx(tx pgx.Tx) idem.Querier { return newPgQuerier(tx) }

// pgQuerier adapts the sqlc-generated PostgreSQL queries to the engine;
// db is what they run on, for the savepoint of a batch's first insert.
type pgQuerier struct {
	q  *pgdb.Queries
	db pgdb.DBTX
}

func newPgQuerier(db pgdb.DBTX) pgQuerier { return pgQuerier{pgdb.New(db), db} }

func (q pgQuerier) Progress(ctx context.Context, job string) (idem.ProgressRow, error) {
	r, err := q.q.GetProgress(ctx, job)
	if idem.PgNoRows(err) {
		return idem.ProgressRow{}, nil
	}
	if err != nil {
		return idem.ProgressRow{}, err
	}
	p := idem.ProgressRow{Found: true, Position: r.CursorPosition}
	if r.Watermark != nil {
		p.Watermark, p.HasMark = *r.Watermark, true
	}
	if r.CursorToken != nil {
		p.Cursor = *r.CursorToken
	}
	return p, nil
}

func (q pgQuerier) SaveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error {
	return q.q.SaveWatermark(ctx, pgdb.SaveWatermarkParams{Job: job, Watermark: &mark, JobVersion: jobVersion, UpdatedAt: now})
}

func (q pgQuerier) SaveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error {
	return q.q.SaveCursor(ctx, pgdb.SaveCursorParams{Job: job, CursorToken: &cursor, CursorPosition: position, JobVersion: jobVersion, UpdatedAt: now})
}

func (q pgQuerier) See(ctx context.Context, job string, unitKeys []string, hashes [][]byte, jobVersion int32, now time.Time) (map[string][]byte, error) {
	fresh, err := q.q.SeeUnits(ctx, pgdb.SeeUnitsParams{Job: job, UnitKeys: unitKeys, PayloadHashes: hashes, JobVersion: jobVersion, FirstSeen: now})
	if err != nil || len(fresh) == len(unitKeys) {
		return nil, err
	}
	rs, err := q.q.SeenHashes(ctx, pgdb.SeenHashesParams{Job: job, UnitKeys: unitKeys})
	if err != nil {
		return nil, err
	}
	seen := make(map[string][]byte, len(rs))
	for _, r := range rs {
		seen[r.UnitKey] = r.PayloadHash
	}
	for _, k := range fresh {
		delete(seen, k)
	}
	return seen, nil
}

func (q pgQuerier) Reserve(ctx context.Context, r idem.Reservations, now time.Time) error {
	return q.q.ReserveEffects(ctx, pgdb.ReserveEffectsParams{
		EffectKeys: r.Keys, Job: r.Job, Effect: r.Effect, EffectVersion: r.EffectVersion, JobVersion: r.JobVersion,
		UnitKeys: r.UnitKeys, Payloads: r.Payloads, Now: now,
	})
}

func (q pgQuerier) Decided(ctx context.Context, job, effect string, unitKeys []string, version int32) (map[string]bool, error) {
	ks, err := q.q.DecidedUnits(ctx, pgdb.DecidedUnitsParams{Job: job, Effect: effect, EffectVersion: version, UnitKeys: unitKeys})
	if err != nil || len(ks) == 0 {
		return nil, err
	}
	decided := make(map[string]bool, len(ks))
	for _, k := range ks {
		decided[k] = true
	}
	return decided, nil
}

func (q pgQuerier) ClaimMany(ctx context.Context, keys []string, owner string, now, until time.Time) (map[string]bool, error) {
	ks, err := q.q.ClaimEffects(ctx, pgdb.ClaimEffectsParams{Owner: &owner, LeaseUntil: &until, Now: now, EffectKeys: keys})
	return keySet(ks), err
}

func (q pgQuerier) CompleteMany(ctx context.Context, keys []string, results [][]byte, owner string, now time.Time) (map[string]bool, error) {
	ks, err := q.q.CompleteEffects(ctx, pgdb.CompleteEffectsParams{Now: &now, EffectKeys: keys, Results: results, Owner: &owner})
	return keySet(ks), err
}

func keySet(keys []string) map[string]bool {
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set
}

func (q pgQuerier) Release(ctx context.Context, key, owner, lastErr string, maxAttempts int32, park bool, now time.Time) (string, error) {
	state, err := q.q.ReleaseEffect(ctx, pgdb.ReleaseEffectParams{MaxAttempts: maxAttempts, Park: park, LastError: &lastErr, UpdatedAt: now, EffectKey: key, Owner: &owner})
	if idem.PgNoRows(err) {
		return idem.StatePending, nil // the lease was taken over; the new holder decides
	}
	return state, err
}

func (q pgQuerier) Effect(ctx context.Context, key string) (idem.LedgerRow, bool, error) {
	r, err := q.q.GetEffect(ctx, key)
	if idem.PgNoRows(err) {
		return idem.LedgerRow{}, false, nil
	}
	if err != nil {
		return idem.LedgerRow{}, false, err
	}
	row := idem.LedgerRow{Key: key, State: r.State, Result: r.Result}
	if r.LastError != nil {
		row.LastError = *r.LastError
	}
	return row, true, nil
}

func (q pgQuerier) Effects(ctx context.Context, keys []string) (map[string]idem.LedgerRow, error) {
	rs, err := q.q.GetEffects(ctx, keys)
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	found := make(map[string]idem.LedgerRow, len(rs))
	for _, r := range rs {
		row := idem.LedgerRow{Key: r.EffectKey, State: r.State, Result: r.Result}
		if r.LastError != nil {
			row.LastError = *r.LastError
		}
		found[r.EffectKey] = row
	}
	return found, nil
}

func (q pgQuerier) Pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]idem.LedgerRow, error) {
	rs, err := q.q.PendingEffects(ctx, pgdb.PendingEffectsParams{Job: job, Now: &now, After: after, RowLimit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]idem.LedgerRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.LedgerRow{Key: r.EffectKey, Job: job, Effect: r.Effect, UnitKey: r.UnitKey, Payload: r.Payload, State: idem.StatePending})
	}
	return out, nil
}

func (q pgQuerier) Purge(ctx context.Context, job, effect string, before time.Time) (int64, error) {
	return q.q.PurgeEffects(ctx, pgdb.PurgeEffectsParams{Job: job, Effect: effect, Before: &before})
}

func (q pgQuerier) PurgeSeen(ctx context.Context, job string, before time.Time) (int64, error) {
	return q.q.PurgeSeen(ctx, pgdb.PurgeSeenParams{Job: job, Before: before})
}

func (q pgQuerier) Ledger(ctx context.Context) ([]idem.LedgerEntry, error) {
	rs, err := q.q.ListLedger(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]idem.LedgerEntry, 0, len(rs))
	for _, r := range rs {
		e := idem.LedgerEntry{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, EffectVersion: int(r.EffectVersion),
			UnitKey: r.UnitKey, State: r.State, Attempts: int(r.Attempts), Result: r.Result}
		if r.LeaseOwner != nil {
			e.LeaseOwner = *r.LeaseOwner
		}
		if r.LastError != nil {
			e.LastError = *r.LastError
		}
		out = append(out, e)
	}
	return out, nil
}

func (q pgQuerier) LookupUnitFailure(ctx context.Context, job, unitKey string) (string, []byte, bool, error) {
	r, err := q.q.GetUnitFailure(ctx, pgdb.GetUnitFailureParams{Job: job, UnitKey: unitKey})
	if idem.PgNoRows(err) {
		return "", nil, false, nil
	}
	return r.State, r.PayloadHash, err == nil, err
}

func (q pgQuerier) LookupUnitFailures(ctx context.Context, job string, unitKeys []string) (map[string]idem.UnitFailureState, error) {
	if some, err := q.q.HasUnitFailures(ctx, job); err != nil || !some {
		return nil, err
	}
	rs, err := q.q.LookupUnitFailures(ctx, pgdb.LookupUnitFailuresParams{Job: job, UnitKeys: unitKeys})
	if err != nil || len(rs) == 0 {
		return nil, err
	}
	found := make(map[string]idem.UnitFailureState, len(rs))
	for _, r := range rs {
		found[r.UnitKey] = idem.UnitFailureState{State: r.State, Hash: r.PayloadHash}
	}
	return found, nil
}

func (q pgQuerier) ClearUnitFailure(ctx context.Context, job, unitKey string) error {
	return q.q.ClearUnitFailure(ctx, pgdb.ClearUnitFailureParams{Job: job, UnitKey: unitKey})
}

func (q pgQuerier) RecordUnitFailure(ctx context.Context, f idem.UnitFailure, now time.Time) error {
	return q.q.RecordUnitFailure(ctx, pgdb.RecordUnitFailureParams{
		Job: f.Job, UnitKey: f.UnitKey, Payload: f.Payload, PayloadHash: f.Hash, LastError: f.LastError,
		Mark: f.Mark, JobVersion: f.JobVersion, FirstFailedAt: now, UpdatedAt: now,
	})
}

func (q pgQuerier) SettleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (string, int32, error) {
	r, err := q.q.SettleUnitFailure(ctx, pgdb.SettleUnitFailureParams{MaxAttempts: maxAttempts, Job: job, UnitKey: unitKey})
	return r.State, r.Attempts, err
}

func (q pgQuerier) RetryingUnits(ctx context.Context, job, after string, limit int32) ([]idem.UnitFailure, error) {
	rs, err := q.q.RetryingUnits(ctx, pgdb.RetryingUnitsParams{Job: job, After: after, RowLimit: limit})
	out := make([]idem.UnitFailure, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.UnitFailure{Job: job, UnitKey: r.UnitKey, Payload: r.Payload})
	}
	return out, err
}

func (q pgQuerier) UnitFailures(ctx context.Context) ([]idem.ParkedUnit, error) {
	rs, err := q.q.ListUnitFailures(ctx)
	out := make([]idem.ParkedUnit, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.ParkedUnit{Job: r.Job, Key: r.UnitKey, Payload: r.Payload, Attempts: int(r.Attempts),
			LastError: r.LastError, State: r.State, Mark: r.Mark, JobVersion: int(r.JobVersion),
			FirstFailedAt: r.FirstFailedAt, UpdatedAt: r.UpdatedAt})
	}
	return out, err
}

func (q pgQuerier) RetryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error) {
	n, err := q.q.RetryUnit(ctx, pgdb.RetryUnitParams{UpdatedAt: now, Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q pgQuerier) RetryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error) {
	return q.q.RetryParkedUnits(ctx, pgdb.RetryParkedUnitsParams{UpdatedAt: now, Job: job})
}

// Backlog counts job's owed effects, parked effects and parked units, for
// an observer's gauge (idem.WithObserver).
func (q pgQuerier) Backlog(ctx context.Context, job string) (owedEffects, parkedEffects, parkedUnits int64, err error) {
	r, err := q.q.CountBacklog(ctx, job)
	return r.OwedEffects, r.ParkedEffects, r.ParkedUnits, err
}
