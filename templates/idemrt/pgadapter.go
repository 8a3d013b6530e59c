package idemrt

import (
	"time"

	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemgen/idemgen/templates/idemrt/internal/pgdb"
)

// pgStore runs the package's queries on PostgreSQL through pgx.
type pgStore struct{ pool *pgxpool.Pool }

func (s pgStore) inTx(ctx context.Context, fn func(q querier) error) error {
	return pgInTx(ctx, s.pool, func(tx pgx.Tx) error { return fn(pgQuerier{pgdb.New(tx)}) })
}

func (s pgStore) auto() querier { return pgQuerier{pgdb.New(s.pool)} }

// pgQuerier adapts the sqlc-generated PostgreSQL queries to the engine.
type pgQuerier struct{ q *pgdb.Queries }

func (q pgQuerier) progress(ctx context.Context, job string) (progressRow, error) {
	r, err := q.q.GetProgress(ctx, job)
	if pgNoRows(err) {
		return progressRow{}, nil
	}
	if err != nil {
		return progressRow{}, err
	}
	p := progressRow{found: true, position: r.CursorPosition}
	if r.Watermark != nil {
		p.watermark, p.hasMark = *r.Watermark, true
	}
	if r.CursorToken != nil {
		p.cursor = *r.CursorToken
	}
	return p, nil
}

func (q pgQuerier) saveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error {
	return q.q.SaveWatermark(ctx, pgdb.SaveWatermarkParams{Job: job, Watermark: &mark, JobVersion: jobVersion, UpdatedAt: now})
}

func (q pgQuerier) saveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error {
	return q.q.SaveCursor(ctx, pgdb.SaveCursorParams{Job: job, CursorToken: &cursor, CursorPosition: position, JobVersion: jobVersion, UpdatedAt: now})
}

func (q pgQuerier) see(ctx context.Context, job, unitKey string, hash []byte, jobVersion int32, now time.Time) ([]byte, bool, error) {
	_, err := q.q.SeeUnit(ctx, pgdb.SeeUnitParams{Job: job, UnitKey: unitKey, PayloadHash: hash, JobVersion: jobVersion, FirstSeen: now})
	if err == nil {
		return nil, true, nil
	}
	if !pgNoRows(err) {
		return nil, false, err
	}
	prev, err := q.q.SeenHash(ctx, pgdb.SeenHashParams{Job: job, UnitKey: unitKey})
	return prev, false, err
}

func (q pgQuerier) reserve(ctx context.Context, r ledgerRow, now time.Time) error {
	return q.q.ReserveEffect(ctx, pgdb.ReserveEffectParams{
		EffectKey: r.key, Job: r.job, Effect: r.effect, EffectVersion: r.effectVersion, JobVersion: r.jobVersion,
		UnitKey: r.unitKey, Payload: r.payload, CreatedAt: now, UpdatedAt: now,
	})
}

func (q pgQuerier) decided(ctx context.Context, job, effect, unitKey string, version int32) (bool, error) {
	n, err := q.q.CountDecided(ctx, pgdb.CountDecidedParams{Job: job, Effect: effect, UnitKey: unitKey, EffectVersion: version})
	return n > 0, err
}

func (q pgQuerier) claim(ctx context.Context, key, owner string, now, until time.Time) (bool, error) {
	n, err := q.q.ClaimEffect(ctx, pgdb.ClaimEffectParams{Owner: &owner, LeaseUntil: &until, UpdatedAt: now, EffectKey: key, Now: &now})
	return n == 1, err
}

func (q pgQuerier) complete(ctx context.Context, key, owner string, result []byte, now time.Time) (bool, error) {
	n, err := q.q.CompleteEffect(ctx, pgdb.CompleteEffectParams{Result: result, DoneAt: &now, UpdatedAt: now, EffectKey: key, Owner: &owner})
	return n == 1, err
}

func (q pgQuerier) release(ctx context.Context, key, owner, lastErr string, maxAttempts int32, park bool, now time.Time) (string, error) {
	state, err := q.q.ReleaseEffect(ctx, pgdb.ReleaseEffectParams{MaxAttempts: maxAttempts, Park: park, LastError: &lastErr, UpdatedAt: now, EffectKey: key, Owner: &owner})
	if pgNoRows(err) {
		return statePending, nil // the lease was taken over; the new holder decides
	}
	return state, err
}

func (q pgQuerier) effect(ctx context.Context, key string) (ledgerRow, bool, error) {
	r, err := q.q.GetEffect(ctx, key)
	if pgNoRows(err) {
		return ledgerRow{}, false, nil
	}
	if err != nil {
		return ledgerRow{}, false, err
	}
	row := ledgerRow{key: key, state: r.State, result: r.Result}
	if r.LastError != nil {
		row.lastError = *r.LastError
	}
	return row, true, nil
}

func (q pgQuerier) pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]ledgerRow, error) {
	rs, err := q.q.PendingEffects(ctx, pgdb.PendingEffectsParams{Job: job, Now: &now, After: after, RowLimit: limit})
	if err != nil {
		return nil, err
	}
	out := make([]ledgerRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, ledgerRow{key: r.EffectKey, job: job, effect: r.Effect, unitKey: r.UnitKey, payload: r.Payload, state: statePending})
	}
	return out, nil
}

func (q pgQuerier) purge(ctx context.Context, job, effect string, before time.Time) (int64, error) {
	return q.q.PurgeEffects(ctx, pgdb.PurgeEffectsParams{Job: job, Effect: effect, Before: &before})
}

func (q pgQuerier) ledger(ctx context.Context) ([]LedgerEntry, error) {
	rs, err := q.q.ListLedger(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LedgerEntry, 0, len(rs))
	for _, r := range rs {
		e := LedgerEntry{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, EffectVersion: int(r.EffectVersion),
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

func (q pgQuerier) unitFailure(ctx context.Context, job, unitKey string) (string, []byte, bool, error) {
	r, err := q.q.GetUnitFailure(ctx, pgdb.GetUnitFailureParams{Job: job, UnitKey: unitKey})
	if pgNoRows(err) {
		return "", nil, false, nil
	}
	return r.State, r.PayloadHash, err == nil, err
}

func (q pgQuerier) clearUnitFailure(ctx context.Context, job, unitKey string) error {
	return q.q.ClearUnitFailure(ctx, pgdb.ClearUnitFailureParams{Job: job, UnitKey: unitKey})
}

func (q pgQuerier) recordUnitFailure(ctx context.Context, f unitFailure, now time.Time) error {
	return q.q.RecordUnitFailure(ctx, pgdb.RecordUnitFailureParams{
		Job: f.job, UnitKey: f.unitKey, Payload: f.payload, PayloadHash: f.hash, LastError: f.lastError,
		Mark: f.mark, JobVersion: f.jobVersion, FirstFailedAt: now, UpdatedAt: now,
	})
}

func (q pgQuerier) settleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (string, int32, error) {
	r, err := q.q.SettleUnitFailure(ctx, pgdb.SettleUnitFailureParams{MaxAttempts: maxAttempts, Job: job, UnitKey: unitKey})
	return r.State, r.Attempts, err
}

func (q pgQuerier) retryingUnits(ctx context.Context, job, after string, limit int32) ([]unitFailure, error) {
	rs, err := q.q.RetryingUnits(ctx, pgdb.RetryingUnitsParams{Job: job, After: after, RowLimit: limit})
	out := make([]unitFailure, 0, len(rs))
	for _, r := range rs {
		out = append(out, unitFailure{job: job, unitKey: r.UnitKey, payload: r.Payload})
	}
	return out, err
}

func (q pgQuerier) unitFailures(ctx context.Context) ([]ParkedUnit, error) {
	rs, err := q.q.ListUnitFailures(ctx)
	out := make([]ParkedUnit, 0, len(rs))
	for _, r := range rs {
		out = append(out, ParkedUnit{Job: r.Job, Key: r.UnitKey, Payload: r.Payload, Attempts: int(r.Attempts),
			LastError: r.LastError, State: r.State, Mark: r.Mark, JobVersion: int(r.JobVersion),
			FirstFailedAt: r.FirstFailedAt, UpdatedAt: r.UpdatedAt})
	}
	return out, err
}

func (q pgQuerier) retryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error) {
	n, err := q.q.RetryUnit(ctx, pgdb.RetryUnitParams{UpdatedAt: now, Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q pgQuerier) retryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error) {
	return q.q.RetryParkedUnits(ctx, pgdb.RetryParkedUnitsParams{UpdatedAt: now, Job: job})
}
