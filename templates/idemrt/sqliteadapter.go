package idemrt

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemgen/idemgen/idem"

	"github.com/idemgen/idemgen/templates/idemrt/internal/sqlitedb"
)

// sqliteStore runs the package's queries on SQLite through database/sql.
type sqliteStore struct{ db *sql.DB }

func (s sqliteStore) InTx(ctx context.Context, fn func(q idem.Querier) error) error {
	return idem.SQLiteInTx(ctx, s.db, func(tx *idem.SQLiteStatements) error { return fn(sqliteQuerier{sqlitedb.New(tx)}) })
}

func (s sqliteStore) Auto() idem.Querier {
	return sqliteQuerier{sqlitedb.New(idem.SQLiteAuto{DB: s.db})}
}

// DBNow reads the database's clock, which leases are compared on: on SQLite
// the clock of the machine that holds the file, whatever a job's WithClock says.
func (s sqliteStore) DBNow(ctx context.Context) (time.Time, error) {
	var now string
	if err := s.db.QueryRowContext(ctx, "SELECT strftime('%Y-%m-%dT%H:%M:%fZ', 'now')").Scan(&now); err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339Nano, now)
}

// SQLTx runs the queries in a transaction the caller owns (ProcessSQLTx);
// the statements it prepares close when that transaction ends.
func (s sqliteStore) SQLTx(tx *sql.Tx) idem.Querier {
	return sqliteQuerier{sqlitedb.New(idem.NewSQLiteStatements(tx))}
}

// sqliteQuerier adapts the sqlc-generated SQLite queries to the engine.
// Times travel as fixed-width UTC text (sqliteTime).
type sqliteQuerier struct{ q *sqlitedb.Queries }

func nullText(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }

func nullTime(t time.Time) sql.NullString { return nullText(idem.SQLiteTime(t)) }

func (q sqliteQuerier) Progress(ctx context.Context, job string) (idem.ProgressRow, error) {
	r, err := q.q.GetProgress(ctx, job)
	if idem.SQLiteNoRows(err) {
		return idem.ProgressRow{}, nil
	}
	if err != nil {
		return idem.ProgressRow{}, err
	}
	p := idem.ProgressRow{Found: true, Position: r.CursorPosition, Cursor: r.CursorToken.String}
	if r.Watermark.Valid {
		if p.Watermark, err = idem.ParseSQLiteTime(r.Watermark.String); err != nil {
			return idem.ProgressRow{}, err
		}
		p.HasMark = true
	}
	return p, nil
}

func (q sqliteQuerier) SaveWatermark(ctx context.Context, job string, mark time.Time, jobVersion int32, now time.Time) error {
	return q.q.SaveWatermark(ctx, sqlitedb.SaveWatermarkParams{Job: job, Watermark: nullTime(mark), JobVersion: int64(jobVersion), UpdatedAt: idem.SQLiteTime(now)})
}

func (q sqliteQuerier) SaveCursor(ctx context.Context, job, cursor string, position int64, jobVersion int32, now time.Time) error {
	return q.q.SaveCursor(ctx, sqlitedb.SaveCursorParams{Job: job, CursorToken: nullText(cursor), CursorPosition: position, JobVersion: int64(jobVersion), UpdatedAt: idem.SQLiteTime(now)})
}

// The batch methods run the single queries one by one: SQLite is in
// process, so a statement costs no round trip, only its execution.

func (q sqliteQuerier) See(ctx context.Context, job string, unitKeys []string, hashes [][]byte, jobVersion int32, now time.Time) (map[string][]byte, error) {
	var seen map[string][]byte
	for i, k := range unitKeys {
		_, err := q.q.SeeUnit(ctx, sqlitedb.SeeUnitParams{Job: job, UnitKey: k, PayloadHash: hashes[i], JobVersion: int64(jobVersion), FirstSeen: idem.SQLiteTime(now)})
		if err == nil {
			continue
		}
		if !idem.SQLiteNoRows(err) {
			return nil, err
		}
		prev, err := q.q.SeenHash(ctx, sqlitedb.SeenHashParams{Job: job, UnitKey: k})
		if err != nil {
			return nil, err
		}
		if seen == nil {
			seen = map[string][]byte{}
		}
		seen[k] = prev
	}
	return seen, nil
}

func (q sqliteQuerier) Reserve(ctx context.Context, r idem.Reservations, now time.Time) error {
	for i, k := range r.Keys {
		err := q.q.ReserveEffect(ctx, sqlitedb.ReserveEffectParams{
			EffectKey: k, Job: r.Job, Effect: r.Effect, EffectVersion: int64(r.EffectVersion), JobVersion: int64(r.JobVersion),
			UnitKey: r.UnitKeys[i], Payload: r.Payloads[i], CreatedAt: idem.SQLiteTime(now), UpdatedAt: idem.SQLiteTime(now),
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (q sqliteQuerier) Decided(ctx context.Context, job, effect string, unitKeys []string, version int32) (map[string]bool, error) {
	var decided map[string]bool
	for _, k := range unitKeys {
		n, err := q.q.CountDecided(ctx, sqlitedb.CountDecidedParams{Job: job, Effect: effect, UnitKey: k, EffectVersion: int64(version)})
		if err != nil {
			return nil, err
		}
		if n > 0 {
			if decided == nil {
				decided = map[string]bool{}
			}
			decided[k] = true
		}
	}
	return decided, nil
}

func (q sqliteQuerier) claim(ctx context.Context, key, owner string, now, until time.Time) (bool, error) {
	n, err := q.q.ClaimEffect(ctx, sqlitedb.ClaimEffectParams{Owner: nullText(owner), LeaseUntil: nullTime(until), UpdatedAt: idem.SQLiteTime(now), EffectKey: key, Now: nullTime(now)})
	return n == 1, err
}

func (q sqliteQuerier) complete(ctx context.Context, key, owner string, result []byte, now time.Time) (bool, error) {
	n, err := q.q.CompleteEffect(ctx, sqlitedb.CompleteEffectParams{Result: result, DoneAt: nullTime(now), UpdatedAt: idem.SQLiteTime(now), EffectKey: key, Owner: nullText(owner)})
	return n == 1, err
}

func (q sqliteQuerier) ClaimMany(ctx context.Context, keys []string, owner string, now, until time.Time) (map[string]bool, error) {
	claimed := make(map[string]bool, len(keys))
	for _, k := range keys {
		ok, err := q.claim(ctx, k, owner, now, until)
		if err != nil {
			return nil, err
		}
		claimed[k] = ok
	}
	return claimed, nil
}

func (q sqliteQuerier) CompleteMany(ctx context.Context, keys []string, results [][]byte, owner string, now time.Time) (map[string]bool, error) {
	done := make(map[string]bool, len(keys))
	for i, k := range keys {
		ok, err := q.complete(ctx, k, owner, results[i], now)
		if err != nil {
			return nil, err
		}
		done[k] = ok
	}
	return done, nil
}

func (q sqliteQuerier) Release(ctx context.Context, key, owner, lastErr string, maxAttempts int32, park bool, now time.Time) (string, error) {
	state, err := q.q.ReleaseEffect(ctx, sqlitedb.ReleaseEffectParams{MaxAttempts: int64(maxAttempts), Park: park, LastError: nullText(lastErr), UpdatedAt: idem.SQLiteTime(now), EffectKey: key, Owner: nullText(owner)})
	if idem.SQLiteNoRows(err) {
		return idem.StatePending, nil // the lease was taken over; the new holder decides
	}
	return state, err
}

func (q sqliteQuerier) Effect(ctx context.Context, key string) (idem.LedgerRow, bool, error) {
	r, err := q.q.GetEffect(ctx, key)
	if idem.SQLiteNoRows(err) {
		return idem.LedgerRow{}, false, nil
	}
	if err != nil {
		return idem.LedgerRow{}, false, err
	}
	return idem.LedgerRow{Key: key, State: r.State, Result: r.Result, LastError: r.LastError.String}, true, nil
}

func (q sqliteQuerier) Effects(ctx context.Context, keys []string) (map[string]idem.LedgerRow, error) {
	var found map[string]idem.LedgerRow
	for _, k := range keys {
		row, ok, err := q.Effect(ctx, k)
		if err != nil {
			return nil, err
		}
		if ok {
			if found == nil {
				found = map[string]idem.LedgerRow{}
			}
			found[k] = row
		}
	}
	return found, nil
}

func (q sqliteQuerier) Pending(ctx context.Context, job string, now time.Time, after string, limit int32) ([]idem.LedgerRow, error) {
	rs, err := q.q.PendingEffects(ctx, sqlitedb.PendingEffectsParams{Job: job, Now: nullTime(now), After: after, RowLimit: int64(limit)})
	if err != nil {
		return nil, err
	}
	out := make([]idem.LedgerRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.LedgerRow{Key: r.EffectKey, Job: job, Effect: r.Effect, UnitKey: r.UnitKey, Payload: r.Payload, State: idem.StatePending})
	}
	return out, nil
}

func (q sqliteQuerier) Purge(ctx context.Context, job, effect string, before time.Time) (int64, error) {
	return q.q.PurgeEffects(ctx, sqlitedb.PurgeEffectsParams{Job: job, Effect: effect, Before: nullTime(before)})
}

func (q sqliteQuerier) PurgeSeen(ctx context.Context, job string, before time.Time) (int64, error) {
	return q.q.PurgeSeen(ctx, sqlitedb.PurgeSeenParams{Job: job, Before: idem.SQLiteTime(before)})
}

func (q sqliteQuerier) Ledger(ctx context.Context) ([]idem.LedgerEntry, error) {
	rs, err := q.q.ListLedger(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]idem.LedgerEntry, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.LedgerEntry{Key: r.EffectKey, Job: r.Job, Effect: r.Effect, EffectVersion: int(r.EffectVersion),
			UnitKey: r.UnitKey, State: r.State, Attempts: int(r.Attempts), Result: r.Result,
			LeaseOwner: r.LeaseOwner.String, LastError: r.LastError.String})
	}
	return out, nil
}

func (q sqliteQuerier) LookupUnitFailure(ctx context.Context, job, unitKey string) (string, []byte, bool, error) {
	r, err := q.q.GetUnitFailure(ctx, sqlitedb.GetUnitFailureParams{Job: job, UnitKey: unitKey})
	if idem.SQLiteNoRows(err) {
		return "", nil, false, nil
	}
	return r.State, r.PayloadHash, err == nil, err
}

func (q sqliteQuerier) LookupUnitFailures(ctx context.Context, job string, unitKeys []string) (map[string]idem.UnitFailureState, error) {
	if some, err := q.q.HasUnitFailures(ctx, job); err != nil || !some {
		return nil, err
	}
	var found map[string]idem.UnitFailureState
	for _, k := range unitKeys {
		state, hash, ok, err := q.LookupUnitFailure(ctx, job, k)
		if err != nil {
			return nil, err
		}
		if ok {
			if found == nil {
				found = map[string]idem.UnitFailureState{}
			}
			found[k] = idem.UnitFailureState{State: state, Hash: hash}
		}
	}
	return found, nil
}

func (q sqliteQuerier) ClearUnitFailure(ctx context.Context, job, unitKey string) error {
	return q.q.ClearUnitFailure(ctx, sqlitedb.ClearUnitFailureParams{Job: job, UnitKey: unitKey})
}

func (q sqliteQuerier) RecordUnitFailure(ctx context.Context, f idem.UnitFailure, now time.Time) error {
	return q.q.RecordUnitFailure(ctx, sqlitedb.RecordUnitFailureParams{
		Job: f.Job, UnitKey: f.UnitKey, Payload: f.Payload, PayloadHash: f.Hash, LastError: f.LastError,
		Mark: idem.SQLNullTime(f.Mark), JobVersion: int64(f.JobVersion), FirstFailedAt: idem.SQLiteTime(now), UpdatedAt: idem.SQLiteTime(now),
	})
}

func (q sqliteQuerier) SettleUnitFailure(ctx context.Context, job, unitKey string, maxAttempts int32) (string, int32, error) {
	r, err := q.q.SettleUnitFailure(ctx, sqlitedb.SettleUnitFailureParams{MaxAttempts: int64(maxAttempts), Job: job, UnitKey: unitKey})
	return r.State, int32(r.Attempts), err
}

func (q sqliteQuerier) RetryingUnits(ctx context.Context, job, after string, limit int32) ([]idem.UnitFailure, error) {
	rs, err := q.q.RetryingUnits(ctx, sqlitedb.RetryingUnitsParams{Job: job, After: after, RowLimit: int64(limit)})
	out := make([]idem.UnitFailure, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.UnitFailure{Job: job, UnitKey: r.UnitKey, Payload: r.Payload})
	}
	return out, err
}

func (q sqliteQuerier) UnitFailures(ctx context.Context) ([]idem.ParkedUnit, error) {
	rs, err := q.q.ListUnitFailures(ctx)
	out := make([]idem.ParkedUnit, 0, len(rs))
	for _, r := range rs {
		out = append(out, idem.ParkedUnit{Job: r.Job, Key: r.UnitKey, Payload: r.Payload, Attempts: int(r.Attempts),
			LastError: r.LastError, State: r.State, Mark: idem.ReadNullTime(r.Mark, &err), JobVersion: int(r.JobVersion),
			FirstFailedAt: idem.ReadTime(r.FirstFailedAt, &err), UpdatedAt: idem.ReadTime(r.UpdatedAt, &err)})
	}
	return out, err
}

func (q sqliteQuerier) RetryUnit(ctx context.Context, job, unitKey string, now time.Time) (bool, error) {
	n, err := q.q.RetryUnit(ctx, sqlitedb.RetryUnitParams{UpdatedAt: idem.SQLiteTime(now), Job: job, UnitKey: unitKey})
	return n == 1, err
}

func (q sqliteQuerier) RetryParkedUnits(ctx context.Context, job string, now time.Time) (int64, error) {
	return q.q.RetryParkedUnits(ctx, sqlitedb.RetryParkedUnitsParams{UpdatedAt: idem.SQLiteTime(now), Job: job})
}

// Backlog counts job's owed effects, parked effects and parked units, for
// an observer's gauge (idem.WithObserver).
func (q sqliteQuerier) Backlog(ctx context.Context, job string) (owedEffects, parkedEffects, parkedUnits int64, err error) {
	r, err := q.q.CountBacklog(ctx, job)
	return r.OwedEffects, r.ParkedEffects, r.ParkedUnits, err
}
