/**
 * The default Ledger: one SQLite file (better-sqlite3, WAL), owner-only. Every statement of the ledger is in this
 * file; each write is one savepoint of a group commit (`SqliteGroupCommit`: the writes of one turn of the event loop,
 * one transaction and one fsync), committed before its promise resolves. Schedule notes (`noteSchedule`) wait in
 * memory and ride along with the next transaction, or are committed together at most `deferMs` later: a client
 * polling thousands of tasks then commits once per batch of polls, not twice per poll.
 */
import { randomBytes } from 'node:crypto';

import type Database from 'better-sqlite3';

import type { InputRequest, InputResponse } from '../../protocol/index.js';
import type { Migration } from '../../shared/sqlite/sqliteFile.js';
import { openSqliteFile } from '../../shared/sqlite/sqliteFile.js';
import { SqliteGroupCommit } from '../../shared/sqlite/sqliteGroupCommit.js';
import type { SqliteSynchronous } from '../../shared/sqlite/sqliteSynchronous.js';
import { abandonedReason, answeredNote, applyObservedTask, commitNote, taskHeldElsewhereNote } from './closing.js';
import { endpointIdentity } from './endpointIdentity.js';
import type {
  Closing,
  HistoryEntry,
  InputAnswer,
  Ledger,
  LedgerFilter,
  LocalState,
  NewSubmission,
  ObservedTask,
  RecordedError,
  RecordedIntent,
  ScheduleNote,
  TaskRecord,
} from './ledger.js';
import { localStateIn, sqlLocalState } from './localStateSql.js';
import type {
  RecordCounts,
  RecordListingDialect,
  RecordListPage,
  RecordListQuery,
  RecordSummaryRow,
} from './recordListing.js';
import { recordCountStatement, recordListStatement, toRecordCounts, toRecordPage } from './recordListing.js';
import type { HistoryLine, HistoryRow, InputRow, PendingNote, SubmissionRow as Row } from './records.js';
import {
  applyNote,
  localChangeLine,
  mergeNote,
  observedLine,
  toHistoryEntry,
  toInputAnswer,
  toRecord,
} from './records.js';

/** SQLite hands integer columns over as numbers. */
type SubmissionRow = Row<number> & {
  lease_until?: number | null;
  /** The record's schedule note (schema 7, RECORDS): NULL when it has none. */
  noted_poll_at?: number | null;
  noted_next_poll_at?: number | null;
  noted_age_ms?: number | null;
};

/**
 * Versioned migrations: entry i brings `user_version` from i to i + 1. Never edit a shipped entry; append. Its status
 * set stays written out, and test/server/store/statusSql.test.ts fails when it no longer matches the status machine.
 */
const MIGRATIONS: readonly Migration[] = [
  `CREATE TABLE submissions (
     record_id           TEXT PRIMARY KEY,
     endpoint            TEXT NOT NULL,
     tool_name           TEXT NOT NULL,
     arguments           TEXT NOT NULL,
     arguments_digest    TEXT NOT NULL,
     correlation_id      TEXT,
     idempotency_key     TEXT,
     task_id             TEXT,
     local_state         TEXT NOT NULL CHECK (local_state IN
                           ('submitting','tracking','terminal','expired','unknown-outcome','detached')),
     status              TEXT CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message      TEXT,
     created_at          TEXT,    -- server time, ISO 8601 as sent
     last_updated_at     TEXT,    -- server time, ISO 8601 as sent
     ttl_ms              INTEGER, -- NULL with a task_id: unlimited
     poll_interval_ms    INTEGER,
     submitted_at        INTEGER NOT NULL, -- local epoch ms from here on
     sent_at             INTEGER,
     last_poll_at        INTEGER,
     next_poll_at        INTEGER,
     last_error          TEXT,    -- JSON RecordedError
     result              TEXT,    -- JSON CallToolResult
     error               TEXT,    -- JSON JSON-RPC error
     terminal_reason     TEXT,
     terminal_at         INTEGER,
     cancel_requested_at INTEGER,
     resubmitted_from    TEXT REFERENCES submissions (record_id),
     -- deferred: a resubmission supersedes the old record before the new one (which may reuse its key) exists
     superseded_by       TEXT REFERENCES submissions (record_id) DEFERRABLE INITIALLY DEFERRED,
     lease_owner         TEXT,
     lease_expires_at    INTEGER,
     updated_at          INTEGER NOT NULL
   );
   -- a taskId names one task of one server
   CREATE UNIQUE INDEX submissions_task ON submissions (endpoint, task_id) WHERE task_id IS NOT NULL;
   -- one current submission per endpoint and idempotency key; an explicit resubmission supersedes the old one
   CREATE UNIQUE INDEX submissions_idempotency ON submissions (endpoint, idempotency_key)
     WHERE idempotency_key IS NOT NULL AND superseded_by IS NULL;
   -- resume only ever looks at open records
   CREATE INDEX submissions_open ON submissions (endpoint, local_state)
     WHERE local_state IN ('submitting','tracking','detached');

   CREATE TABLE status_history (
     seq               INTEGER PRIMARY KEY AUTOINCREMENT,
     record_id         TEXT NOT NULL REFERENCES submissions (record_id),
     task_id           TEXT,
     status            TEXT,
     status_message    TEXT,
     local_state       TEXT NOT NULL,
     server_updated_at TEXT,
     observed_at       INTEGER NOT NULL,
     note              TEXT
   );
   CREATE INDEX status_history_record ON status_history (record_id, seq);
   -- the audit trail is append-only (S15)
   CREATE TRIGGER status_history_no_update BEFORE UPDATE ON status_history
     BEGIN SELECT RAISE(ABORT, 'status_history is append-only'); END;
   CREATE TRIGGER status_history_no_delete BEFORE DELETE ON status_history
     BEGIN SELECT RAISE(ABORT, 'status_history is append-only'); END;

   CREATE TABLE input_answers (
     record_id   TEXT NOT NULL REFERENCES submissions (record_id),
     key         TEXT NOT NULL,
     seq         INTEGER NOT NULL,
     request     TEXT NOT NULL,
     asked_at    INTEGER,
     response    TEXT,
     answered_at INTEGER,
     sent_at     INTEGER,
     PRIMARY KEY (record_id, key) -- keys are unique over a task's life (SEP-2663 "Task Update Requests")
   );`,
  // 2: clocks, credentials and keys (docs/DESIGN.md, rules 2 and 5)
  `-- how long this client has itself seen the task open, by its own monotonic clock, summed over its processes
   ALTER TABLE submissions ADD COLUMN observed_age_ms INTEGER;
   -- a keyed fingerprint of the credential the record was created under (never the credential itself)
   ALTER TABLE submissions ADD COLUMN credential TEXT;
   -- the idempotency key as sent (derived from idempotency_key with the ledger's secret); NULL: sent as it is
   ALTER TABLE submissions ADD COLUMN wire_idempotency_key TEXT;
   -- the ledger's own secret, written once by the first process that opens it
   CREATE TABLE ledger_secret (
     id     INTEGER PRIMARY KEY CHECK (id = 1),
     secret BLOB NOT NULL
   );`,
  // 2 -> 3: entry 0 was edited after it shipped (`superseded_by` became deferrable), so files written by the first
  // build kept an immediate reference and could not resubmit ("FOREIGN KEY constraint failed")
  deferSupersededBy,
  // 3 -> 4: the call's W3C trace context (and baggage), JSON: a process that resumes the record joins its trace
  // (docs/operations.md, "Observability")
  `ALTER TABLE submissions ADD COLUMN trace_context TEXT;`,
  // 4 -> 5: a holder renews its leases by writing its own row, not every record it holds (LEASE_UNTIL)
  `CREATE TABLE lease_holders (
     holder     TEXT PRIMARY KEY,
     expires_at INTEGER NOT NULL -- local epoch ms: the end of the holder's last renewal
   ) WITHOUT ROWID;`,
  // 5 -> 6: a process of a build before schema 5 that still has the file open claims on the record's own lease, which
  // a holder of this build no longer rewrites when it renews: its claim of a tracked record whose holder's row has not
  // run out on this host's clock (Ledger.now) is skipped, as this build's own claim (LEASE_UNTIL < now) skips it.
  // Only a claim moves a tracked record to another holder and keeps it tracked.
  `CREATE TRIGGER submissions_live_holder BEFORE UPDATE OF lease_owner ON submissions
     WHEN OLD.local_state = 'tracking' AND NEW.local_state = 'tracking'
       AND OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NOT NULL AND NEW.lease_owner <> OLD.lease_owner
       AND (SELECT expires_at FROM lease_holders WHERE holder = OLD.lease_owner) >= unixepoch('subsec') * 1000
     BEGIN SELECT RAISE(IGNORE); END;`,
  // 6 -> 7: a schedule note (Ledger.noteSchedule, one a waiting poll) writes a narrow row of its own, not the record's
  // whole row with its arguments, so its cost does not grow with what the call carries (bench/RESULTS.md, section 33).
  // The record's own columns stay: a build before schema 7 with the file still open writes there, and a read takes the
  // later time and the longer age of the two (RECORDS, SqliteLedger.toRecord).
  `CREATE TABLE schedule_notes (
     record_id          TEXT PRIMARY KEY REFERENCES submissions (record_id),
     noted_poll_at      INTEGER, -- local epoch ms: the last poll that got an answer
     noted_next_poll_at INTEGER, -- the next poll planned; NULL: none; read only while the record is tracked
     noted_age_ms       INTEGER  -- observed_age_ms, never lowered
   ) WITHOUT ROWID;
   -- a record that stops being tracked has no next poll (as the statements that end it clear next_poll_at)
   CREATE TRIGGER schedule_notes_untracked AFTER UPDATE OF local_state ON submissions
     WHEN NEW.local_state <> 'tracking'
     BEGIN UPDATE schedule_notes SET noted_next_poll_at = NULL WHERE record_id = NEW.record_id; END;`,
  // 7 -> 8: the records listed for people (recordListing.ts), newest first: all of them, within a local state and
  // status, within a tool; and found by task id prefix, correlation id or idempotency key, whatever the server
  `CREATE INDEX submissions_listing ON submissions (submitted_at, record_id);
   CREATE INDEX submissions_listing_state ON submissions (local_state, status, submitted_at, record_id);
   CREATE INDEX submissions_listing_tool ON submissions (tool_name, submitted_at, record_id);
   CREATE INDEX submissions_listing_task ON submissions (task_id);
   CREATE INDEX submissions_listing_correlation ON submissions (correlation_id);
   CREATE INDEX submissions_listing_key ON submissions (idempotency_key);`,
];

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

/** A statement's values as better-sqlite3 binds named parameters. */
function namedValues(values: unknown[]): Record<string, unknown> {
  return Object.fromEntries(values.map((value, i) => [`p${i + 1}`, value]));
}

/** Holder rows this long past their end are deleted: by then every record they covered has run out on its own. */
const FORGET_HOLDERS_AFTER_MS = 24 * 3_600_000;

/**
 * Rebuild `submissions` from its own stored definition with `superseded_by` deferred, whatever columns later steps
 * added; a file that has the deferred reference already is left as it is.
 */
function deferSupersededBy(db: Database.Database): void {
  const immediate = /(superseded_by\s+TEXT\s+REFERENCES\s+submissions\s*\(\s*record_id\s*\))(?!\s*DEFERRABLE)/i;
  const { sql } = db.prepare(`SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'submissions'`).get() as {
    sql: string;
  };
  if (!immediate.test(sql)) return;
  const indexes = db
    .prepare(`SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'submissions' AND sql IS NOT NULL`)
    .all() as { sql: string }[];
  const rebuilt = sql
    .replace(/^CREATE TABLE submissions\b/i, 'CREATE TABLE submissions_rebuilt')
    .replace(immediate, '$1 DEFERRABLE INITIALLY DEFERRED');
  db.exec(rebuilt);
  db.exec(`INSERT INTO submissions_rebuilt SELECT * FROM submissions;
           DROP TABLE submissions;
           ALTER TABLE submissions_rebuilt RENAME TO submissions;`);
  for (const index of indexes) db.exec(index.sql);
}

export interface SqliteLedgerOptions {
  /** How long to wait for another process's write lock before failing. Default 5000 ms. */
  busyTimeoutMs?: number;
  /** Longest a schedule note waits in memory before it is committed. Default 1000 ms. */
  deferMs?: number;
  /**
   * `full` (default): a taskId, an answer and every other commit is on disk before the call that made it returns, so
   * a handle survives a power cut. `normal`: faster, safe against the process being killed, but the last commits
   * before a power cut or an OS crash may be lost. See `SqliteSynchronous`.
   */
  synchronous?: SqliteSynchronous;
}

/** The ledger schema version this build writes. */
export const LEDGER_SCHEMA_VERSION = MIGRATIONS.length;

export class SqliteLedger implements Ledger {
  readonly path: string;
  private readonly db: Database.Database;
  private readonly stmt;
  private readonly deferMs: number;
  /**
   * The writes of one turn, committed together (a submission burst's intents, sends and taskIds: one fsync for all
   * of them, not three each); each group first writes the pending schedule notes.
   */
  private readonly group: SqliteGroupCommit;
  /** A write of its own, now (a spelling adopted during a read, the deferred notes): also writes the pending notes. */
  private readonly writeTransaction: Database.Transaction<(work: () => unknown) => unknown>;
  private readonly pendingNotes = new Map<string, PendingNote>();
  /** endpointIdentity -> the spelling this ledger stores that server's rows under. */
  private readonly spellings = new Map<string, string>();
  private noteTimer: NodeJS.Timeout | undefined;

  constructor(path: string, options: SqliteLedgerOptions = {}) {
    this.path = path;
    this.db = openSqliteFile(path, {
      migrations: MIGRATIONS,
      what: 'ledger',
      busyTimeoutMs: options.busyTimeoutMs ?? 5000,
      synchronous: options.synchronous,
    });
    this.deferMs = options.deferMs ?? 1000;
    const db = this.db;
    this.stmt = {
      insert: db.prepare(
        `INSERT INTO submissions (record_id, endpoint, tool_name, arguments, arguments_digest, correlation_id,
           idempotency_key, wire_idempotency_key, credential, local_state, submitted_at, resubmitted_from,
           lease_owner, lease_expires_at, updated_at, trace_context)
         VALUES (@recordId, @endpoint, @toolName, @arguments, @argumentsDigest, @correlationId,
           @idempotencyKey, @wireIdempotencyKey, @credential, 'submitting', @submittedAt, @resubmittedFrom,
           @leaseHolder, @leaseExpiresAt, @submittedAt, @traceContext)`,
      ),
      // one atomic step: only a closed record nobody resubmitted yet is superseded
      supersede: db.prepare(
        `UPDATE submissions SET superseded_by = ?, updated_at = ?
         WHERE record_id = ? AND superseded_by IS NULL AND ${localStateIn(['terminal', 'expired', 'unknown-outcome'])}`,
      ),
      get: db.prepare(`SELECT ${RECORD_COLUMNS} FROM ${RECORDS} WHERE record_id = ?`),
      byTaskId: db.prepare(`SELECT ${RECORD_COLUMNS} FROM ${RECORDS} WHERE endpoint = ? AND task_id = ?`),
      byIdempotencyKey: db.prepare(
        `SELECT ${RECORD_COLUMNS} FROM ${RECORDS} WHERE endpoint = ? AND idempotency_key = ? AND superseded_by IS NULL`,
      ),
      list: db.prepare(
        `SELECT ${RECORD_COLUMNS} FROM ${RECORDS}
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
      ),
      holdsLease: db.prepare(`SELECT 1 FROM submissions WHERE record_id = ? AND lease_owner = ?`),
      markSent: db.prepare(
        `UPDATE submissions SET sent_at = @at, updated_at = @at
         WHERE record_id = @recordId AND lease_owner = @holder AND local_state = ${sqlLocalState('submitting')}`,
      ),
      // the first thing done with a handle (docs/REQUIREMENTS.md S4): the taskId and the seed state, in the same row as
      // the intent. An answer that arrived is a fact (docs/DESIGN.md rule 10): it is recorded whoever held the lease,
      // also on a record another process settled unknown-outcome meanwhile, and the process that holds the answer
      // follows the task
      commitTask: db.prepare(
        `UPDATE submissions SET task_id = @taskId, local_state = @localState, status = @status,
           status_message = @statusMessage, created_at = @createdAt, last_updated_at = @lastUpdatedAt,
           ttl_ms = @ttlMs, poll_interval_ms = @pollIntervalMs, result = @result, error = @error,
           terminal_reason = @terminalReason, terminal_at = @terminalAt, lease_owner = @holder,
           lease_expires_at = COALESCE(@leaseExpiresAt, lease_expires_at), updated_at = @at
         WHERE record_id = @recordId AND task_id IS NULL AND ${localStateIn(['submitting', 'unknown-outcome'])}`,
      ),
      observe: db.prepare(
        `UPDATE submissions SET local_state = @localState, status = @status, status_message = @statusMessage,
           created_at = @createdAt, last_updated_at = @lastUpdatedAt, ttl_ms = @ttlMs,
           poll_interval_ms = COALESCE(@pollIntervalMs, poll_interval_ms), result = @result, error = @error,
           terminal_reason = @terminalReason, terminal_at = @terminalAt,
           next_poll_at = CASE WHEN @localState = ${sqlLocalState('terminal')} THEN NULL ELSE next_poll_at END, updated_at = @at
         WHERE record_id = @recordId AND lease_owner = @holder AND local_state = ${sqlLocalState('tracking')} AND task_id = @taskId`,
      ),
      recordPoll: db.prepare(
        `UPDATE submissions SET last_poll_at = @at, last_error = COALESCE(@lastError, last_error), updated_at = @at
         WHERE record_id = @recordId AND lease_owner = @holder`,
      ),
      // a late note never moves the poll time back nor lowers the age; it applies while `holder` holds the lease
      applyNote: db.prepare(
        `INSERT INTO schedule_notes (record_id, noted_poll_at, noted_next_poll_at, noted_age_ms)
           SELECT record_id, @polledAt, CASE WHEN @setNext = 1 THEN @nextPollAt END, @observedAgeMs FROM submissions
           WHERE record_id = @recordId AND lease_owner = @holder
         ON CONFLICT (record_id) DO UPDATE SET
           noted_poll_at = MAX(COALESCE(noted_poll_at, excluded.noted_poll_at),
                               COALESCE(excluded.noted_poll_at, noted_poll_at)),
           noted_next_poll_at = CASE WHEN @setNext = 1 THEN @nextPollAt ELSE noted_next_poll_at END,
           noted_age_ms = MAX(COALESCE(noted_age_ms, excluded.noted_age_ms),
                              COALESCE(excluded.noted_age_ms, noted_age_ms))`,
      ),
      recordError: db.prepare(`UPDATE submissions SET last_error = ?, updated_at = ? WHERE record_id = ?`),
      close: db.prepare(
        `UPDATE submissions SET local_state = @localState, terminal_reason = @reason, terminal_at = @at,
           result = COALESCE(@result, result), error = COALESCE(@error, error),
           last_error = COALESCE(@lastError, last_error), next_poll_at = NULL,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
         WHERE record_id = @recordId AND lease_owner = @holder AND ${localStateIn(['submitting', 'tracking'])}`,
      ),
      // an answer that arrived closes its submission also after another process settled it (Closing.arrived)
      closeArrived: db.prepare(
        `UPDATE submissions SET local_state = @localState, terminal_reason = @reason, terminal_at = @at,
           result = COALESCE(@result, result), error = COALESCE(@error, error),
           last_error = COALESCE(@lastError, last_error), next_poll_at = NULL,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
         WHERE record_id = @recordId AND task_id IS NULL
           AND ((local_state = ${sqlLocalState('submitting')} AND lease_owner = @holder) OR local_state = ${sqlLocalState('unknown-outcome')})`,
      ),
      // every spelling an endpoint is stored under, the first used first
      endpointSpellings: db.prepare(
        `SELECT endpoint FROM submissions GROUP BY endpoint ORDER BY MIN(submitted_at), endpoint`,
      ),
      // move one server's rows from another spelling to the kept one, but never make a second record of one task or
      // a second live record of one idempotency key: such a row stays under its old spelling, followed by nobody
      adoptSpelling: db.prepare(
        `UPDATE submissions SET endpoint = @kept
         WHERE endpoint = @other
           AND (task_id IS NULL OR NOT EXISTS (
                 SELECT 1 FROM submissions AS mine WHERE mine.endpoint = @kept AND mine.task_id = submissions.task_id))
           AND (idempotency_key IS NULL OR superseded_by IS NOT NULL OR NOT EXISTS (
                 SELECT 1 FROM submissions AS mine WHERE mine.endpoint = @kept
                   AND mine.idempotency_key = submissions.idempotency_key AND mine.superseded_by IS NULL))`,
      ),
      // checked again: the server still knows the task, so it is followed again by the one checking
      reopen: db.prepare(
        `UPDATE submissions SET local_state = ${sqlLocalState('tracking')}, terminal_reason = NULL, terminal_at = NULL,
           lease_owner = @holder, lease_expires_at = @leaseExpiresAt, updated_at = @at
         WHERE record_id = @recordId AND local_state = ${sqlLocalState('expired')} AND task_id IS NOT NULL`,
      ),
      secret: db.prepare(`SELECT secret FROM ledger_secret WHERE id = 1`),
      insertSecret: db.prepare(`INSERT OR IGNORE INTO ledger_secret (id, secret) VALUES (1, ?)`),
      abandonedSubmissions: db.prepare(
        `SELECT ${RECORD_COLUMNS} FROM ${RECORDS}
         WHERE endpoint = ? AND local_state = ${sqlLocalState('submitting')} AND (lease_expires_at IS NULL OR ${LEASE_UNTIL} < ?)`,
      ),
      settleAbandoned: db.prepare(
        `UPDATE submissions SET local_state = ${sqlLocalState('unknown-outcome')}, terminal_reason = @reason, terminal_at = @at,
           lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
         WHERE record_id = @recordId AND local_state = ${sqlLocalState('submitting')}`,
      ),
      detach: db.prepare(
        `UPDATE submissions SET local_state = ${sqlLocalState('detached')}, lease_owner = NULL, lease_expires_at = NULL,
           next_poll_at = NULL, updated_at = @at
         WHERE record_id = @recordId AND lease_owner = @holder AND local_state = ${sqlLocalState('tracking')}`,
      ),
      cancelRequest: db.prepare(
        `UPDATE submissions SET cancel_requested_at = COALESCE(cancel_requested_at, ?), updated_at = ?
         WHERE record_id = ?`,
      ),
      // a lease is free when nobody holds it, it is ours, or its holder stopped renewing it
      // the records of a JSON array of ids in one statement: a resume claims thousands (bench/RESULTS.md, section 28)
      claim: db
        .prepare(
          `UPDATE submissions SET lease_owner = @holder, lease_expires_at = @leaseExpiresAt,
             local_state = CASE local_state WHEN ${sqlLocalState('detached')} THEN ${sqlLocalState('tracking')} ELSE local_state END
           WHERE record_id IN (SELECT value FROM json_each(@recordIds)) AND ${localStateIn(['tracking', 'detached'])}
             AND (lease_owner IS NULL OR lease_owner = @holder OR ${LEASE_UNTIL} < @now)
           RETURNING record_id`,
        )
        .pluck(),
      detachedAmong: db.prepare(
        `SELECT ${RECORD_COLUMNS} FROM ${RECORDS}
         WHERE record_id IN (SELECT value FROM json_each(?)) AND local_state = ${sqlLocalState('detached')}`,
      ),
      // the holder's latest word on when its leases end (LEASE_UNTIL): a renewal, or a lease just given to it
      setHolder: db.prepare(
        `INSERT INTO lease_holders (holder, expires_at) VALUES (?, ?)
         ON CONFLICT (holder) DO UPDATE SET expires_at = excluded.expires_at`,
      ),
      forgetHolders: db.prepare(`DELETE FROM lease_holders WHERE expires_at < ?`),
      forgetHolder: db.prepare(`DELETE FROM lease_holders WHERE holder = ?`),
      release: db.prepare(
        `UPDATE submissions SET lease_owner = NULL, lease_expires_at = NULL WHERE record_id = ? AND lease_owner = ?`,
      ),
      releaseAllOf: db.prepare(
        `UPDATE submissions SET lease_owner = NULL, lease_expires_at = NULL WHERE lease_owner = ?`,
      ),
      trackedBy: db.prepare(
        `SELECT 1 FROM submissions WHERE record_id = ? AND lease_owner = ? AND local_state = ${sqlLocalState('tracking')}`,
      ),
      trackedAmong: db
        .prepare(
          `SELECT record_id FROM submissions
           WHERE record_id IN (SELECT value FROM json_each(?)) AND lease_owner = ? AND local_state = ${sqlLocalState('tracking')}`,
        )
        .pluck(),
      appendHistory: db.prepare(
        `INSERT INTO status_history (record_id, task_id, status, status_message, local_state, server_updated_at,
           observed_at, note)
         VALUES (@recordId, @taskId, @status, @statusMessage, @localState, @serverUpdatedAt, @observedAt, @note)`,
      ),
      history: db.prepare(`SELECT * FROM status_history WHERE record_id = ? ORDER BY seq`),
      inputs: db.prepare(
        `SELECT key, request, asked_at, response, answered_at, sent_at FROM input_answers
         WHERE record_id = ? ORDER BY seq`,
      ),
      // the inputs of many records at once, for list()
      inputsOf: db.prepare(
        `SELECT record_id, key, request, asked_at, response, answered_at, sent_at FROM input_answers
         WHERE record_id IN (SELECT value FROM json_each(?)) ORDER BY record_id, seq`,
      ),
      input: db.prepare(
        `SELECT key, request, asked_at, response, answered_at, sent_at FROM input_answers
         WHERE record_id = ? AND key = ?`,
      ),
      insertInput: db.prepare(
        `INSERT INTO input_answers (record_id, key, seq, request, asked_at, response, answered_at)
         VALUES (@recordId, @key, (SELECT COUNT(*) FROM input_answers WHERE record_id = @recordId), @request,
           @askedAt, @response, @answeredAt)
         ON CONFLICT (record_id, key) DO NOTHING`,
      ),
      markAsked: db.prepare(
        `UPDATE input_answers SET asked_at = COALESCE(asked_at, ?) WHERE record_id = ? AND key = ?`,
      ),
      // the first stored answer wins: a key is answered once (S9)
      storeAnswer: db.prepare(
        `UPDATE input_answers SET response = ?, answered_at = ?
         WHERE record_id = ? AND key = ? AND response IS NULL`,
      ),
      markInputSent: db.prepare(
        `UPDATE input_answers SET sent_at = ? WHERE record_id = ? AND key = ? AND response IS NOT NULL`,
      ),
    };
    this.writeTransaction = db.transaction((work: () => unknown) => {
      this.writeNotes();
      return work();
    });
    this.group = new SqliteGroupCommit(db, () => this.writeNotes());
  }

  async recordIntent(submission: NewSubmission): Promise<RecordedIntent> {
    return this.group.run(() => this.insertIntent(submission));
  }

  async recordResubmission(previousRecordId: string, submission: NewSubmission): Promise<RecordedIntent> {
    return this.group.run((): RecordedIntent => {
      // supersede first so the new record may carry the same idempotency key
      if (this.stmt.supersede.run(submission.recordId, submission.submittedAt, previousRecordId).changes !== 1) {
        const previous = this.stmt.get.get(previousRecordId) as SubmissionRow | undefined;
        if (!previous) throw new Error(`no ledger record ${previousRecordId} to resubmit`);
        const refused = previous.superseded_by === null ? 'still-open' : 'already-resubmitted';
        const record = this.mustGet(previous.superseded_by ?? previous.record_id);
        return { created: false, record, refused };
      }
      return this.insertIntent(submission);
    });
  }

  private insertIntent(submission: NewSubmission): RecordedIntent {
    // inside the write transaction: two processes that reach a new server under two spellings make one spelling
    const endpoint = this.spelling(submission.endpoint);
    if (submission.idempotencyKey !== undefined) {
      const existing = this.stmt.byIdempotencyKey.get(endpoint, submission.idempotencyKey) as SubmissionRow | undefined;
      if (existing) return { created: false, record: this.toRecord(existing) };
    }
    this.stmt.insert.run({
      recordId: submission.recordId,
      endpoint,
      toolName: submission.toolName,
      arguments: JSON.stringify(submission.arguments),
      argumentsDigest: submission.argumentsDigest,
      correlationId: submission.correlationId ?? null,
      idempotencyKey: submission.idempotencyKey ?? null,
      wireIdempotencyKey: submission.wireIdempotencyKey ?? null,
      credential: submission.credential ?? null,
      submittedAt: submission.submittedAt,
      resubmittedFrom: submission.resubmittedFrom ?? null,
      leaseHolder: submission.leaseHolder,
      leaseExpiresAt: submission.leaseExpiresAt,
      traceContext: submission.traceContext ? JSON.stringify(submission.traceContext) : null,
    });
    this.stmt.setHolder.run(submission.leaseHolder, submission.leaseExpiresAt);
    this.appendHistory({
      recordId: submission.recordId,
      localState: 'submitting',
      observedAt: submission.submittedAt,
      note: submission.resubmittedFrom ? `resubmission of ${submission.resubmittedFrom}` : 'intent recorded',
    });
    return { created: true, record: this.mustGet(submission.recordId) };
  }

  async markSent(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.group.run(() => this.stmt.markSent.run({ recordId, holder, at }).changes === 1);
  }

  async commitTask(
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    leaseExpiresAt?: number,
  ): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before) return false;
      if (before.task_id === task.taskId) return true;
      const other = this.stmt.byTaskId.get(before.endpoint, task.taskId) as SubmissionRow | undefined;
      if (other) {
        // another record got the same task first (a resubmission that reused the idempotency key): say so here
        if (before.task_id === null) {
          this.appendLocalChange(before, before.local_state, at, taskHeldElsewhereNote(task.taskId, other.record_id));
        }
        return false;
      }
      const localState = this.applyTask(this.stmt.commitTask, recordId, holder, task, at, {
        leaseExpiresAt: leaseExpiresAt ?? null,
      });
      if (localState === undefined) return false;
      if (leaseExpiresAt !== undefined) this.stmt.setHolder.run(holder, leaseExpiresAt);
      const note = commitNote({ localState: before.local_state, terminalReason: before.terminal_reason });
      this.appendObserved(recordId, task, localState, at, note);
      return true;
    });
  }

  async recordObservation(recordId: string, holder: string, task: ObservedTask, at: number): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before) return false;
      const localState = this.applyTask(this.stmt.observe, recordId, holder, task, at);
      if (localState === undefined) return false;
      if (before.status !== task.status) this.appendObserved(recordId, task, localState, at);
      return true;
    });
  }

  async recordPoll(
    recordId: string,
    holder: string,
    at: number,
    lastError: RecordedError | undefined,
  ): Promise<boolean> {
    const params = { recordId, holder, at, lastError: lastError ? JSON.stringify(lastError) : null };
    return this.group.run(() => this.stmt.recordPoll.run(params).changes === 1);
  }

  noteSchedule(recordId: string, holder: string, note: ScheduleNote): void {
    const merged = mergeNote(this.pendingNotes.get(recordId), holder, note);
    this.pendingNotes.set(recordId, merged);
    if (this.noteTimer === undefined) {
      this.noteTimer = setTimeout(() => this.flushNotes(), this.deferMs);
      // pending bookkeeping must not keep a process alive; dispose() writes what is left
      this.noteTimer.unref();
    }
  }

  async recordError(recordId: string, lastError: RecordedError): Promise<void> {
    await this.group.run(() => this.stmt.recordError.run(JSON.stringify(lastError), lastError.at, recordId));
  }

  async closeOut(recordId: string, holder: string, closing: Closing, at: number): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before) return false;
      const changed = (closing.arrived ? this.stmt.closeArrived : this.stmt.close).run({
        recordId,
        holder,
        at,
        localState: closing.localState,
        reason: closing.reason,
        result: closing.result ? JSON.stringify(closing.result) : null,
        error: closing.error ? JSON.stringify(closing.error) : null,
        lastError: closing.lastError ? JSON.stringify(closing.lastError) : null,
      }).changes;
      if (changed !== 1) return false;
      const note = closing.arrived
        ? answeredNote({ localState: before.local_state, terminalReason: before.terminal_reason }, closing.reason)
        : closing.reason;
      this.appendLocalChange(before, closing.localState, at, note);
      return true;
    });
  }

  async reopen(recordId: string, holder: string, leaseExpiresAt: number, at: number, note: string): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before || this.stmt.reopen.run({ recordId, holder, leaseExpiresAt, at }).changes !== 1) return false;
      this.stmt.setHolder.run(holder, leaseExpiresAt);
      this.appendLocalChange(before, 'tracking', at, note);
      return true;
    });
  }

  async secret(): Promise<Uint8Array> {
    const row = this.stmt.secret.get() as { secret: Buffer } | undefined;
    if (row) return row.secret;
    // the first process to need it writes it; a racing one's insert is ignored and both read the same secret
    await this.group.run(() => this.stmt.insertSecret.run(randomBytes(32)));
    return (this.stmt.secret.get() as { secret: Buffer }).secret;
  }

  async settleAbandonedSubmissions(endpoint: string, now: number, reason: string): Promise<TaskRecord[]> {
    return this.group.run((): TaskRecord[] => {
      const rows = this.stmt.abandonedSubmissions.all(this.spelling(endpoint), now) as SubmissionRow[];
      for (const row of rows) {
        const why = abandonedReason(reason, row.sent_at);
        this.stmt.settleAbandoned.run({ recordId: row.record_id, reason: why, at: now });
        this.appendHistory({ recordId: row.record_id, localState: 'unknown-outcome', observedAt: now, note: why });
      }
      return rows.map((row) => this.mustGet(row.record_id));
    });
  }

  async detach(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.group.run((): boolean => {
      const before = this.stmt.get.get(recordId) as SubmissionRow | undefined;
      if (!before || this.stmt.detach.run({ recordId, holder, at }).changes !== 1) return false;
      this.appendLocalChange(before, 'detached', at, 'detached by the application');
      return true;
    });
  }

  async recordCancelRequest(recordId: string, at: number): Promise<void> {
    await this.group.run(() => this.stmt.cancelRequest.run(at, at, recordId));
  }

  async claim(recordId: string, holder: string, leaseExpiresAt: number, now: number): Promise<boolean> {
    return (await this.claimAll([recordId], holder, leaseExpiresAt, now)).length > 0;
  }

  async claimAll(recordIds: readonly string[], holder: string, leaseExpiresAt: number, now: number): Promise<string[]> {
    if (recordIds.length === 0) return [];
    return this.group.run(() => {
      const ids = JSON.stringify(recordIds);
      // the whole row only of a record the claim attaches (its history line), read before the claim changes it
      const detached = this.stmt.detachedAmong.all(ids) as SubmissionRow[];
      const taken = new Set(this.stmt.claim.all({ recordIds: ids, holder, leaseExpiresAt, now }) as string[]);
      if (taken.size === 0) return [];
      // dated by the ledger's clock: `now` is the bound a lease lapsed before (1 for a client not yet at its server)
      const at = this.now();
      for (const before of detached) {
        if (taken.has(before.record_id)) this.appendLocalChange(before, 'tracking', at, 'attached');
      }
      // one write of the holder's row for all of them
      this.stmt.setHolder.run(holder, leaseExpiresAt);
      return recordIds.filter((recordId) => taken.has(recordId));
    });
  }

  async isTrackedBy(recordId: string, holder: string): Promise<boolean> {
    return this.stmt.trackedBy.get(recordId, holder) !== undefined;
  }

  async trackedAmong(recordIds: readonly string[], holder: string): Promise<ReadonlySet<string>> {
    return new Set(this.stmt.trackedAmong.all(JSON.stringify(recordIds), holder) as string[]);
  }

  async renewLeases(holder: string, leaseExpiresAt: number): Promise<void> {
    await this.group.run(() => {
      this.stmt.setHolder.run(holder, leaseExpiresAt);
      this.stmt.forgetHolders.run(leaseExpiresAt - FORGET_HOLDERS_AFTER_MS);
    });
  }

  async release(recordId: string, holder: string): Promise<void> {
    await this.group.run(() => this.stmt.release.run(recordId, holder));
  }

  async releaseAllOf(holder: string): Promise<number> {
    return this.group.run(() => {
      this.stmt.forgetHolder.run(holder);
      return this.stmt.releaseAllOf.run(holder).changes;
    });
  }

  async recordInputAsked(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    at: number,
  ): Promise<boolean> {
    return this.group.run((): boolean => {
      if (!this.stmt.holdsLease.get(recordId, holder)) return false;
      this.stmt.insertInput.run({
        recordId,
        key,
        request: JSON.stringify(request),
        askedAt: at,
        response: null,
        answeredAt: null,
      });
      this.stmt.markAsked.run(at, recordId, key);
      return true;
    });
  }

  async recordInputAnswer(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    response: InputResponse,
    at: number,
  ): Promise<InputAnswer | undefined> {
    const json = JSON.stringify(response);
    return this.group.run((): InputAnswer | undefined => {
      // a person's answer is kept whoever holds the lease now (docs/DESIGN.md rule 10): the holder sends stored answers
      if (!this.stmt.get.get(recordId)) return undefined;
      this.stmt.insertInput.run({
        recordId,
        key,
        request: JSON.stringify(request),
        askedAt: null,
        response: json,
        answeredAt: at,
      });
      this.stmt.storeAnswer.run(json, at, recordId, key);
      const row = this.stmt.input.get(recordId, key) as InputRow | undefined;
      return row ? toInputAnswer(row) : undefined;
    });
  }

  async recordInputsSent(recordId: string, keys: readonly string[], at: number): Promise<void> {
    await this.group.run(() => {
      for (const key of keys) this.stmt.markInputSent.run(at, recordId, key);
    });
  }

  async get(recordId: string): Promise<TaskRecord | undefined> {
    const row = this.stmt.get.get(recordId) as SubmissionRow | undefined;
    return row ? this.toRecord(row) : undefined;
  }

  async findByTaskId(endpoint: string, taskId: string): Promise<TaskRecord | undefined> {
    const row = this.stmt.byTaskId.get(this.spelling(endpoint), taskId) as SubmissionRow | undefined;
    return row ? this.toRecord(row) : undefined;
  }

  async findByIdempotencyKey(endpoint: string, idempotencyKey: string): Promise<TaskRecord | undefined> {
    const row = this.stmt.byIdempotencyKey.get(this.spelling(endpoint), idempotencyKey) as SubmissionRow | undefined;
    return row ? this.toRecord(row) : undefined;
  }

  async list(filter: LedgerFilter = {}): Promise<TaskRecord[]> {
    const rows = this.stmt.list.all({
      endpoint: filter.endpoint === undefined ? null : this.spelling(filter.endpoint),
      states: filter.localStates ? JSON.stringify(filter.localStates) : null,
      toolName: filter.toolName ?? null,
      correlationId: filter.correlationId ?? null,
      idempotencyKey: filter.idempotencyKey ?? null,
      since: filter.submittedSince ?? null,
      claimableAt: filter.claimableAt ?? null,
      limit: filter.limit ?? -1,
    }) as SubmissionRow[];
    // one query for the inputs of every row, not one per row: a resume lists thousands
    const inputs = new Map<string, InputAnswer[]>();
    if (rows.length > 0) {
      const ids = JSON.stringify(rows.map((row) => row.record_id));
      for (const input of this.stmt.inputsOf.all(ids) as (InputRow & { record_id: string })[]) {
        const list = inputs.get(input.record_id) ?? [];
        list.push(toInputAnswer(input));
        inputs.set(input.record_id, list);
      }
    }
    return rows.map((row) => this.toRecord(row, inputs.get(row.record_id) ?? []));
  }

  async history(recordId: string): Promise<HistoryEntry[]> {
    return (this.stmt.history.all(recordId) as HistoryRow[]).map(toHistoryEntry);
  }

  async listRecords(query: RecordListQuery = {}): Promise<RecordListPage> {
    const { text, values, limit } = recordListStatement(query, SQLITE_LISTING);
    return toRecordPage(this.db.prepare(text).all(namedValues(values)) as RecordSummaryRow[], limit);
  }

  async countRecords(query: RecordListQuery = {}): Promise<RecordCounts> {
    const { text, values } = recordCountStatement(query, SQLITE_LISTING);
    return toRecordCounts(this.db.prepare(text).all(namedValues(values)) as Parameters<typeof toRecordCounts>[0]);
  }

  /** One machine's ledger: its processes share the host's clock (Ledger.now). */
  now(): number {
    return Date.now();
  }

  async dispose(): Promise<void> {
    if (!this.db.open) return;
    // writes already asked for are committed (or failed) before the file closes, never dropped
    this.group.commit();
    this.flushNotes();
    this.db.close();
  }

  /**
   * The spelling this ledger stores the server `endpoint` names under: the first spelling of its
   * endpointIdentity ever stored. Rows under other spellings of it (an earlier build stored the URL as typed) are
   * moved to that one on first sight, except rows that would duplicate a task or a live key. A server not yet in the
   * ledger keeps the spelling given, which is a URL that reached it: the CLI connects to a record's endpoint.
   */
  private spelling(endpoint: string): string {
    const identity = endpointIdentity(endpoint);
    const known = this.spellings.get(identity);
    if (known !== undefined) return known;
    const stored = (this.stmt.endpointSpellings.all() as { endpoint: string }[])
      .map((row) => row.endpoint)
      .filter((spelling) => endpointIdentity(spelling) === identity);
    const [kept, ...others] = stored;
    if (kept === undefined) return endpoint;
    if (others.length > 0) {
      this.write(() => {
        for (const other of others) this.stmt.adoptSpelling.run({ kept, other });
      });
      // inside a write of a group the move commits with the group, or is undone with it: remembered once committed
      if (this.db.inTransaction) return kept;
    }
    this.spellings.set(identity, kept);
    return kept;
  }

  /** Run `work` in one IMMEDIATE transaction that also commits the pending schedule notes. */
  private write<T>(work: () => T): T {
    return this.writeTransaction.immediate(work) as T;
  }

  /** Commit the pending schedule notes now (a failure drops them: they are bookkeeping, see noteSchedule). */
  private flushNotes(): void {
    clearTimeout(this.noteTimer);
    this.noteTimer = undefined;
    if (this.pendingNotes.size === 0 || !this.db.open) return;
    try {
      this.write(() => undefined);
    } catch {
      this.pendingNotes.clear();
    }
  }

  /** Inside a write transaction: apply every pending note (a rolled-back transaction loses them). */
  private writeNotes(): void {
    if (this.pendingNotes.size === 0) return;
    for (const [recordId, note] of this.pendingNotes) {
      this.stmt.applyNote.run({
        recordId,
        holder: note.holder,
        polledAt: note.polledAt ?? null,
        setNext: note.nextPollAt === undefined ? 0 : 1,
        nextPollAt: note.nextPollAt ?? null,
        observedAgeMs: note.observedAgeMs ?? null,
      });
    }
    this.pendingNotes.clear();
    clearTimeout(this.noteTimer);
    this.noteTimer = undefined;
  }

  /** Write a task's state with `statement` (commitTask or observe); the new local state, or undefined if refused. */
  private applyTask(
    statement: Database.Statement,
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    extra: Record<string, unknown> = {},
  ): LocalState | undefined {
    const applied = applyObservedTask(task);
    const changed = statement.run({
      ...extra,
      recordId,
      holder,
      at,
      localState: applied.localState,
      taskId: task.taskId,
      status: task.status,
      statusMessage: task.statusMessage ?? null,
      createdAt: task.createdAt,
      lastUpdatedAt: task.lastUpdatedAt,
      ttlMs: task.ttlMs,
      pollIntervalMs: task.pollIntervalMs ?? null,
      result: applied.result ? JSON.stringify(applied.result) : null,
      error: applied.error ? JSON.stringify(applied.error) : null,
      terminalReason: applied.terminalReason ?? null,
      terminalAt: applied.terminalReason === undefined ? null : at,
    }).changes;
    return changed === 1 ? applied.localState : undefined;
  }

  /** A history line for a task state the server reported. */
  private appendObserved(
    recordId: string,
    task: ObservedTask,
    localState: LocalState,
    at: number,
    note?: string,
  ): void {
    this.appendHistory(observedLine(recordId, task, localState, at, note));
  }

  /** A history line for a change of the local state, with the task state the row last observed. */
  private appendLocalChange(before: SubmissionRow, localState: LocalState, observedAt: number, note: string): void {
    this.appendHistory(localChangeLine(before, localState, observedAt, note));
  }

  private appendHistory(entry: HistoryLine): void {
    this.stmt.appendHistory.run({
      recordId: entry.recordId,
      taskId: entry.taskId ?? null,
      status: entry.status ?? null,
      statusMessage: entry.statusMessage ?? null,
      localState: entry.localState,
      serverUpdatedAt: entry.serverUpdatedAt ?? null,
      observedAt: entry.observedAt,
      note: entry.note ?? null,
    });
  }

  private mustGet(recordId: string): TaskRecord {
    const row = this.stmt.get.get(recordId) as SubmissionRow | undefined;
    if (!row) throw new Error(`ledger record ${recordId} vanished inside its own transaction`);
    return this.toRecord(row);
  }

  private toRecord(
    row: SubmissionRow,
    inputs: InputAnswer[] = (this.stmt.inputs.all(row.record_id) as InputRow[]).map(toInputAnswer),
  ): TaskRecord {
    // the lease runs out when its holder's renewals say, not at the record's own claim (LEASE_UNTIL)
    if (row.lease_until !== undefined) row.lease_expires_at = row.lease_until;
    foldScheduleNote(row);
    const record = toRecord(row, inputs);
    // what this object noted but has not committed yet, as the write will apply it
    applyNote(record, this.pendingNotes.get(row.record_id));
    return record;
  }
}

/**
 * A record's row with its schedule note (schema 7) folded in, as the note was written into the row itself before: the
 * later poll time (and `updated_at` no earlier than it), the longer observed age, and the next poll planned while the
 * record is tracked. The row's own columns count too: a build before schema 7 that still has the file open writes its
 * notes there.
 */
function foldScheduleNote(row: SubmissionRow): void {
  row.last_poll_at = later(row.last_poll_at, row.noted_poll_at);
  if (row.noted_poll_at != null) row.updated_at = Math.max(row.updated_at, row.noted_poll_at);
  row.observed_age_ms = later(row.observed_age_ms, row.noted_age_ms);
  if (row.local_state === 'tracking') row.next_poll_at = later(row.next_poll_at, row.noted_next_poll_at);
}

/** The larger of two optional numbers; null when neither is there. */
function later(a: number | null, b: number | null | undefined): number | null {
  if (b == null) return a;
  return a === null ? b : Math.max(a, b);
}
