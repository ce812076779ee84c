/**
 * The Ledger for client fleets: many worker processes on many machines sharing one PostgreSQL database (issue 17).
 * Every statement of this ledger is in `SQL` below; each write is one transaction, committed before its promise
 * resolves. The schema migrates itself, versioned, under an advisory lock, so workers starting together migrate once.
 *
 * Exactly once across the fleet rests on the database, never on a process's memory:
 * - one current record per server and idempotency key: a unique index decides two workers' race, the loser reads the
 *   winner's record and sends nothing (docs/REQUIREMENTS.md S16);
 * - a record is driven only by its lease holder, and every driving write checks the holder in the same statement (or
 *   under the row lock), so a worker whose lease was taken over has every late write refused: the lease holder id,
 *   unique per process start, is the fence;
 * - `claimAll` takes records `FOR UPDATE SKIP LOCKED`: workers resuming together split the open records, each record
 *   to one of them, which then queries it once;
 * - an input key is asked only under the lease, and answers are stored under the record's row lock: the first wins.
 * Liveness is the lease alone: a holder is alive while it renews (docs/DESIGN.md, rules learned in the field, 1).
 *
 * JSON values are TEXT written by `JSON.stringify`, as in the server's PostgreSQL store: exact round trips, including
 * strings PostgreSQL's json types refuse. Server endpoints are matched by `endpointIdentity` (issue 13 item 6).
 */
import { randomBytes } from 'node:crypto';

import type pg from 'pg';

import type { InputRequest, InputResponse, TaskStatus } from '../../protocol/index.js';
import { ConnectionGate } from '../../shared/postgres/connectionGate.js';
import { isPostgresUrl, passwordsOf, redactConnectionString } from '../../shared/postgres/connectionString.js';
import {
  DATABASE_CLOCK_SQL,
  DatabaseClock,
  renewedLeaseExpirySql,
  renewedLeaseLength,
} from '../../shared/postgres/databaseClock.js';
import { loadPg } from '../../shared/postgres/driver.js';
import { asError, wrapPostgresError } from '../../shared/postgres/errors.js';
import { runMigrations } from '../../shared/postgres/migrations.js';
import { connectionConfig, guardPool, statementTimeouts } from '../../shared/postgres/pool.js';
import { inTransaction } from '../../shared/postgres/transaction.js';
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
  optionalNumber,
  toHistoryEntry,
  toInputAnswer,
  toRecord,
} from './records.js';

/** Versioned schema: entry i takes the database from version i to i + 1. Never edit a shipped entry; append. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE closeout_ledger_submissions (
     record_id            TEXT PRIMARY KEY,
     endpoint             TEXT NOT NULL, -- as the submitting process spelled it (a URL that reached the server)
     endpoint_identity    TEXT NOT NULL, -- endpointIdentity(endpoint): what every lookup matches on
     tool_name            TEXT NOT NULL,
     arguments            TEXT NOT NULL, -- JSON text
     arguments_digest     TEXT NOT NULL,
     correlation_id       TEXT,
     idempotency_key      TEXT,
     wire_idempotency_key TEXT,
     credential           TEXT, -- a keyed fingerprint, never the credential (docs/DESIGN.md rule 5)
     task_id              TEXT,
     local_state          TEXT NOT NULL CHECK (local_state IN
                            ('submitting','tracking','terminal','expired','unknown-outcome','detached')),
     status               TEXT CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message       TEXT,
     created_at           TEXT, -- server time, ISO 8601 as sent
     last_updated_at      TEXT, -- server time, ISO 8601 as sent
     ttl_ms               BIGINT, -- NULL with a task_id: unlimited
     poll_interval_ms     BIGINT,
     submitted_at         BIGINT NOT NULL, -- local epoch ms from here on
     sent_at              BIGINT,
     last_poll_at         BIGINT,
     next_poll_at         BIGINT,
     last_error           TEXT, -- JSON RecordedError
     result               TEXT, -- JSON CallToolResult
     error                TEXT, -- JSON JSON-RPC error
     terminal_reason      TEXT,
     terminal_at          BIGINT,
     cancel_requested_at  BIGINT,
     resubmitted_from     TEXT REFERENCES closeout_ledger_submissions (record_id),
     -- deferred: a resubmission supersedes the old record before the new one (which may reuse its key) exists
     superseded_by        TEXT REFERENCES closeout_ledger_submissions (record_id) DEFERRABLE INITIALLY DEFERRED,
     lease_owner          TEXT,
     lease_expires_at     BIGINT,
     updated_at           BIGINT NOT NULL,
     observed_age_ms      BIGINT
   );
   -- a taskId names one task of one server
   CREATE UNIQUE INDEX closeout_ledger_task ON closeout_ledger_submissions (endpoint_identity, task_id)
     WHERE task_id IS NOT NULL;
   -- one current submission per server and idempotency key: the arbiter of two workers' race (S16)
   CREATE UNIQUE INDEX closeout_ledger_idempotency ON closeout_ledger_submissions (endpoint_identity, idempotency_key)
     WHERE idempotency_key IS NOT NULL AND superseded_by IS NULL;
   -- resume and the settling of abandoned submissions only ever look at open records
   CREATE INDEX closeout_ledger_open ON closeout_ledger_submissions (endpoint_identity, local_state)
     WHERE local_state IN ('submitting','tracking','detached');
   -- renewing or freeing a worker's leases is one statement over its own rows (docs/DESIGN.md rule 8)
   CREATE INDEX closeout_ledger_lease_owner ON closeout_ledger_submissions (lease_owner)
     WHERE lease_owner IS NOT NULL;
   CREATE INDEX closeout_ledger_submitted ON closeout_ledger_submissions (submitted_at);

   CREATE TABLE closeout_ledger_status_history (
     seq               BIGSERIAL PRIMARY KEY,
     record_id         TEXT NOT NULL REFERENCES closeout_ledger_submissions (record_id),
     task_id           TEXT,
     status            TEXT,
     status_message    TEXT,
     local_state       TEXT NOT NULL,
     server_updated_at TEXT,
     observed_at       BIGINT NOT NULL,
     note              TEXT
   );
   CREATE INDEX closeout_ledger_status_history_record ON closeout_ledger_status_history (record_id, seq);
   -- the audit trail is append-only (S15)
   CREATE FUNCTION closeout_ledger_history_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     RAISE EXCEPTION 'closeout_ledger_status_history is append-only';
   END $$;
   CREATE TRIGGER closeout_ledger_status_history_no_change BEFORE UPDATE OR DELETE ON closeout_ledger_status_history
     FOR EACH ROW EXECUTE FUNCTION closeout_ledger_history_append_only();
   CREATE TRIGGER closeout_ledger_status_history_no_truncate BEFORE TRUNCATE ON closeout_ledger_status_history
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_ledger_history_append_only();

   CREATE TABLE closeout_ledger_input_answers (
     record_id   TEXT NOT NULL REFERENCES closeout_ledger_submissions (record_id),
     key         TEXT NOT NULL,
     seq         INTEGER NOT NULL,
     request     TEXT NOT NULL, -- JSON text
     asked_at    BIGINT,
     response    TEXT, -- JSON text
     answered_at BIGINT,
     sent_at     BIGINT,
     PRIMARY KEY (record_id, key) -- keys are unique over a task's life (SEP-2663 "Task Update Requests")
   );

   -- the ledger's own secret, written once by the first worker that needs it
   CREATE TABLE closeout_ledger_secret (
     id     INTEGER PRIMARY KEY CHECK (id = 1),
     secret BYTEA NOT NULL
   );`,
  // 1 -> 2: the call's W3C trace context (and baggage), JSON text: a worker that resumes the record joins its trace
  // (docs/operations.md, "Observability")
  `ALTER TABLE closeout_ledger_submissions ADD COLUMN trace_context TEXT;`,
  // 2 -> 3: the records listed for people (recordListing.ts), newest first: all of them, within a local state and
  // status, within a tool; and found by task id prefix (in byte order, "C", whatever the database's collation),
  // correlation id or idempotency key, whatever the server
  `CREATE INDEX closeout_ledger_listing ON closeout_ledger_submissions (submitted_at, record_id);
   CREATE INDEX closeout_ledger_listing_state
     ON closeout_ledger_submissions (local_state, status, submitted_at, record_id);
   CREATE INDEX closeout_ledger_listing_tool ON closeout_ledger_submissions (tool_name, submitted_at, record_id);
   CREATE INDEX closeout_ledger_listing_task ON closeout_ledger_submissions (task_id COLLATE "C");
   CREATE INDEX closeout_ledger_listing_correlation ON closeout_ledger_submissions (correlation_id);
   CREATE INDEX closeout_ledger_listing_key ON closeout_ledger_submissions (idempotency_key);`,
];

/** The listing's SQL on this ledger (recordListing.ts). */
const POSTGRES_LISTING: RecordListingDialect = {
  table: 'closeout_ledger_submissions',
  placeholder: (n) => `$${n}`,
  // the database's collation may order by language rules, where a prefix is no range: "C" compares bytes
  taskIdInCodePointOrder: 'task_id COLLATE "C"',
};

/** The ledger schema version this build writes. */
export const POSTGRES_LEDGER_SCHEMA_VERSION = MIGRATIONS.length;

const OPEN_TO_DRIVE = localStateIn(['submitting', 'tracking']);
const FOLLOWABLE = localStateIn(['tracking', 'detached']);
const CLOSED = localStateIn(['terminal', 'expired', 'unknown-outcome']);

/** A submission with its inputs, read in one statement so both come from one snapshot. */
const WITH_INPUTS = `s.*, (
  SELECT json_agg(json_build_object('key', i.key, 'request', i.request, 'asked_at', i.asked_at,
           'response', i.response, 'answered_at', i.answered_at, 'sent_at', i.sent_at) ORDER BY i.seq)
  FROM closeout_ledger_input_answers i WHERE i.record_id = s.record_id
) AS inputs`;

const SQL = {
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
  // one atomic step (issue 13 item 3): only a closed record nobody resubmitted yet is superseded; the row lock makes
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

/** PostgreSQL hands BIGINT over as a string; WITH_INPUTS adds the record's input rows. */
interface SubmissionRow extends Row<string> {
  /** Present where the statement reads WITH_INPUTS; json_build_object turns BIGINT into a JSON number. */
  inputs?: InputRow[] | null;
}

interface ClaimedRow {
  record_id: string;
  previous_state: LocalState;
  task_id: string | null;
  status: TaskStatus | null;
  status_message: string | null;
}

export interface PostgresLedgerOptions {
  /**
   * Pooled connections (default 10: the scheduler's 8 polls in flight and room to spare), besides the one the lease
   * renewals have to themselves. More calls at once than this wait their turn in the process, however many.
   */
  maxConnections?: number;
  /**
   * How long making a connection may take before the call fails (a database that does not answer). Waiting for a
   * pooled connection that is busy does not count. Default 5000 ms.
   */
  connectionTimeoutMs?: number;
  /** How long one statement may take before it fails (server `statement_timeout`). Default 15000 ms. */
  statementTimeoutMs?: number;
  /** Longest a schedule note waits in memory before it is committed. Default 1000 ms. */
  deferMs?: number;
  /** Told about trouble the ledger handles on its own (an idle connection lost); the password is never in it. */
  onError?: (error: Error) => void;
}

export class PostgresLedger implements Ledger {
  /** Where the ledger lives, fit for display: the connection string without its password. */
  readonly location: string;
  private readonly pool: pg.Pool;
  private readonly gate: ConnectionGate;
  /**
   * One connection of its own for lease renewals: a renewal never waits behind the other calls, so a busy worker keeps
   * its leases (docs/DESIGN.md, "Rules learned in the field", 8, as the server's PostgreSQL store does).
   */
  private readonly leasePool: pg.Pool;
  private readonly passwords: string[];
  private readonly deferMs: number;
  private readonly onError: (error: Error) => void;
  private readonly pendingNotes = new Map<string, PendingNote>();
  /** The notes a flush is committing right now. */
  private writingNotes = new Map<string, PendingNote>();
  private noteTimer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private disposed = false;
  /** The database's clock (`now`), read on the lease connection, as PostgresTaskStore.now on the server. */
  private readonly clock = new DatabaseClock(async () => {
    const { rows } = await this.guard('read the database clock', () =>
      this.leasePool.query<{ ms: number }>(SQL.databaseClock),
    );
    return Number(rows[0]!.ms);
  });

  private constructor(driver: typeof pg, connectionString: string, options: PostgresLedgerOptions) {
    this.location = redactConnectionString(connectionString);
    this.passwords = passwordsOf(connectionString);
    this.deferMs = options.deferMs ?? 1000;
    this.onError = options.onError ?? (() => {});
    const maxConnections = options.maxConnections ?? 10;
    if (!Number.isInteger(maxConnections) || maxConnections < 1) {
      throw new RangeError(`PostgreSQL ledger: maxConnections must be a whole number >= 1, not ${maxConnections}`);
    }
    const config: pg.PoolConfig = { ...connectionConfig(connectionString, options), ...statementTimeouts(options) };
    this.pool = new driver.Pool({ ...config, max: maxConnections, application_name: 'closeout ledger' });
    this.gate = new ConnectionGate(maxConnections);
    this.leasePool = new driver.Pool({ ...config, max: 1, application_name: 'closeout ledger leases' });
    for (const pool of [this.pool, this.leasePool]) {
      guardPool(pool, (error) => this.onError(this.wrap('idle connection lost', error)));
    }
  }

  /** Connects and brings the schema to this build's version; safe when many workers start at once. */
  static async open(connectionString: string, options: PostgresLedgerOptions = {}): Promise<PostgresLedger> {
    if (!isPostgresUrl(connectionString)) {
      throw new Error(
        `PostgreSQL ledger: not a postgres:// connection string: ${redactConnectionString(connectionString)}`,
      );
    }
    // the driver is loaded here, not on import: a process on a SQLite ledger never pays for loading it
    const ledger = new PostgresLedger(loadPg(), connectionString, options);
    try {
      await ledger.migrate();
      await ledger.syncClock();
      return ledger;
    } catch (error) {
      await ledger.pool.end().catch(() => undefined);
      await ledger.leasePool.end().catch(() => undefined);
      throw error;
    }
  }

  private async migrate(): Promise<void> {
    await this.transaction('migrate', async (client) => {
      await runMigrations(client, { ...SQL, lock: SQL.migrationLock }, MIGRATIONS, 'ledger');
    });
  }

  async recordIntent(submission: NewSubmission): Promise<RecordedIntent> {
    return this.transaction('recordIntent', (client) => this.insertIntent(client, submission));
  }

  async recordResubmission(previousRecordId: string, submission: NewSubmission): Promise<RecordedIntent> {
    return this.transaction('recordResubmission', async (client): Promise<RecordedIntent> => {
      // supersede first so the new record may carry the same idempotency key
      const superseded = await client.query(SQL.supersede, [
        submission.recordId,
        submission.submittedAt,
        previousRecordId,
      ]);
      if (superseded.rowCount !== 1) {
        const previous = await this.read(client, SQL.get, [previousRecordId]);
        if (!previous) throw new Error(`no ledger record ${previousRecordId} to resubmit`);
        const refused = previous.supersededBy === undefined ? 'still-open' : 'already-resubmitted';
        const record = previous.supersededBy ? await this.read(client, SQL.get, [previous.supersededBy]) : previous;
        return { created: false, record: record ?? previous, refused };
      }
      return this.insertIntent(client, submission);
    });
  }

  private async insertIntent(client: pg.PoolClient, submission: NewSubmission): Promise<RecordedIntent> {
    const identity = endpointIdentity(submission.endpoint);
    const inserted = await client.query(SQL.insert, [
      submission.recordId,
      submission.endpoint,
      identity,
      submission.toolName,
      JSON.stringify(submission.arguments),
      submission.argumentsDigest,
      submission.correlationId ?? null,
      submission.idempotencyKey ?? null,
      submission.wireIdempotencyKey ?? null,
      submission.credential ?? null,
      submission.submittedAt,
      submission.resubmittedFrom ?? null,
      submission.leaseHolder,
      submission.leaseExpiresAt,
      submission.traceContext ? JSON.stringify(submission.traceContext) : null,
    ]);
    if (inserted.rowCount !== 1) {
      // the key is held: another worker's intent won the race (or was there before); theirs is the submission
      if (submission.idempotencyKey !== undefined) {
        const existing = await this.read(client, SQL.byIdempotencyKey, [identity, submission.idempotencyKey]);
        if (existing) return { created: false, record: existing };
      }
      throw new Error(`a ledger record ${submission.recordId} exists already`);
    }
    await this.appendHistory(client, {
      recordId: submission.recordId,
      localState: 'submitting',
      observedAt: submission.submittedAt,
      note: submission.resubmittedFrom ? `resubmission of ${submission.resubmittedFrom}` : 'intent recorded',
    });
    return { created: true, record: await this.mustRead(client, submission.recordId) };
  }

  async markSent(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.write(
      'markSent',
      async (client) => (await client.query(SQL.markSent, [recordId, holder, at])).rowCount === 1,
    );
  }

  async commitTask(
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    leaseExpiresAt?: number,
  ): Promise<boolean> {
    // two records committing one task at once: the unique index refuses the second, which then finds the other
    return this.retryOnUniqueViolation(() =>
      this.transaction('commitTask', async (client): Promise<boolean> => {
        const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
        if (!before) return false;
        if (before.task_id === task.taskId) return true;
        const other = await this.read(client, SQL.byTaskId, [endpointIdentity(before.endpoint), task.taskId]);
        if (other) {
          // another record got the same task first (a resubmission that reused the idempotency key): say so here
          if (before.task_id === null) {
            await this.appendLocalChange(
              client,
              before,
              before.local_state,
              at,
              taskHeldElsewhereNote(task.taskId, other.recordId),
            );
          }
          return false;
        }
        const applied = applyObservedTask(task);
        const changed = await client.query(SQL.commitTask, [
          recordId,
          holder,
          ...this.taskParams(task, applied, at),
          leaseExpiresAt ?? null,
          at,
        ]);
        if (changed.rowCount !== 1) return false;
        const note = commitNote({ localState: before.local_state, terminalReason: before.terminal_reason });
        await this.appendObserved(client, recordId, task, applied.localState, at, note);
        return true;
      }),
    );
  }

  async recordObservation(recordId: string, holder: string, task: ObservedTask, at: number): Promise<boolean> {
    return this.transaction('recordObservation', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before) return false;
      const applied = applyObservedTask(task);
      const changed = await client.query(SQL.observe, [recordId, holder, ...this.taskParams(task, applied, at), at]);
      if (changed.rowCount !== 1) return false;
      if (before.status !== task.status) await this.appendObserved(client, recordId, task, applied.localState, at);
      return true;
    });
  }

  async recordPoll(
    recordId: string,
    holder: string,
    at: number,
    lastError: RecordedError | undefined,
  ): Promise<boolean> {
    const params = [recordId, holder, at, lastError ? JSON.stringify(lastError) : null];
    return this.write('recordPoll', async (client) => (await client.query(SQL.recordPoll, params)).rowCount === 1);
  }

  noteSchedule(recordId: string, holder: string, note: ScheduleNote): void {
    const merged = mergeNote(this.pendingNotes.get(recordId), holder, note);
    this.pendingNotes.set(recordId, merged);
    if (this.noteTimer === undefined && !this.disposed) {
      this.noteTimer = setTimeout(() => void this.flushNotes(), this.deferMs);
      // pending bookkeeping must not keep a process alive; dispose() writes what is left
      this.noteTimer.unref();
    }
  }

  async recordError(recordId: string, lastError: RecordedError): Promise<void> {
    await this.write('recordError', (client) =>
      client.query(SQL.recordError, [recordId, JSON.stringify(lastError), lastError.at]),
    );
  }

  async closeOut(recordId: string, holder: string, closing: Closing, at: number): Promise<boolean> {
    return this.transaction('close', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before) return false;
      const changed = await client.query(closing.arrived ? SQL.closeArrived : SQL.close, [
        recordId,
        holder,
        closing.localState,
        closing.reason,
        at,
        closing.result ? JSON.stringify(closing.result) : null,
        closing.error ? JSON.stringify(closing.error) : null,
        closing.lastError ? JSON.stringify(closing.lastError) : null,
      ]);
      if (changed.rowCount !== 1) return false;
      const note = closing.arrived
        ? answeredNote({ localState: before.local_state, terminalReason: before.terminal_reason }, closing.reason)
        : closing.reason;
      await this.appendLocalChange(client, before, closing.localState, at, note);
      return true;
    });
  }

  async reopen(recordId: string, holder: string, leaseExpiresAt: number, at: number, note: string): Promise<boolean> {
    return this.transaction('reopen', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before) return false;
      if ((await client.query(SQL.reopen, [recordId, holder, leaseExpiresAt, at])).rowCount !== 1) return false;
      await this.appendLocalChange(client, before, 'tracking', at, note);
      return true;
    });
  }

  async settleAbandonedSubmissions(endpoint: string, now: number, reason: string): Promise<TaskRecord[]> {
    return this.transaction('settleAbandonedSubmissions', async (client): Promise<TaskRecord[]> => {
      const rows = (await client.query<SubmissionRow>(SQL.abandonedSubmissions, [endpointIdentity(endpoint), now]))
        .rows;
      const settled: TaskRecord[] = [];
      for (const row of rows) {
        const why = abandonedReason(reason, optionalNumber(row.sent_at));
        await client.query(SQL.settleAbandoned, [row.record_id, why, now]);
        await this.appendHistory(client, {
          recordId: row.record_id,
          localState: 'unknown-outcome',
          observedAt: now,
          note: why,
        });
        settled.push(await this.mustRead(client, row.record_id));
      }
      return settled;
    });
  }

  async detach(recordId: string, holder: string, at: number): Promise<boolean> {
    return this.transaction('detach', async (client): Promise<boolean> => {
      const before = (await client.query<SubmissionRow>(SQL.lock, [recordId])).rows[0];
      if (!before || (await client.query(SQL.detach, [recordId, holder, at])).rowCount !== 1) return false;
      await this.appendLocalChange(client, before, 'detached', at, 'detached by the application');
      return true;
    });
  }

  async recordCancelRequest(recordId: string, at: number): Promise<void> {
    await this.write('recordCancelRequest', (client) => client.query(SQL.cancelRequest, [recordId, at]));
  }

  async claim(recordId: string, holder: string, leaseExpiresAt: number, now: number): Promise<boolean> {
    return this.transaction('claim', async (client) => {
      const { rows } = await client.query<ClaimedRow>(SQL.claimOne, [recordId, holder, leaseExpiresAt, now]);
      await this.noteAttached(client, rows);
      return rows.length === 1;
    });
  }

  async claimAll(recordIds: readonly string[], holder: string, leaseExpiresAt: number, now: number): Promise<string[]> {
    if (recordIds.length === 0) return [];
    return this.transaction('claimAll', async (client) => {
      const { rows } = await client.query<ClaimedRow>(SQL.claim, [[...recordIds], holder, leaseExpiresAt, now]);
      await this.noteAttached(client, rows);
      const claimed = new Set(rows.map((row) => row.record_id));
      return recordIds.filter((recordId) => claimed.has(recordId));
    });
  }

  /**
   * A history line for every claimed record that was detached: it is tracked again, dated by the ledger's clock (a
   * claim's `now` is the bound its lease lapsed before, 1 for a client that has not reached its server yet).
   */
  private async noteAttached(client: pg.PoolClient, rows: readonly ClaimedRow[]): Promise<void> {
    const at = this.now();
    for (const row of rows) {
      if (row.previous_state !== 'detached') continue;
      await this.appendHistory(client, {
        recordId: row.record_id,
        taskId: row.task_id ?? undefined,
        status: row.status ?? undefined,
        statusMessage: row.status_message ?? undefined,
        localState: 'tracking',
        observedAt: at,
        note: 'attached',
      });
    }
  }

  async isTrackedBy(recordId: string, holder: string): Promise<boolean> {
    return this.guard('isTrackedBy', async () => (await this.query(SQL.trackedBy, [recordId, holder])).rowCount === 1);
  }

  async trackedAmong(recordIds: readonly string[], holder: string): Promise<ReadonlySet<string>> {
    return this.guard('trackedAmong', async () => {
      const { rows } = await this.query<{ record_id: string }>(SQL.trackedAmong, [recordIds, holder]);
      return new Set(rows.map((row) => row.record_id));
    });
  }

  async renewLeases(holder: string, leaseExpiresAt: number): Promise<void> {
    // one statement on the lease connection: neither the pending schedule notes nor the other calls go first
    await this.guard('renewLeases', () =>
      this.leasePool.query(SQL.renewLeases, [
        holder,
        leaseExpiresAt,
        renewedLeaseLength(leaseExpiresAt, this.clock.now()),
      ]),
    );
  }

  async release(recordId: string, holder: string): Promise<void> {
    await this.write('release', (client) => client.query(SQL.release, [recordId, holder]));
  }

  async releaseAllOf(holder: string): Promise<number> {
    return this.write('releaseAllOf', async (client) => (await client.query(SQL.releaseAllOf, [holder])).rowCount ?? 0);
  }

  async recordInputAsked(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    at: number,
  ): Promise<boolean> {
    return this.transaction('recordInputAsked', async (client): Promise<boolean> => {
      // the lease is checked under the row lock, so no worker takes the record over between check and write
      if ((await client.query(SQL.lockHeld, [recordId, holder])).rowCount !== 1) return false;
      await client.query(SQL.insertInput, [recordId, key, JSON.stringify(request), at, null, null]);
      await client.query(SQL.markAsked, [recordId, key, at]);
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
    return this.transaction('recordInputAnswer', async (client): Promise<InputAnswer | undefined> => {
      // a person's answer is kept whoever holds the lease now (docs/DESIGN.md rule 10); the row lock orders two answers
      if ((await client.query(SQL.lockAny, [recordId])).rowCount !== 1) return undefined;
      await client.query(SQL.insertInput, [recordId, key, JSON.stringify(request), null, json, at]);
      await client.query(SQL.storeAnswer, [recordId, key, json, at]);
      const row = (await client.query<InputRow>(SQL.input, [recordId, key])).rows[0];
      return row ? toInputAnswer(row) : undefined;
    });
  }

  async recordInputsSent(recordId: string, keys: readonly string[], at: number): Promise<void> {
    await this.write('recordInputsSent', (client) => client.query(SQL.markInputsSent, [recordId, [...keys], at]));
  }

  async get(recordId: string): Promise<TaskRecord | undefined> {
    return this.guard('get', () => this.read(undefined, SQL.get, [recordId]));
  }

  async findByTaskId(endpoint: string, taskId: string): Promise<TaskRecord | undefined> {
    return this.guard('findByTaskId', () => this.read(undefined, SQL.byTaskId, [endpointIdentity(endpoint), taskId]));
  }

  async findByIdempotencyKey(endpoint: string, idempotencyKey: string): Promise<TaskRecord | undefined> {
    return this.guard('findByIdempotencyKey', () =>
      this.read(undefined, SQL.byIdempotencyKey, [endpointIdentity(endpoint), idempotencyKey]),
    );
  }

  async list(filter: LedgerFilter = {}): Promise<TaskRecord[]> {
    return this.guard('list', async () => {
      const { rows } = await this.query<SubmissionRow>(SQL.list, [
        filter.endpoint === undefined ? null : endpointIdentity(filter.endpoint),
        filter.localStates ? [...filter.localStates] : null,
        filter.toolName ?? null,
        filter.correlationId ?? null,
        filter.idempotencyKey ?? null,
        filter.submittedSince ?? null,
        filter.limit ?? null,
        filter.claimableAt ?? null,
      ]);
      return rows.map((row) => this.toRecord(row));
    });
  }

  async listRecords(query: RecordListQuery = {}): Promise<RecordListPage> {
    const { text, values, limit } = recordListStatement(query, POSTGRES_LISTING);
    return this.guard('listRecords', async () =>
      toRecordPage((await this.query<RecordSummaryRow>(text, values)).rows, limit),
    );
  }

  async countRecords(query: RecordListQuery = {}): Promise<RecordCounts> {
    const { text, values } = recordCountStatement(query, POSTGRES_LISTING);
    return this.guard('countRecords', async () =>
      toRecordCounts((await this.query<Parameters<typeof toRecordCounts>[0][number]>(text, values)).rows),
    );
  }

  async history(recordId: string): Promise<HistoryEntry[]> {
    return this.guard('history', async () => {
      const { rows } = await this.query<HistoryRow>(SQL.history, [recordId]);
      return rows.map(toHistoryEntry);
    });
  }

  async secret(): Promise<Uint8Array> {
    return this.guard('secret', async () => {
      const existing = (await this.query<{ secret: Buffer }>(SQL.secret)).rows[0];
      if (existing) return existing.secret;
      // the first worker to need it writes it; a racing one's insert does nothing and both read the same secret
      await this.query(SQL.insertSecret, [randomBytes(32)]);
      return (await this.query<{ secret: Buffer }>(SQL.secret)).rows[0]!.secret;
    });
  }

  /**
   * The database's time (Ledger.now): every worker of the fleet stamps and compares leases on it, whatever its host's
   * wall clock says (docs/DESIGN.md, "Rules learned in the field", 2). Off by at most half the round trip of the read
   * it was taken from, and by the monotonic clock's drift since (read again every minute).
   */
  now(): number {
    return this.clock.now();
  }

  /** Reads the database's clock, and from then on every minute (DatabaseClock.sync). */
  private async syncClock(): Promise<void> {
    await this.clock.sync();
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.clock.stop();
    await this.flushNotes();
    await Promise.all([this.pool.end(), this.leasePool.end()]);
  }

  /** A write that is one statement: the pending schedule notes are committed first. */
  private async write<T>(op: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.transaction(op, fn);
  }

  /**
   * Runs `fn` in one transaction on one connection, after committing the pending schedule notes (they ride along
   * with the next write, as in the SQLite ledger). A deadlock the database broke is tried again, a few times.
   */
  private async transaction<T>(op: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    if (op !== 'migrate' && op !== 'notes') await this.flushNotes();
    return this.guard(op, async () => {
      for (let attempt = 1; ; attempt++) {
        try {
          return await this.once(fn);
        } catch (error) {
          const code = (error as { code?: unknown }).code;
          if ((code === '40P01' || code === '40001') && attempt < 5) continue;
          throw error;
        }
      }
    });
  }

  private once<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.gate.run(() => inTransaction(this.pool, fn));
  }

  /** One statement outside a transaction, through the gate. */
  private query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    statement: string,
    params?: unknown[],
  ): Promise<pg.QueryResult<R>> {
    return this.gate.run(() => this.pool.query<R>(statement, params));
  }

  private async retryOnUniqueViolation<T>(fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      if ((error as { cause?: { code?: unknown } }).cause?.code !== '23505') throw error;
      return fn();
    }
  }

  /** Commit the pending schedule notes now, in one statement (a failure drops them: they are bookkeeping). */
  private async flushNotes(): Promise<void> {
    clearTimeout(this.noteTimer);
    this.noteTimer = undefined;
    while (this.flushing) await this.flushing;
    if (this.pendingNotes.size === 0) return;
    const notes = [...this.pendingNotes].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    // still shown by reads of this object until the write is done (noteSchedule: "reads see it at once")
    this.writingNotes = new Map(notes);
    this.pendingNotes.clear();
    const params = [
      notes.map(([recordId]) => recordId),
      notes.map(([, note]) => note.holder),
      notes.map(([, note]) => note.polledAt ?? null),
      notes.map(([, note]) => note.nextPollAt !== undefined),
      notes.map(([, note]) => note.nextPollAt ?? null),
      notes.map(([, note]) => note.observedAgeMs ?? null),
    ];
    this.flushing = this.transaction('notes', (client) => client.query(SQL.applyNotes, params)).then(
      () => undefined,
      (error: unknown) => this.onError(asError(error)),
    );
    try {
      await this.flushing;
    } finally {
      this.flushing = undefined;
      this.writingNotes = new Map();
    }
  }

  private taskParams(task: ObservedTask, applied: ReturnType<typeof applyObservedTask>, at: number): unknown[] {
    return [
      task.taskId,
      applied.localState,
      task.status,
      task.statusMessage ?? null,
      task.createdAt,
      task.lastUpdatedAt,
      task.ttlMs,
      task.pollIntervalMs ?? null,
      applied.result ? JSON.stringify(applied.result) : null,
      applied.error ? JSON.stringify(applied.error) : null,
      applied.terminalReason ?? null,
      applied.terminalReason === undefined ? null : at,
    ];
  }

  /** One record: inside a transaction on its `client`, else through the gate. */
  private async read(
    client: pg.PoolClient | undefined,
    statement: string,
    params: unknown[],
  ): Promise<TaskRecord | undefined> {
    const result = client
      ? await client.query<SubmissionRow>(statement, params)
      : await this.query<SubmissionRow>(statement, params);
    const row = result.rows[0];
    return row ? this.toRecord(row) : undefined;
  }

  private async mustRead(client: pg.PoolClient, recordId: string): Promise<TaskRecord> {
    const record = await this.read(client, SQL.get, [recordId]);
    if (!record) throw new Error(`ledger record ${recordId} vanished inside its own transaction`);
    return record;
  }

  private async appendObserved(
    client: pg.PoolClient,
    recordId: string,
    task: ObservedTask,
    localState: LocalState,
    at: number,
    note?: string,
  ): Promise<void> {
    await this.appendHistory(client, observedLine(recordId, task, localState, at, note));
  }

  private async appendLocalChange(
    client: pg.PoolClient,
    before: SubmissionRow,
    localState: LocalState,
    observedAt: number,
    note: string,
  ): Promise<void> {
    await this.appendHistory(client, localChangeLine(before, localState, observedAt, note));
  }

  private async appendHistory(client: pg.PoolClient, entry: HistoryLine): Promise<void> {
    await client.query(SQL.appendHistory, [
      entry.recordId,
      entry.taskId ?? null,
      entry.status ?? null,
      entry.statusMessage ?? null,
      entry.localState,
      entry.serverUpdatedAt ?? null,
      entry.observedAt,
      entry.note ?? null,
    ]);
  }

  private toRecord(row: SubmissionRow): TaskRecord {
    const record = toRecord(row, (row.inputs ?? []).map(toInputAnswer));
    // what this object noted but has not committed yet, as the write will apply it (the older notes first)
    applyNote(record, this.writingNotes.get(record.recordId));
    applyNote(record, this.pendingNotes.get(record.recordId));
    return record;
  }

  /** Database trouble surfaces as an Error that says which ledger call failed, marked transient when it may pass. */
  private async guard<T>(op: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (error) {
      throw this.wrap(op, error);
    }
  }

  private wrap(op: string, error: unknown): Error {
    return wrapPostgresError('PostgreSQL ledger', op, error, this.passwords);
  }
}
