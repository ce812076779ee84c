/** Every statement of the PostgreSQL ledger (postgresLedger.ts runs them). */
import { DATABASE_CLOCK_SQL, renewedLeaseExpirySql } from '../../../shared/postgres/databaseClock.js';
import { localStateIn, sqlLocalState } from '../localStateSql.js';
import type { RecordListingDialect } from '../recordListing.js';

const OPEN_TO_DRIVE = localStateIn(['submitting', 'tracking']);
const FOLLOWABLE = localStateIn(['tracking', 'detached']);
const CLOSED = localStateIn(['terminal', 'expired', 'unknown-outcome']);

/** A submission with its inputs, read in one statement so both come from one snapshot. */
const WITH_INPUTS = `s.*, (
  SELECT json_agg(json_build_object('key', i.key, 'request', i.request, 'asked_at', i.asked_at,
           'response', i.response, 'answered_at', i.answered_at, 'sent_at', i.sent_at) ORDER BY i.seq)
  FROM closeout_ledger_input_answers i WHERE i.record_id = s.record_id
) AS inputs`;

/** The listing's SQL on this ledger (recordListing.ts). */
export const POSTGRES_LISTING: RecordListingDialect = {
  table: 'closeout_ledger_submissions',
  placeholder: (n) => `$${n}`,
  // the database's collation may order by language rules, where a prefix is no range: "C" compares bytes
  taskIdInCodePointOrder: 'task_id COLLATE "C"',
};

export const SQL = {
  // migrations: one transaction, serialised by an advisory lock, so workers starting together migrate once
  migrationLock: `SELECT pg_advisory_xact_lock(hashtextextended('closeout_ledger_migrations', 0))`,
  createVersionTable: `CREATE TABLE IF NOT EXISTS closeout_ledger_schema_version (
     version    INTEGER PRIMARY KEY,
     applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
   )`,
  schemaVersion: `SELECT COALESCE(MAX(version), 0) AS version FROM closeout_ledger_schema_version`,
  recordVersion: `INSERT INTO closeout_ledger_schema_version (version) VALUES ($1)`,

  // intents: the unique indexes decide; a losing insert then reads the winner (a new statement sees its commit)
  insert: `INSERT INTO closeout_ledger_submissions (record_id, endpoint, endpoint_identity, tool_name, arguments,
             arguments_digest, correlation_id, idempotency_key, wire_idempotency_key, credential, local_state,
             submitted_at, resubmitted_from, lease_owner, lease_expires_at, updated_at, trace_context)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, 'submitting', $11, $12, $13, $14, $11, $15)
           ON CONFLICT DO NOTHING
           RETURNING record_id`,
  // one atomic step: only a closed record nobody resubmitted yet is superseded; the row lock makes
  // a concurrent resubmission wait and then find it superseded
  supersede: `UPDATE closeout_ledger_submissions SET superseded_by = $1, updated_at = $2
              WHERE record_id = $3 AND superseded_by IS NULL AND ${CLOSED}`,
  get: `SELECT ${WITH_INPUTS} FROM closeout_ledger_submissions s WHERE s.record_id = $1`,
  lock: `SELECT * FROM closeout_ledger_submissions WHERE record_id = $1 FOR UPDATE`,
  byTaskId: `SELECT ${WITH_INPUTS} FROM closeout_ledger_submissions s
             WHERE s.endpoint_identity = $1 AND s.task_id = $2`,
  byIdempotencyKey: `SELECT ${WITH_INPUTS} FROM closeout_ledger_submissions s
                     WHERE s.endpoint_identity = $1 AND s.idempotency_key = $2 AND s.superseded_by IS NULL`,
  list: `SELECT ${WITH_INPUTS} FROM closeout_ledger_submissions s
         WHERE ($1::text IS NULL OR s.endpoint_identity = $1)
           AND ($2::text[] IS NULL OR s.local_state = ANY ($2::text[]))
           AND ($3::text IS NULL OR s.tool_name = $3)
           AND ($4::text IS NULL OR s.correlation_id = $4)
           AND ($5::text IS NULL OR s.idempotency_key = $5)
           AND ($6::bigint IS NULL OR s.submitted_at >= $6)
           AND ($8::bigint IS NULL OR (s.${FOLLOWABLE}
                AND (s.lease_owner IS NULL OR s.lease_expires_at < $8)))
         ORDER BY s.submitted_at, s.record_id COLLATE "C"
         LIMIT $7`,

  // driving writes: each names the lease holder, so a worker that lost the lease writes nothing (the fence)
  markSent: `UPDATE closeout_ledger_submissions SET sent_at = $3, updated_at = $3
             WHERE record_id = $1 AND lease_owner = $2 AND local_state = ${sqlLocalState('submitting')}`,
  // the first thing done with a handle (S4). An answer that arrived is a fact (docs/DESIGN.md rule 10): it is recorded
  // whoever held the lease, also on a record settled unknown-outcome meanwhile, and its recorder follows the task
  commitTask: `UPDATE closeout_ledger_submissions SET task_id = $3, local_state = $4, status = $5, status_message = $6,
                 created_at = $7, last_updated_at = $8, ttl_ms = $9, poll_interval_ms = $10, result = $11,
                 error = $12, terminal_reason = $13, terminal_at = $14, lease_owner = $2,
                 lease_expires_at = COALESCE($15, lease_expires_at), updated_at = $16
               WHERE record_id = $1 AND task_id IS NULL AND ${localStateIn(['submitting', 'unknown-outcome'])}`,
  observe: `UPDATE closeout_ledger_submissions SET local_state = $4, status = $5, status_message = $6,
              created_at = $7, last_updated_at = $8, ttl_ms = $9,
              poll_interval_ms = COALESCE($10, poll_interval_ms), result = $11, error = $12,
              terminal_reason = $13, terminal_at = $14,
              next_poll_at = CASE WHEN $4 = ${sqlLocalState('terminal')} THEN NULL ELSE next_poll_at END, updated_at = $15
            WHERE record_id = $1 AND lease_owner = $2 AND local_state = ${sqlLocalState('tracking')} AND task_id = $3`,
  recordPoll: `UPDATE closeout_ledger_submissions
               SET last_poll_at = $3, last_error = COALESCE($4, last_error), updated_at = $3
               WHERE record_id = $1 AND lease_owner = $2`,
  // every pending schedule note in one statement; a late note never moves last_poll_at backwards, and next_poll_at
  // only means something while tracked
  applyNotes: `UPDATE closeout_ledger_submissions s SET
                 last_poll_at = CASE WHEN n.polled_at IS NULL THEN s.last_poll_at
                                     ELSE GREATEST(s.last_poll_at, n.polled_at) END,
                 updated_at = GREATEST(s.updated_at, n.polled_at),
                 next_poll_at = CASE WHEN n.set_next AND s.local_state = ${sqlLocalState('tracking')} THEN n.next_poll_at
                                     ELSE s.next_poll_at END,
                 observed_age_ms = CASE WHEN n.observed_age_ms IS NULL THEN s.observed_age_ms
                                        ELSE GREATEST(COALESCE(s.observed_age_ms, 0), n.observed_age_ms) END
               FROM unnest($1::text[], $2::text[], $3::bigint[], $4::boolean[], $5::bigint[], $6::bigint[])
                 AS n (record_id, holder, polled_at, set_next, next_poll_at, observed_age_ms)
               WHERE s.record_id = n.record_id AND s.lease_owner = n.holder`,
  recordError: `UPDATE closeout_ledger_submissions SET last_error = $2, updated_at = $3 WHERE record_id = $1`,
  close: `UPDATE closeout_ledger_submissions SET local_state = $3, terminal_reason = $4, terminal_at = $5,
            result = COALESCE($6, result), error = COALESCE($7, error), last_error = COALESCE($8, last_error),
            next_poll_at = NULL, lease_owner = NULL, lease_expires_at = NULL, updated_at = $5
          WHERE record_id = $1 AND lease_owner = $2 AND ${OPEN_TO_DRIVE}`,
  // an answer that arrived closes its submission also after another process settled it (Closing.arrived)
  closeArrived: `UPDATE closeout_ledger_submissions SET local_state = $3, terminal_reason = $4, terminal_at = $5,
                   result = COALESCE($6, result), error = COALESCE($7, error), last_error = COALESCE($8, last_error),
                   next_poll_at = NULL, lease_owner = NULL, lease_expires_at = NULL, updated_at = $5
                 WHERE record_id = $1 AND task_id IS NULL
                   AND ((local_state = ${sqlLocalState('submitting')} AND lease_owner = $2) OR local_state = ${sqlLocalState('unknown-outcome')})`,
  // checked again: the server still knows the task, so it is followed again by the one checking
  reopen: `UPDATE closeout_ledger_submissions SET local_state = ${sqlLocalState('tracking')}, terminal_reason = NULL, terminal_at = NULL,
             lease_owner = $2, lease_expires_at = $3, updated_at = $4
           WHERE record_id = $1 AND local_state = ${sqlLocalState('expired')} AND task_id IS NOT NULL`,
  // SKIP LOCKED: two workers settling at once split the rows instead of waiting on each other
  abandonedSubmissions: `SELECT * FROM closeout_ledger_submissions
                         WHERE endpoint_identity = $1 AND local_state = ${sqlLocalState('submitting')}
                           AND (lease_expires_at IS NULL OR lease_expires_at < $2)
                         ORDER BY submitted_at
                         FOR UPDATE SKIP LOCKED`,
  settleAbandoned: `UPDATE closeout_ledger_submissions SET local_state = ${sqlLocalState('unknown-outcome')}, terminal_reason = $2,
                      terminal_at = $3, lease_owner = NULL, lease_expires_at = NULL, updated_at = $3
                    WHERE record_id = $1 AND local_state = ${sqlLocalState('submitting')}`,
  detach: `UPDATE closeout_ledger_submissions SET local_state = ${sqlLocalState('detached')}, lease_owner = NULL,
             lease_expires_at = NULL, next_poll_at = NULL, updated_at = $3
           WHERE record_id = $1 AND lease_owner = $2 AND local_state = ${sqlLocalState('tracking')}`,
  cancelRequest: `UPDATE closeout_ledger_submissions
                  SET cancel_requested_at = COALESCE(cancel_requested_at, $2), updated_at = $2
                  WHERE record_id = $1`,

  // leases: free when nobody holds one, it is ours, or its holder stopped renewing it. One claim waits for a row
  // another transaction holds; claimAll skips it (SKIP LOCKED), so workers resuming together split the records
  claim: `WITH taken AS (
            SELECT record_id, local_state AS previous_state FROM closeout_ledger_submissions
            WHERE record_id = ANY ($1::text[]) AND ${FOLLOWABLE}
              AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires_at < $4)
            FOR UPDATE SKIP LOCKED
          )
          UPDATE closeout_ledger_submissions s SET lease_owner = $2, lease_expires_at = $3,
            local_state = ${sqlLocalState('tracking')}
          FROM taken t
          WHERE s.record_id = t.record_id
          RETURNING s.record_id, t.previous_state, s.task_id, s.status, s.status_message`,
  claimOne: `UPDATE closeout_ledger_submissions s SET lease_owner = $2, lease_expires_at = $3, local_state = ${sqlLocalState('tracking')}
             FROM (SELECT local_state AS previous_state FROM closeout_ledger_submissions WHERE record_id = $1) t
             WHERE s.record_id = $1 AND s.${FOLLOWABLE}
               AND (s.lease_owner IS NULL OR s.lease_owner = $2 OR s.lease_expires_at < $4)
             RETURNING s.record_id, t.previous_state, s.task_id, s.status, s.status_message`,
  trackedBy: `SELECT 1 FROM closeout_ledger_submissions
              WHERE record_id = $1 AND lease_owner = $2 AND local_state = ${sqlLocalState('tracking')}`,
  trackedAmong: `SELECT record_id FROM closeout_ledger_submissions
                 WHERE record_id = ANY($1::text[]) AND lease_owner = $2 AND local_state = ${sqlLocalState('tracking')}`,
  // the rows locked before the expiry is computed, so it counts from after any wait for a lock (renewedLeaseExpirySql)
  renewLeases: `WITH held AS MATERIALIZED (
                  SELECT record_id FROM closeout_ledger_submissions
                  WHERE lease_owner = $1 AND ${OPEN_TO_DRIVE}
                  FOR UPDATE
                )
                UPDATE closeout_ledger_submissions s SET lease_expires_at = ${renewedLeaseExpirySql('$2', '$3')}
                FROM held
                WHERE s.record_id = held.record_id AND s.lease_owner = $1 AND ${OPEN_TO_DRIVE}`,
  release: `UPDATE closeout_ledger_submissions SET lease_owner = NULL, lease_expires_at = NULL
            WHERE record_id = $1 AND lease_owner = $2`,
  releaseAllOf: `UPDATE closeout_ledger_submissions SET lease_owner = NULL, lease_expires_at = NULL
                 WHERE lease_owner = $1`,

  // history
  appendHistory: `INSERT INTO closeout_ledger_status_history (record_id, task_id, status, status_message,
                    local_state, server_updated_at, observed_at, note)
                  VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
  history: `SELECT * FROM closeout_ledger_status_history WHERE record_id = $1 ORDER BY seq`,

  // inputs: asked only under the lease, whose row lock is held until the key is written
  lockHeld: `SELECT 1 FROM closeout_ledger_submissions WHERE record_id = $1 AND lease_owner = $2 FOR UPDATE`,
  lockAny: `SELECT 1 FROM closeout_ledger_submissions WHERE record_id = $1 FOR UPDATE`,
  insertInput: `INSERT INTO closeout_ledger_input_answers (record_id, key, seq, request, asked_at, response,
                  answered_at)
                VALUES ($1, $2, (SELECT COUNT(*) FROM closeout_ledger_input_answers WHERE record_id = $1), $3, $4,
                  $5, $6)
                ON CONFLICT (record_id, key) DO NOTHING`,
  markAsked: `UPDATE closeout_ledger_input_answers SET asked_at = COALESCE(asked_at, $3)
              WHERE record_id = $1 AND key = $2`,
  // the first stored answer wins: a key is answered once (S9)
  storeAnswer: `UPDATE closeout_ledger_input_answers SET response = $3, answered_at = $4
                WHERE record_id = $1 AND key = $2 AND response IS NULL`,
  input: `SELECT key, request, asked_at, response, answered_at, sent_at FROM closeout_ledger_input_answers
          WHERE record_id = $1 AND key = $2`,
  markInputsSent: `UPDATE closeout_ledger_input_answers SET sent_at = $3
                   WHERE record_id = $1 AND key = ANY ($2::text[]) AND response IS NOT NULL`,

  databaseClock: DATABASE_CLOCK_SQL,
  secret: `SELECT secret FROM closeout_ledger_secret WHERE id = 1`,
  insertSecret: `INSERT INTO closeout_ledger_secret (id, secret) VALUES (1, $1) ON CONFLICT (id) DO NOTHING`,
} as const;
