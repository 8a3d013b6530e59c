-- The operations reads of idemops, compiled by sqlc into typed Go
-- (go test ./generator -run TestOpsQueries -update), against the schema
-- every generated package migrates to. The table names are placeholders:
-- idemops puts a package's own in their place as each statement runs
-- (idemrt.TableNames).

-- name: LimitSlots :many
-- Every limits row: an effect's calls in flight (slots 0 and up), its
-- pacing (-1), its gate (-2) and its override (-3).
SELECT job, effect, slot, held_until FROM idem_limits ORDER BY job, effect, slot;

-- name: Gates :many
-- The gate rows that hold a pause, a circuit open or a probe.
SELECT job, effect, gate, held_until, since, reason, failures, opens, owner FROM idem_limits
WHERE slot = -2 AND gate IS NOT NULL ORDER BY job, effect;

-- name: EffectGates :many
-- Gates of one effect.
SELECT job, effect, gate, held_until, since, reason, failures, opens, owner FROM idem_limits
WHERE slot = -2 AND gate IS NOT NULL AND job = @job AND effect = @effect ORDER BY job, effect;

-- name: Overrides :many
-- The rows at slot (idemrt.SteerSlotOverride): an effect's rate and
-- concurrency set by hand, in failures, reason and opens.
SELECT job, effect, failures, reason, opens, owner, since FROM idem_limits
WHERE slot = @slot ORDER BY job, effect;

-- name: EffectOverrides :many
-- Overrides of one effect.
SELECT job, effect, failures, reason, opens, owner, since FROM idem_limits
WHERE slot = @slot AND job = @job AND effect = @effect ORDER BY job, effect;

-- name: Progress :many
-- Every job's progress.
SELECT job, watermark, cursor_token, cursor_position, job_version, updated_at FROM idem_progress ORDER BY job;

-- name: UnitStates :many
-- The parked table's rows by job and state.
SELECT job, state, count(*) AS n FROM idem_parked GROUP BY job, state ORDER BY job, state;

-- name: JobUnitStatesUpTo :many
-- One job's parked-table rows by state, of the first max_rows on its
-- (job, unit_key) key.
SELECT state, count(*) AS n FROM (SELECT state FROM idem_parked WHERE job = @job ORDER BY unit_key LIMIT @max_rows) AS u
GROUP BY state ORDER BY state;

-- name: ParkedEffectRows :one
-- An effect's parked rows (state 'failed', idemrt.StoredParked), counted on
-- the (job, effect, state, done_at) index.
SELECT count(*) FROM idem_ledger WHERE job = @job AND effect = @effect AND state = 'failed';

-- name: ParkedEffectNewestVersion :one
-- The newest version among an effect's parked rows; 0 when it has none.
SELECT CAST(coalesce(max(effect_version), 0) AS integer) AS version FROM idem_ledger
WHERE job = @job AND effect = @effect AND state = 'failed';
