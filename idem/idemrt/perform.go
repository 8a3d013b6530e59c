package idemrt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/idemgen/idemgen/idem/internal/hooks"
)

// perform runs one reserved effect this worker has claimed until
// leaseUntil (claimAll): call the provider with the key, and hand the
// result to rec, which records it with others (recorded ends it). A call
// that did not succeed ends here, with no completion. It is safe to run
// concurrently for distinct keys.
func (e *Engine[U]) perform(ctx context.Context, fx Effect[U], key string, u U, leaseUntil time.Time, rec *recorder, log *slog.Logger) (er EffectResult, cp *completion) {
	er = EffectResult{Effect: fx.Name, Key: key}
	log = log.With(slog.String("effect", fx.Name), slog.String("effect_key", key))
	start := time.Now()
	if obs := e.opt.observer; obs != nil {
		ctx = obs.CallStart(ctx, e.def.Name, fx.Name, key, e.def.KeyOf(u))
		defer func() {
			if cp == nil {
				obs.CallEnd(ctx, e.def.Name, er, time.Since(start))
			}
		}()
	}
	if err := e.hit(ctx, hooks.PointEffectClaimed, key); err != nil {
		return e.release(ctx, fx, key, err, log), nil
	}
	// A canceled run (a shutdown) starts no new call (notCalled).
	if ctx.Err() != nil {
		return notCalled(ctx, er, log), nil
	}
	// The effect's rate and concurrency across workers: wait for a slot
	// and a start (or give the claim back, not counted, when none comes
	// within the lease).
	free, gate, err := e.admit(ctx, fx, key, leaseUntil)
	if err != nil {
		if ctx.Err() != nil {
			return notCalled(ctx, er, log), nil
		}
		return e.release(ctx, fx, key, err, log), nil
	}
	defer free()
	// Fence: a worker that stalled past its lease may have been taken over;
	// the new holder performs the effect, this one must not call again.
	if now, err := e.leaseNow(ctx, nil); err != nil || !now.Before(leaseUntil) {
		er.Outcome, er.Err = EffectBusy, fmt.Errorf("effect %q key %q: %w: lease expired before the call", fx.Name, key, ErrBusy)
		log.Warn("idemgen: effect lease expired before the call; left to the worker that took it over")
		return er, nil
	}
	if err := e.hit(ctx, hooks.PointEffectBeforeCall, key); err != nil {
		return e.release(ctx, fx, key, err, log), nil
	}
	// The last look: the run may have been canceled while the call waited
	// for its slot, its start or the lease's clock.
	if ctx.Err() != nil {
		return notCalled(ctx, er, log), nil
	}
	result, callErr := e.call(ctx, fx, key, u)
	if err := e.hit(ctx, hooks.PointEffectAfterCall, key); err != nil && callErr == nil {
		callErr = err
	}
	if callErr != nil {
		return e.release(ctx, fx, key, e.gateFailed(ctx, fx, gate, callErr, log), log), nil
	}
	e.gateSucceeded(ctx, gate, log)
	if !fx.KeepResult {
		result = nil
	}
	cp = rec.submit(ctx, key, result)
	cp.ctx, cp.start, cp.log = ctx, start, log
	return er, cp
}

// call calls the provider, within the effect's timeout when it has one. A
// call past it is canceled and fails with ErrCallTimeout once the provider
// returns: the lease is held until then, so the key is never in flight
// twice (timeout is shorter than lease).
func (e *Engine[U]) call(ctx context.Context, fx Effect[U], key string, u U) ([]byte, error) {
	if fx.Timeout <= 0 {
		return fx.Call(ctx, key, u)
	}
	callCtx, cancel := context.WithTimeout(ctx, fx.Timeout)
	defer cancel()
	result, err := fx.Call(callCtx, key, u)
	if err != nil && ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w after %s; its outcome is unknown and it is retried with the same key: %w", ErrCallTimeout, fx.Timeout, err)
	}
	return result, err
}

// recorded ends a performed effect once its completion is written.
func (e *Engine[U]) recorded(fx Effect[U], key string, cp *completion) (er EffectResult) {
	<-cp.done
	ctx, log := cp.ctx, cp.log
	if obs := e.opt.observer; obs != nil {
		defer func() { obs.CallEnd(ctx, e.def.Name, er, time.Since(cp.start)) }()
	}
	er = EffectResult{Effect: fx.Name, Key: key}
	switch {
	case cp.err != nil:
		er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: record done: %w", fx.Name, key, ErrEffectFailed, cp.err)
		log.Warn("idemgen: effect performed but not recorded; it will be retried with the same key", slog.Any("err", cp.err))
		return er
	case !cp.ok:
		// Another worker took the lease over: the ledger, not this late
		// call, says how the effect ended (done with its result, parked, or
		// still with the new owner).
		log.Warn("idemgen: effect lease was taken over before it was recorded; the provider saw the same key twice")
		return e.ledgerOutcome(ctx, fx, key)
	}
	if err := e.hit(ctx, hooks.PointEffectRecorded, key); err != nil {
		er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrEffectFailed, err)
		return er
	}
	log.Info("idemgen: effect done")
	er.Outcome, er.Result = EffectDone, cp.result
	return er
}

// ledgerOutcome reports an effect this worker does not hold as the ledger
// has it; no outcome when it is not reserved (the write did not decide it).
func (e *Engine[U]) ledgerOutcome(ctx context.Context, fx Effect[U], key string) EffectResult {
	row, found, err := e.st.Auto().Effect(ctx, key)
	switch {
	case err != nil:
		return EffectResult{Effect: fx.Name, Key: key, Outcome: EffectFailed,
			Err: fmt.Errorf("effect %q key %q: %w: read ledger: %w", fx.Name, key, ErrEffectFailed, err)}
	case !found:
		return EffectResult{Effect: fx.Name, Key: key}
	}
	now, err := e.leaseNow(ctx, nil)
	if err != nil {
		now = time.Time{} // unknown: a pending row is reported busy
	}
	return ledgerResult(fx, key, row, now)
}

// ledgerResult is the outcome of an effect whose ledger row is row, for a
// worker that does not hold it; now is the database's time, to tell a row
// waiting for its next attempt from one another worker holds.
func ledgerResult[U any](fx Effect[U], key string, row LedgerRow, now time.Time) EffectResult {
	er := EffectResult{Effect: fx.Name, Key: key}
	switch {
	case row.State == StateDone:
		er.Outcome, er.Result = EffectDeduped, row.Result
	case row.State == StateParked:
		er.Outcome, er.Err = EffectParked, parkedError(fx.Name, key, row)
	case !now.IsZero() && row.NextAttemptAt.After(now):
		er.Outcome, er.Err = EffectWaiting, fmt.Errorf("effect %q key %q: %w until %s: %s", fx.Name, key, ErrWaiting,
			row.NextAttemptAt.UTC().Format(time.RFC3339Nano), row.LastError)
	default:
		er.Outcome, er.Err = EffectBusy, fmt.Errorf("effect %q key %q: %w", fx.Name, key, ErrBusy)
	}
	return er
}

// remember records the outcome of an effect key this call attempted.
func (e *Engine[U]) remember(rep *runState, er EffectResult) {
	if rep.tried == nil {
		rep.tried = map[string]EffectResult{}
	}
	rep.tried[er.Key] = er
}

// parkedError is the error of an effect found parked in the ledger, worded
// as release worded it when the effect was parked; a permanent failure (see
// Permanent) still says so to errors.Is.
func parkedError(effect, key string, row LedgerRow) error {
	// Rows parked before the permanent and parked_reason columns existed
	// (no reason) said permanent only in their text.
	permanent := row.Permanent || row.ParkedReason == "" && strings.HasPrefix(row.LastError, permanentPrefix)
	return fmt.Errorf("effect %q key %q: %w: %w", effect, key, ErrEffectParked, storedFailure{row.LastError, permanent})
}

// storedFailure is a provider's failure read back from the ledger: its
// text as first answered, and whether the provider called it permanent
// (the ledger's permanent column).
type storedFailure struct {
	text      string
	permanent bool
}

func (f storedFailure) Error() string { return f.text }

func (f storedFailure) Is(target error) bool { return target == ErrPermanent && f.permanent }

func (e *Engine[U]) release(ctx context.Context, fx Effect[U], key string, cause error, log *slog.Logger) EffectResult {
	er := EffectResult{Effect: fx.Name, Key: key, Outcome: EffectFailed, Err: fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrEffectFailed, cause)}
	permanent := errors.Is(cause, ErrPermanent)
	wait, notNow := retryAfterOf(cause)
	// A wait of the engine's own that ran past its bound (a connection, a
	// lock on the effect's limits) is busy, not the effect's failure: like
	// a "not now", it counts no attempt (waits.go), so a loaded database
	// parks no effect that was never called.
	var waited *WaitError
	busy := errors.As(cause, &waited)
	rel := Release{Key: key, Owner: e.opt.owner, LastError: cause.Error(), MaxAttempts: fx.MaxAttempts,
		Permanent: permanent, NotCounted: (notNow || busy) && !permanent, Now: e.opt.now()}
	if now, err := e.leaseNow(ctx, nil); err == nil {
		rel.NextAttempt = func(attempts int32) time.Time {
			backoff := fx.Retry.wait(attempts, jitter)
			if rel.NotCounted && wait > 0 {
				backoff = wait
			}
			return now.Add(backoff)
		}
	} else {
		log.Warn("idemgen: effect failed; without the database clock its retry is not delayed", slog.Any("err", err))
	}
	var state string
	err := e.st.InTx(ctx, func(q Querier) (err error) {
		state, err = q.Release(ctx, rel)
		return err
	})
	if err != nil {
		log.Warn("idemgen: effect failed; releasing its lease failed too", slog.Any("err", cause), slog.Any("release_err", err))
		return er
	}
	if rel.NotCounted && state == StatePending {
		er.Outcome, er.Err = EffectWaiting, fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrWaiting, cause)
		if busy && !notNow {
			log.Info("idemgen: effect not called: a wait ran past its bound; no attempt counted", slog.Any("err", cause))
			return er
		}
		log.Info("idemgen: the provider asked to be called later; no attempt counted", slog.Any("err", cause))
		return er
	}
	if state == StateParked {
		er.Outcome, er.Err = EffectParked, fmt.Errorf("effect %q key %q: %w: %w", fx.Name, key, ErrEffectParked, cause)
		if permanent {
			log.Error("idemgen: effect parked: the provider called the failure permanent", slog.Any("err", cause))
			return er
		}
		log.Error("idemgen: effect parked after max attempts", slog.Any("err", cause))
		return er
	}
	log.Warn("idemgen: effect failed; it will be retried", slog.Any("err", cause))
	return er
}

// notCalled is the result of an effect a canceled run did not call. Its
// claim is not released (a release counts a failure, and could park an
// effect never called): the lease lapses as a crashed worker's would, and
// the next run after it performs the effect.
func notCalled(ctx context.Context, er EffectResult, log *slog.Logger) EffectResult {
	er.Outcome, er.Err = EffectFailed, fmt.Errorf("effect %q key %q: %w: not called, the run was canceled: %w", er.Effect, er.Key, ErrEffectFailed, ctx.Err())
	log.Warn("idemgen: effect not called: the run was canceled; the next run after its lease performs it")
	return er
}

// notCalledPoolDry is the result of an effect not called because an
// earlier call of its batch waited out its bound for a pool connection
// (waited). It is busy (errors.Is ErrBusy), and, as notCalled's, its claim
// is not released: a release would wait on the same pool. The lease lapses
// as a crashed worker's would, and the next run after it performs the
// effect.
func notCalledPoolDry(effect, key string, waited *WaitError, log *slog.Logger) EffectResult {
	log.Warn("idemgen: effect not called: an earlier call of its batch got no pool connection within the wait bound; the next run after its lease performs it")
	return EffectResult{Effect: effect, Key: key, Outcome: EffectFailed,
		Err: fmt.Errorf("effect %q key %q: %w: not called, an earlier call of its batch waited out its bound for a connection: %w", effect, key, ErrEffectFailed, waited)}
}
