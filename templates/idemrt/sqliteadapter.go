package idemrt

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemgen/idemgen/templates/idemrt/internal/sqlitedb"
)

// sqliteStore runs the package's queries on SQLite through database/sql.
type sqliteStore struct{ db *sql.DB }

func (s sqliteStore) inTx(ctx context.Context, fn func(q querier) error) error {
	return sqliteInTx(ctx, s.db, func(conn *sql.Conn) error { return fn(sqliteQuerier{sqlitedb.New(conn)}) })
}

func (s sqliteStore) auto() querier { return sqliteQuerier{sqlitedb.New(s.db)} }

// sqliteQuerier adapts the sqlc-generated SQLite queries to the engine.
// Times travel as fixed-width UTC text (sqliteTime).
type sqliteQuerier struct{ q *sqlitedb.Queries }

func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

func nullTime(t time.Time) sql.NullString { return nullText(sqliteTime(t)) }

func (q sqliteQuerier) progress(ctx context.Context, job string) (progressRow, error) {
	r, err := q.q.GetProgress(ctx, job)
	if sqliteNoRows(err) {
		return progressRow{}, nil
	}
	if err != nil {
		return progressRow{}, err
	}
	p := progressRow{found: true, position: r.CursorPosition, cursor: r.CursorToken.String}
	if r.Watermark.Valid {
		if p.watermark, err = parseSQLiteTime(r.Watermark.String); err != nil {
			return progressRow{}, err
		}
		p.hasMark = true
	}
	return p, nil
}

func (q sqliteQuerier) saveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error {
	return q.q.SaveWatermark(ctx, sqlitedb.SaveWatermarkParams{Job: job, Watermark: nullTime(mark), JobVersion: int64(jobVersion), UpdatedAt: sqliteTime(now)})
}

func (q sqliteQuerier) saveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error {
	return q.q.SaveCursor(ctx, sqlitedb.SaveCursorParams{Job: job, CursorToken: nullText(cursor), CursorPosition: position, JobVersion: int64(jobVersion), UpdatedAt: sqliteTime(now)})
}

func (q sqliteQuerier) see(ctx context.Context, job, unitKey string, hash []byte, jobVersion int32, now time.Time) ([]byte, bool, error) {
	_, err := q.q.SeeUnit(ctx, sqlitedb.SeeUnitParams{Job: job, UnitKey: unitKey, PayloadHash: hash, JobVersion: int64(jobVersion), FirstSeen: sqliteTime(now)})
	if err == nil {
		return nil, true, nil
	}
	if !sqliteNoRows(err) {
		return nil, false, err
	}
	prev, err := q.q.SeenHash(ctx, sqlitedb.SeenHashParams{Job: job, UnitKey: unitKey})
	return prev, false, err
}

func (q sqliteQuerier) reserve(ctx context.Context, r ledgerRow, now time.Time) error {
	return q.q.ReserveEffect(ctx, sqlitedb.ReserveEffectParams{
		EffectKey: r.key, Job: r.job, Effect: r.effect, EffectVersion: int64(r.effectVersion), JobVersion: int64(r.jobVersion),
		UnitKey: r.unitKey, Payload: r.payload, CreatedAt: sqliteTime(now), UpdatedAt: sqliteTime(now),
	})
}

func (q sqliteQuerier) decided(ctx context.Context, job, effect, unitKey string, version int32) (bool, error) {
	n, err := q.q.CountDecided(ctx, sqlitedb.CountDecidedParams{Job: job, Effect: effect, UnitKey: unitKey, EffectVersion: int64(version)})
	return n > 0, err
}

func (q sqliteQuerier) claim(ctx context.Context, key, owner string, now, until time.Time) (bool, error) {
	n, err := q.q.ClaimEffect(ctx, sqlitedb.ClaimEffectParams{Owner: nullText(owner), LeaseUntil: nullTime(until), UpdatedAt: sqliteTime(now), EffectKey: key, Now: nullTime(now)})
	return n == 1, err
}

func (q sqliteQuerier) complete(ctx context.Context, key, owner string, result []byte, now time.Time) (bool, error) {
	n, err := q.q.CompleteEffect(ctx, sqlitedb.CompleteEffectParams{Result: result, DoneAt: nullTime(now), UpdatedAt: sqliteTime(now), EffectKey: key, Owner: nullText(owner)})
	return n == 1, err
}

func (q sqliteQuerier) release(ctx context.Context, key, owner, lastErr string, maxAttempts int32, park bool, now time.Time) (string, error) {
	state, err := q.q.ReleaseEffect(ctx, sqlitedb.ReleaseEffectParams{MaxAttempts: int64(maxAttempts), Park: park, LastError: nullText(lastErr), UpdatedAt: sqliteTime(now), EffectKey: key, Owner: nullText(owner)})
	if sqliteNoRows(err) {
		return statePending, nil // the lease was taken over; the new holder decides
	}
	return state, err
}

func (q sqliteQuerier) effect(ctx context.Context, key string) (ledgerRow, bool, error) {
	r, err := q.q.GetEffect(ctx, key)
	if sqliteNoRows(err) {
		return ledgerRow{}, false, nil
	}
	if err != nil {
		return ledgerRow{}, false, err
	}
	return ledgerRow{key: key, state: r.State, result: r.Result, lastError: r.LastError.String}, true, nil
}

func (q sqliteQuerier) pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]ledgerRow, error) {
	rs, err := q.q.PendingEffects(ctx, sqlitedb.PendingEffectsParams{Job: job, Now: nullTime(now), After: after, RowLimit: int64(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]ledgerRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, ledgerRow{key: r.EffectKey, job: job, effect: r.Effect, unitKey: r.UnitKey, payload: r.Payload, state: statePending})
	}
	return out, nil
}

func (q sqliteQuerier) purge(ctx context.Context, job, effect string, before time.Time) (int64, error) {
	return q.q.PurgeEffects(ctx, sqlitedb.PurgeEffectsParams{Job: job, Effect: effect, Before: nullTime(before)})
}

func (q sqliteQuerier) ledger(ctx context.Context) ([]LedgerEntry, error) {
	rs, err := q.q.ListLedger(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]LedgerEntry, 0, len(rs))
	for _, r := range rs {
		out = append(out, LedgerEntry{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, EffectVersion: int(r.EffectVersion),
			UnitKey: r.UnitKey, State: r.State, Attempts: int(r.Attempts), Result: r.Result,
			LeaseOwner: r.LeaseOwner.String, LastError: r.LastError.String})
	}
	return out, nil
}

func (q sqliteQuerier) unitFailure(ctx context.Context, job, unitKey string) (string, []byte, bool, error) {
	r, err := q.q.GetUnitFailure(ctx, sqlitedb.GetUnitFailureParams{Job: job, UnitKey: unitKey})
	if sqliteNoRows(err) {
		return "", nil, false, nil
	}
	return r.State, r.PayloadHash, err == nil, err
}

func (q sqliteQuerier) clearUnitFailure(ctx context.Context, job, unitKey string) error {
	return q.q.ClearUnitFailure(ctx, sqlitedb.ClearUnitFailureParams{Job: job, UnitKey: unitKey})
}

func (q sqliteQuerier) recordUnitFailure(ctx context.Context, f unitFailure, now time.Time) error {
	return q.q.RecordUnitFailure(ctx, sqlitedb.RecordUnitFailureParams{
		Job: f.job, UnitKey: f.unitKey, Payload: f.payload, PayloadHash: f.hash, LastError: f.lastError,
		Mark: sqlNullTime(f.mark), JobVersion: int64(f.jobVersion), FirstFailedAt: sqliteTime(now), UpdatedAt: sqliteTime(now),
	})
}

func (q sqliteQuerier) settleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (string, int32, error) {
	r, err := q.q.SettleUnitFailure(ctx, sqlitedb.SettleUnitFailureParams{MaxAttempts: int64(maxAttempts), Job: job, UnitKey: unitKey})
	return r.State, int32(r.Attempts), err
}

func (q sqliteQuerier) retryingUnits(ctx context.Context, job, after string, limit int32) ([]unitFailure, error) {
	rs, err := q.q.RetryingUnits(ctx, sqlitedb.RetryingUnitsParams{Job: job, After: after, RowLimit: int64(limit)})
	out := make([]unitFailure, 0, len(rs))
	for _, r := range rs {
		out = append(out, unitFailure{job: job, unitKey: r.UnitKey, payload: r.Payload})
	}
	return out, err
}

func (q sqliteQuerier) unitFailures(ctx context.Context) ([]ParkedUnit, error) {
	rs, err := q.q.ListUnitFailures(ctx)
	out := make([]ParkedUnit, 0, len(rs))
	for _, r := range rs {
		out = append(out, ParkedUnit{Job: r.Job, Key: r.UnitKey, Payload: r.Payload, Attempts: int(r.Attempts),
			LastError: r.LastError, State: r.State, Mark: readNullTime(r.Mark, &err), JobVersion: int(r.JobVersion),
			FirstFailedAt: readTime(r.FirstFailedAt, &err), UpdatedAt: readTime(r.UpdatedAt, &err)})
	}
	return out, err
}

func (q sqliteQuerier) retryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error) {
	n, err := q.q.RetryUnit(ctx, sqlitedb.RetryUnitParams{UpdatedAt: sqliteTime(now), Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q sqliteQuerier) retryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error) {
	return q.q.RetryParkedUnits(ctx, sqlitedb.RetryParkedUnitsParams{UpdatedAt: sqliteTime(now), Job: job})
}
