/** Every statement of the SQLite ledger (sqliteLedger.ts prepares and runs them). */
import { localStateIn, sqlLocalState } from '../localStateSql.js';
import type { RecordListingDialect } from '../recordListing.js';

/**
 * When a record's lease runs out, while the record is open: at the end its holder last set (`lease_holders`), or, when
 * the holder has no row (a file written by schema 4, a row forgotten), at the record's own; NULL when nobody holds it.
 * So a renewal writes one row, however many records the holder follows (docs/DESIGN.md, "Rules learned in the
 * field", 8): rewriting each held record wrote every whole row to the WAL, about 7 MB every `leaseMs / 3` for 10,000
 * open tasks. Every statement that gives a holder a lease also sets its row (`setHolder`), so the holder's latest
 * word is its lease's end, as when each record was rewritten: a renewal after the host's clock stepped back ends the
 * leases claimed on the clock ahead (the later of the two would keep them for as long as the step).
 */
const LEASE_UNTIL = `CASE WHEN ${localStateIn(['submitting', 'tracking'], 'submissions')}
  THEN COALESCE((SELECT expires_at FROM lease_holders WHERE holder = submissions.lease_owner),
    submissions.lease_expires_at)
  ELSE submissions.lease_expires_at END`;

/**
 * A record's row with the end of its lease as LEASE_UNTIL says, which is what a TaskRecord's `leaseExpiresAt` is, and
 * its schedule note's columns (`noted_*`, NULL when it has none), read FROM RECORDS.
 */
const RECORD_COLUMNS = `*, ${LEASE_UNTIL} AS lease_until`;

/** The records with their schedule notes (schema 7). */
const RECORDS = `submissions LEFT JOIN schedule_notes USING (record_id)`;

/** The listing's SQL on this ledger (recordListing.ts): named values, each used by every branch that needs it. */
export const SQLITE_LISTING: RecordListingDialect = {
  table: 'submissions',
  placeholder: (n) => `@p${n}`,
  // BINARY collation: UTF-8 bytes, code point order
  taskIdInCodePointOrder: 'task_id',
};

/** The ledger's statements by name; the ledger prepares each once on its connection. */
export const SQL = {
  insert: `INSERT INTO submissions (record_id, endpoint, tool_name, arguments, arguments_digest, correlation_id,
         idempotency_key, wire_idempotency_key, credential, local_state, submitted_at, resubmitted_from,
         lease_owner, lease_expires_at, updated_at, trace_context)
       VALUES (@recordId, @endpoint, @toolName, @arguments, @argumentsDigest, @correlationId,
         @idempotencyKey, @wireIdempotencyKey, @credential, 'submitting', @submittedAt, @resubmittedFrom,
         @leaseHolder, @leaseExpiresAt, @submittedAt, @traceContext)`,
  // one atomic step: only a closed record nobody resubmitted yet is superseded
  supersede: `UPDATE submissions SET superseded_by = ?, updated_at = ?
       WHERE record_id = ? AND superseded_by IS NULL AND ${localStateIn(['terminal', 'expired', 'unknown-outcome'])}`,
  get: `SELECT ${RECORD_COLUMNS} FROM ${RECORDS} WHERE record_id = ?`,
  byTaskId: `SELECT ${RECORD_COLUMNS} FROM ${RECORDS} WHERE endpoint = ? AND task_id = ?`,
  byIdempotencyKey: `SELECT ${RECORD_COLUMNS} FROM ${RECORDS} WHERE endpoint = ? AND idempotency_key = ? AND superseded_by IS NULL`,
  list: `SELECT ${RECORD_COLUMNS} FROM ${RECORDS}
       WHERE (@endpoint IS NULL OR endpoint = @endpoint)
         AND (@states IS NULL OR local_state IN (SELECT value FROM json_each(@states)))
         AND (@toolName IS NULL OR tool_name = @toolName)
         AND (@correlationId IS NULL OR correlation_id = @correlationId)
         AND (@idempotencyKey IS NULL OR idempotency_key = @idempotencyKey)
         AND (@since IS NULL OR submitted_at >= @since)
         AND (@claimableAt IS NULL OR (${localStateIn(['tracking', 'detached'])}
              AND (lease_owner IS NULL OR ${LEASE_UNTIL} < @claimableAt)))
       ORDER BY submitted_at, record_id
       LIMIT @limit`,
  holdsLease: `SELECT 1 FROM submissions WHERE record_id = ? AND lease_owner = ?`,
  markSent: `UPDATE submissions SET sent_at = @at, updated_at = @at
       WHERE record_id = @recordId AND lease_owner = @holder AND local_state = ${sqlLocalState('submitting')}`,
  // the first thing done with a handle (docs/REQUIREMENTS.md S4): the taskId and the seed state, in the same row as
  // the intent. An answer that arrived is a fact (docs/DESIGN.md rule 10): it is recorded whoever held the lease,
  // also on a record another process settled unknown-outcome meanwhile, and the process that holds the answer
  // follows the task
  commitTask: `UPDATE submissions SET task_id = @taskId, local_state = @localState, status = @status,
         status_message = @statusMessage, created_at = @createdAt, last_updated_at = @lastUpdatedAt,
         ttl_ms = @ttlMs, poll_interval_ms = @pollIntervalMs, result = @result, error = @error,
         terminal_reason = @terminalReason, terminal_at = @terminalAt, lease_owner = @holder,
         lease_expires_at = COALESCE(@leaseExpiresAt, lease_expires_at), updated_at = @at
       WHERE record_id = @recordId AND task_id IS NULL AND ${localStateIn(['submitting', 'unknown-outcome'])}`,
  observe: `UPDATE submissions SET local_state = @localState, status = @status, status_message = @statusMessage,
         created_at = @createdAt, last_updated_at = @lastUpdatedAt, ttl_ms = @ttlMs,
         poll_interval_ms = COALESCE(@pollIntervalMs, poll_interval_ms), result = @result, error = @error,
         terminal_reason = @terminalReason, terminal_at = @terminalAt,
         next_poll_at = CASE WHEN @localState = ${sqlLocalState('terminal')} THEN NULL ELSE next_poll_at END, updated_at = @at
       WHERE record_id = @recordId AND lease_owner = @holder AND local_state = ${sqlLocalState('tracking')} AND task_id = @taskId`,
  recordPoll: `UPDATE submissions SET last_poll_at = @at, last_error = COALESCE(@lastError, last_error), updated_at = @at
       WHERE record_id = @recordId AND lease_owner = @holder`,
  // a late note never moves the poll time back nor lowers the age; it applies while `holder` holds the lease
  applyNote: `INSERT INTO schedule_notes (record_id, noted_poll_at, noted_next_poll_at, noted_age_ms)
         SELECT record_id, @polledAt, CASE WHEN @setNext = 1 THEN @nextPollAt END, @observedAgeMs FROM submissions
         WHERE record_id = @recordId AND lease_owner = @holder
       ON CONFLICT (record_id) DO UPDATE SET
         noted_poll_at = MAX(COALESCE(noted_poll_at, excluded.noted_poll_at),
                             COALESCE(excluded.noted_poll_at, noted_poll_at)),
         noted_next_poll_at = CASE WHEN @setNext = 1 THEN @nextPollAt ELSE noted_next_poll_at END,
         noted_age_ms = MAX(COALESCE(noted_age_ms, excluded.noted_age_ms),
                            COALESCE(excluded.noted_age_ms, noted_age_ms))`,
  recordError: `UPDATE submissions SET last_error = ?, updated_at = ? WHERE record_id = ?`,
  close: `UPDATE submissions SET local_state = @localState, terminal_reason = @reason, terminal_at = @at,
         result = COALESCE(@result, result), error = COALESCE(@error, error),
         last_error = COALESCE(@lastError, last_error), next_poll_at = NULL,
         lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
       WHERE record_id = @recordId AND lease_owner = @holder AND ${localStateIn(['submitting', 'tracking'])}`,
  // an answer that arrived closes its submission also after another process settled it (Closing.arrived)
  closeArrived: `UPDATE submissions SET local_state = @localState, terminal_reason = @reason, terminal_at = @at,
         result = COALESCE(@result, result), error = COALESCE(@error, error),
         last_error = COALESCE(@lastError, last_error), next_poll_at = NULL,
         lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
       WHERE record_id = @recordId AND task_id IS NULL
         AND ((local_state = ${sqlLocalState('submitting')} AND lease_owner = @holder) OR local_state = ${sqlLocalState('unknown-outcome')})`,
  // every spelling an endpoint is stored under, the first used first
  endpointSpellings: `SELECT endpoint FROM submissions GROUP BY endpoint ORDER BY MIN(submitted_at), endpoint`,
  // move one server's rows from another spelling to the kept one, but never make a second record of one task or
  // a second live record of one idempotency key: such a row stays under its old spelling, followed by nobody
  adoptSpelling: `UPDATE submissions SET endpoint = @kept
       WHERE endpoint = @other
         AND (task_id IS NULL OR NOT EXISTS (
               SELECT 1 FROM submissions AS mine WHERE mine.endpoint = @kept AND mine.task_id = submissions.task_id))
         AND (idempotency_key IS NULL OR superseded_by IS NOT NULL OR NOT EXISTS (
               SELECT 1 FROM submissions AS mine WHERE mine.endpoint = @kept
                 AND mine.idempotency_key = submissions.idempotency_key AND mine.superseded_by IS NULL))`,
  // checked again: the server still knows the task, so it is followed again by the one checking
  reopen: `UPDATE submissions SET local_state = ${sqlLocalState('tracking')}, terminal_reason = NULL, terminal_at = NULL,
         lease_owner = @holder, lease_expires_at = @leaseExpiresAt, updated_at = @at
       WHERE record_id = @recordId AND local_state = ${sqlLocalState('expired')} AND task_id IS NOT NULL`,
  secret: `SELECT secret FROM ledger_secret WHERE id = 1`,
  insertSecret: `INSERT OR IGNORE INTO ledger_secret (id, secret) VALUES (1, ?)`,
  abandonedSubmissions: `SELECT ${RECORD_COLUMNS} FROM ${RECORDS}
       WHERE endpoint = ? AND local_state = ${sqlLocalState('submitting')} AND (lease_expires_at IS NULL OR ${LEASE_UNTIL} < ?)`,
  settleAbandoned: `UPDATE submissions SET local_state = ${sqlLocalState('unknown-outcome')}, terminal_reason = @reason, terminal_at = @at,
         lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
       WHERE record_id = @recordId AND local_state = ${sqlLocalState('submitting')}`,
  detach: `UPDATE submissions SET local_state = ${sqlLocalState('detached')}, lease_owner = NULL, lease_expires_at = NULL,
         next_poll_at = NULL, updated_at = @at
       WHERE record_id = @recordId AND lease_owner = @holder AND local_state = ${sqlLocalState('tracking')}`,
  cancelRequest: `UPDATE submissions SET cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ?
       WHERE record_id = ?`,
  // a lease is free when nobody holds it, it is ours, or its holder stopped renewing it
  // the records of a JSON array of ids in one statement: a resume claims thousands (bench/RESULTS.md, section 28)
  claim: `UPDATE submissions SET lease_owner = @holder, lease_expires_at = @leaseExpiresAt,
           local_state = CASE local_state WHEN ${sqlLocalState('detached')} THEN ${sqlLocalState('tracking')} ELSE local_state END
         WHERE record_id IN (SELECT value FROM json_each(@recordIds)) AND ${localStateIn(['tracking', 'detached'])}
           AND (lease_owner IS NULL OR lease_owner = @holder OR ${LEASE_UNTIL} < @now)
         RETURNING record_id`,
  detachedAmong: `SELECT ${RECORD_COLUMNS} FROM ${RECORDS}
       WHERE record_id IN (SELECT value FROM json_each(?)) AND local_state = ${sqlLocalState('detached')}`,
  // the holder's latest word on when its leases end (LEASE_UNTIL): a renewal, or a lease just given to it
  setHolder: `INSERT INTO lease_holders (holder, expires_at) VALUES (?, ?)
       ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at`,
  forgetHolders: `DELETE FROM lease_holders WHERE expires_at < ?`,
  forgetHolder: `DELETE FROM lease_holders WHERE holder = ?`,
  release: `UPDATE submissions SET lease_owner = NULL, lease_expires_at = NULL WHERE record_id = ? AND lease_owner = ?`,
  releaseAllOf: `UPDATE submissions SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = ?`,
  trackedBy: `SELECT 1 FROM submissions WHERE record_id = ? AND lease_owner = ? AND local_state = ${sqlLocalState('tracking')}`,
  trackedAmong: `SELECT record_id FROM submissions
         WHERE record_id IN (SELECT value FROM json_each(?)) AND lease_owner = ? AND local_state = ${sqlLocalState('tracking')}`,
  appendHistory: `INSERT INTO status_history (record_id, task_id, status, status_message, local_state, server_updated_at,
         observed_at, note)
       VALUES (@recordId, @taskId, @status, @statusMessage, @localState, @serverUpdatedAt, @observedAt, @note)`,
  history: `SELECT * FROM status_history WHERE record_id = ? ORDER BY seq`,
  inputs: `SELECT key, request, asked_at, response, answered_at, sent_at FROM input_answers
       WHERE record_id = ? ORDER BY seq`,
  // the inputs of many records at once, for list()
  inputsOf: `SELECT record_id, key, request, asked_at, response, answered_at, sent_at FROM input_answers
       WHERE record_id IN (SELECT value FROM json_each(?)) ORDER BY record_id, seq`,
  input: `SELECT key, request, asked_at, response, answered_at, sent_at FROM input_answers
       WHERE record_id = ? AND key = ?`,
  insertInput: `INSERT INTO input_answers (record_id, key, seq, request, asked_at, response, answered_at)
       VALUES (@recordId, @key, (SELECT COUNT(*) FROM input_answers WHERE record_id = @recordId), @request,
         @askedAt, @response, @answeredAt)
       ON CONFLICT (record_id, key) DO NOTHING`,
  markAsked: `UPDATE input_answers SET asked_at = COALESCE(asked_at, ?) WHERE record_id = ? AND key = ?`,
  // the first stored answer wins: a key is answered once (S9)
  storeAnswer: `UPDATE input_answers SET response = ?, answered_at = ?
       WHERE record_id = ? AND key = ? AND response IS NULL`,
  markInputSent: `UPDATE input_answers SET sent_at = ? WHERE record_id = ? AND key = ? AND response IS NOT NULL`,
};
