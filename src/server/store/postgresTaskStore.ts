/**
 * The TaskStore for many instances on one PostgreSQL database (docs/DESIGN.md, "The task's life on the server", points
 * 7 and 8). Every statement of the store is in this file, in `SQL` below; each write is one statement or one
 * transaction, committed before its promise resolves. Claims take rows with `FOR UPDATE SKIP LOCKED`, handler writes
 * carry the fence, and cancel and input signals travel by LISTEN/NOTIFY in the same transaction as the write.
 *
 * JSON values are kept as TEXT written by `JSON.stringify`: exact round trips, including strings that PostgreSQL's
 * json/jsonb types refuse (`\u0000`, lone surrogates), which a tool's arguments may carry.
 */
import DataLoader from 'dataloader';
import type pg from 'pg';

import type { InputRequest, InputResponse, TaskStatus } from '../../protocol/index.js';
import { passwordsOf } from '../../shared/postgres/connectionString.js';
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
import { OPEN_STATUS_SQL as OPEN, sqlStatus, TERMINAL_STATUS_SQL as TERMINAL } from '../../shared/statusSql.js';
import { EXPIRED_MESSAGE_FORMAT, SWEEP_PAGE, TOMBSTONE_RETENTION_MS } from './housekeeping.js';
import { countPostgresTasks, listPostgresTasks } from './listing/postgres.js';
import type { TaskCounts, TaskListPage, TaskListQuery } from './listing/query.js';
import { TaskListQueryError } from './listing/query.js';
import type { PendingCreate, PendingFinish } from './postgres/batches.js';
import {
  asJson,
  CREATE_FIELDS,
  createdTask,
  DEADLOCK_DETECTED,
  FINISH_FIELDS,
  finishParameters,
  halves,
  insertParameters,
  MAX_BATCH,
  partsOfBytes,
  prepared,
  ranAloneAfter,
  splitRepeats,
} from './postgres/batches.js';
import type { ShardCounts } from './postgres/quotaShards.js';
import {
  ARGUMENTS_PARAMETER,
  COUNT_SHARDS,
  dealQuotas,
  SHARD_GROUP,
  SHARD_GROUP_PRINCIPALS,
  SHARD_PARAMETER,
} from './postgres/quotaShards.js';
import type { StepRow, StepTotals, TaskRow } from './postgres/rows.js';
import { parseSignal, signalPayload, toStep, toTask } from './postgres/rows.js';
import { PostgresListener } from './postgresListener.js';
import type {
  AwaitedInput,
  JsonValue,
  LeaseRef,
  NewTask,
  PurgeOptions,
  RenewedLease,
  StepWriteLimits,
  StoredStep,
  StoredTask,
  TaskOwner,
  TaskSignal,
  TaskSteps,
  TaskStore,
  TaskVersion,
  TerminalOutcome,
} from './taskStore.js';
import {
  checkStepLimits,
  insertedTask,
  OpenTaskLimitError,
  StepLimitError,
  StoredTaskLimitError,
} from './taskStore.js';

/** The NOTIFY channel; payload `{"taskId": "...", "kind": "input" | "cancel" | "status"}` (see TaskSignal). */
export const TASK_SIGNAL_CHANNEL = 'closeout_task_signal';

/** Key of the transaction-scoped advisory lock that serialises migrations across instances ("closeout" in ASCII). */
const MIGRATION_LOCK_KEY = '7164223648653342068';

/**
 * Versioned schema: entry i takes the database from version i to i + 1. Never edit an entry once released: its status
 * sets stay written out, and test/server/store/statusSql.test.ts fails when they no longer match the status machine.
 */
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE closeout_tasks (
     task_id          TEXT PRIMARY KEY,
     owner            TEXT NOT NULL,
     tool_name        TEXT NOT NULL,
     arguments        TEXT NOT NULL, -- JSON text
     status           TEXT NOT NULL CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message   TEXT,
     created_at       BIGINT NOT NULL, -- epoch ms, as every time in this schema
     last_updated_at  BIGINT NOT NULL,
     ttl_ms           BIGINT,
     expires_at       BIGINT, -- created_at + ttl_ms; NULL for an unlimited TTL
     poll_interval_ms BIGINT NOT NULL,
     resumable        BOOLEAN NOT NULL,
     idempotency_key  TEXT,
     result           TEXT, -- JSON text
     error            TEXT, -- JSON text
     cancel_requested BOOLEAN NOT NULL DEFAULT false,
     lease_owner      TEXT,
     lease_expires_at BIGINT,
     fence            INTEGER NOT NULL DEFAULT 1,
     attempt          INTEGER NOT NULL DEFAULT 1
   );
   -- one task per owner and idempotency key: the arbiter of concurrent idempotent creates
   CREATE UNIQUE INDEX closeout_tasks_idempotency ON closeout_tasks (owner, idempotency_key)
     WHERE idempotency_key IS NOT NULL;
   -- the sweeps only ever look at open tasks (leases, expiry) or closed ones (purge)
   CREATE INDEX closeout_tasks_open_lease ON closeout_tasks (lease_expires_at)
     WHERE status IN ('working','input_required');
   CREATE INDEX closeout_tasks_open_lease_owner ON closeout_tasks (lease_owner)
     WHERE status IN ('working','input_required');
   -- the per-principal open-task limit counts a principal's open tasks on every tools/call
   CREATE INDEX closeout_tasks_open_owner ON closeout_tasks (owner)
     WHERE status IN ('working','input_required');
   CREATE INDEX closeout_tasks_open_expiry ON closeout_tasks (expires_at)
     WHERE status IN ('working','input_required');
   CREATE INDEX closeout_tasks_closed_expiry ON closeout_tasks (expires_at)
     WHERE status IN ('completed','failed','cancelled');
   CREATE TABLE closeout_task_inputs (
     task_id      TEXT NOT NULL REFERENCES closeout_tasks (task_id) ON DELETE CASCADE,
     key          TEXT NOT NULL,
     seq          INTEGER NOT NULL,
     request      TEXT NOT NULL, -- JSON text
     response     TEXT, -- JSON text; NULL while outstanding
     requested_at BIGINT NOT NULL,
     answered_at  BIGINT,
     PRIMARY KEY (task_id, key) -- keys are unique over the task's life
   );
   CREATE TABLE closeout_purged_tasks (task_id TEXT PRIMARY KEY, purged_at BIGINT NOT NULL);`,
  // a tombstone remembers its owner: only the owner may learn that the id existed
  `ALTER TABLE closeout_purged_tasks ADD COLUMN owner TEXT;`,
  // the input kinds the creating request declared (JSON text; NULL for tasks created before): docs/DESIGN.md rule 6
  `ALTER TABLE closeout_tasks ADD COLUMN input_capabilities TEXT;`,
  // every column a sweep filters on is indexed (docs/DESIGN.md, "Rules learned in the field", 8): tombstones by age,
  // finished tasks without a TTL by the time they finished
  `CREATE INDEX closeout_purged_tasks_purged_at ON closeout_purged_tasks (purged_at);
   CREATE INDEX closeout_tasks_closed_unlimited ON closeout_tasks (last_updated_at)
     WHERE status IN ('completed','failed','cancelled') AND expires_at IS NULL;`,
  // the per-principal stored-task limit counts a principal's tasks, open and finished, on every tools/call
  `CREATE INDEX closeout_tasks_owner ON closeout_tasks (owner);`,
  // durable steps (ctx.step) and the checkpoint (ctx.checkpoint) of a task, written by its lease holder only and
  // deleted with the task; the checkpoint is the one row of kind 'checkpoint', named ''
  `CREATE TABLE closeout_task_steps (
     task_id      TEXT NOT NULL REFERENCES closeout_tasks (task_id) ON DELETE CASCADE,
     kind         TEXT NOT NULL CHECK (kind IN ('step','checkpoint')),
     name         TEXT NOT NULL,
     seq          INTEGER NOT NULL,
     result       TEXT, -- JSON text; NULL for a step whose function returned nothing
     bytes        BIGINT NOT NULL, -- UTF-8 length of result, for the per-task limit
     committed_at BIGINT NOT NULL,
     PRIMARY KEY (task_id, kind, name) -- step names are unique over the task's life
   );`,
  // the W3C trace context of the creating tools/call (JSON text; NULL without one), so every run joins its trace
  `ALTER TABLE closeout_tasks ADD COLUMN trace_context TEXT;`,
  // each principal's open and stored tasks, counted in shard rows with a quota each (issue 19; docs/DESIGN.md,
  // "Per-principal limits on PostgreSQL"): a create checks one shard's quota, locked for its own statement only,
  // instead of a per-principal lock and two counts that grow with the principal's tasks. Each task remembers its
  // shard. Triggers keep the counts equal to the tasks, whatever statement (or release) writes them; they exist before
  // the first count, so no write slips between. Quotas start at 0: a principal's first create deals them out
  `CREATE TABLE closeout_principal_tasks (
     owner              TEXT NOT NULL, -- the caller's principal, as closeout_tasks.owner
     shard              SMALLINT NOT NULL,
     open_tasks         BIGINT NOT NULL DEFAULT 0, -- its tasks of this shard whose status IN ('working','input_required')
     stored_tasks       BIGINT NOT NULL DEFAULT 0, -- all its rows of this shard in closeout_tasks
     -- the part of each limit this shard may admit on its own, and the limits it was dealt from (NULL: none yet)
     open_quota         BIGINT NOT NULL DEFAULT 0,
     stored_quota       BIGINT NOT NULL DEFAULT 0,
     quota_open_limit   BIGINT,
     quota_stored_limit BIGINT,
     PRIMARY KEY (owner, shard)
   );
   ALTER TABLE closeout_tasks ADD COLUMN count_shard SMALLINT NOT NULL DEFAULT 0;
   CREATE FUNCTION closeout_count_inserted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO closeout_principal_tasks AS c (owner, shard, open_tasks, stored_tasks)
     SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')), COUNT(*)
     FROM inserted GROUP BY owner, count_shard ORDER BY owner, count_shard
     ON CONFLICT (owner, shard) DO UPDATE
       SET open_tasks = c.open_tasks + EXCLUDED.open_tasks, stored_tasks = c.stored_tasks + EXCLUDED.stored_tasks;
     RETURN NULL;
   END $$;
   CREATE FUNCTION closeout_count_task_status() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     UPDATE closeout_principal_tasks
     SET open_tasks = open_tasks + CASE WHEN NEW.status IN ('working','input_required') THEN 1 ELSE -1 END
     WHERE owner = NEW.owner AND shard = NEW.count_shard;
     RETURN NULL;
   END $$;
   -- one statement may delete many principals' tasks (purge): their rows are locked in one order, so two such
   -- statements never wait on each other in a circle
   CREATE FUNCTION closeout_count_deleted_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     PERFORM 1 FROM closeout_principal_tasks c
     WHERE (c.owner, c.shard) IN (SELECT owner, count_shard FROM deleted) ORDER BY c.owner, c.shard FOR UPDATE;
     UPDATE closeout_principal_tasks c
     SET open_tasks = c.open_tasks - d.open_tasks, stored_tasks = c.stored_tasks - d.stored_tasks
     FROM (SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')) AS open_tasks,
             COUNT(*) AS stored_tasks
           FROM deleted GROUP BY owner, count_shard) d
     WHERE c.owner = d.owner AND c.shard = d.count_shard;
     RETURN NULL;
   END $$;
   CREATE TRIGGER closeout_tasks_count_inserted AFTER INSERT ON closeout_tasks REFERENCING NEW TABLE AS inserted
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_count_inserted_tasks();
   -- the owner and shard of a task never change; only a move into or out of the open statuses changes a count
   CREATE TRIGGER closeout_tasks_count_status AFTER UPDATE OF status ON closeout_tasks
     FOR EACH ROW WHEN ((OLD.status IN ('working','input_required')) IS DISTINCT FROM
                        (NEW.status IN ('working','input_required')))
     EXECUTE FUNCTION closeout_count_task_status();
   CREATE TRIGGER closeout_tasks_count_deleted AFTER DELETE ON closeout_tasks REFERENCING OLD TABLE AS deleted
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_count_deleted_tasks();
   INSERT INTO closeout_principal_tasks (owner, shard, open_tasks, stored_tasks)
   SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')), COUNT(*)
   FROM closeout_tasks GROUP BY owner, count_shard;`,
  // since version 8 no statement reads tasks by owner alone (the shard rows count them), and every index costs each
  // create and finish a write (issue 19; docs/DESIGN.md, "Per-principal limits on PostgreSQL"): the two owner indexes
  // go. An instance of a release before version 8 still counts by owner: upgrade every instance past it first
  `DROP INDEX IF EXISTS closeout_tasks_open_owner;
   DROP INDEX IF EXISTS closeout_tasks_owner;`,
  // a batch of finishes counts the tasks it closed in its own statement, one write of each shard row it touches
  // instead of one per task (issue 19; bench/RESULTS.md, section 19): it marks the rows it closes, and the status
  // trigger leaves those. Every other statement, and an instance of an older release, leaves the mark false and is
  // counted by the trigger as before; a closed task never opens again, so the mark is never read after
  `ALTER TABLE closeout_tasks ADD COLUMN closed_counted BOOLEAN NOT NULL DEFAULT false;
   DROP TRIGGER closeout_tasks_count_status ON closeout_tasks;
   CREATE TRIGGER closeout_tasks_count_status AFTER UPDATE OF status ON closeout_tasks
     FOR EACH ROW WHEN ((OLD.status IN ('working','input_required')) IS DISTINCT FROM
                        (NEW.status IN ('working','input_required')) AND NOT NEW.closed_counted)
     EXECUTE FUNCTION closeout_count_task_status();`,
  // the counts follow what an operator does to the tables too (docs/DESIGN.md, "Per-principal limits on
  // PostgreSQL"): TRUNCATE fires no row or DELETE trigger, so a TRUNCATE of the tasks (CASCADE or not) drops their
  // counts with them, and a TRUNCATE of the counts recounts the tasks (the recount, should counts ever be doubted).
  // Rows dropped or recounted have no quotas dealt: the principal's next create deals them, as after version 8
  `CREATE FUNCTION closeout_uncount_truncated_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     DELETE FROM closeout_principal_tasks;
     RETURN NULL;
   END $$;
   CREATE TRIGGER closeout_tasks_count_truncated AFTER TRUNCATE ON closeout_tasks
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_uncount_truncated_tasks();
   CREATE FUNCTION closeout_recount_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
   BEGIN
     INSERT INTO closeout_principal_tasks (owner, shard, open_tasks, stored_tasks)
     SELECT owner, count_shard, COUNT(*) FILTER (WHERE status IN ('working','input_required')), COUNT(*)
     FROM closeout_tasks GROUP BY owner, count_shard;
     RETURN NULL;
   END $$;
   CREATE TRIGGER closeout_principal_tasks_recount AFTER TRUNCATE ON closeout_principal_tasks
     FOR EACH STATEMENT EXECUTE FUNCTION closeout_recount_tasks();`,
  // the operators' listing (listing/query.ts), newest first within a status, a principal or a tool, and by task id
  // prefix in byte order ("C"), whatever the database's collation. Each index costs every create a write: these are
  // the fewest that keep a page's cost independent of how many tasks are stored
  `CREATE INDEX closeout_tasks_listing_status ON closeout_tasks (status, created_at, task_id);
   CREATE INDEX closeout_tasks_listing_tool ON closeout_tasks (tool_name, created_at, task_id);
   CREATE INDEX closeout_tasks_listing_owner ON closeout_tasks (owner, created_at, task_id);
   CREATE INDEX closeout_tasks_listing_task_id ON closeout_tasks (task_id COLLATE "C");`,
];

/**
 * The tail of a write whose CTE `changed` returns the ids it changed: one `status` signal per id, in the same
 * statement, so it is delivered when the write commits and never if it rolls back (for `notifications/tasks` on every
 * instance). Returns a row per changed task (`task_id`), so rowCount still counts the tasks written.
 */
const NOTIFY_STATUS = `SELECT task_id, pg_notify('${TASK_SIGNAL_CHANNEL}',
  json_build_object('taskId', task_id, 'kind', 'status')::text) FROM changed`;

/** A task row with its inputs, read in one statement so both come from one snapshot. */
const TASK_WITH_INPUTS = `t.*, (
  SELECT json_agg(json_build_object('key', i.key, 'request', i.request, 'response', i.response,
           'requestedAt', i.requested_at, 'answeredAt', i.answered_at) ORDER BY i.seq)
  FROM closeout_task_inputs i WHERE i.task_id = t.task_id
) AS inputs`;

/** Every statement of the store; exported for the tests that check their plans (test/server/store). */
export const SQL = {
  // migrations: one transaction, serialised by an advisory lock, so instances starting together migrate once
  migrationLock: `SELECT pg_advisory_xact_lock(${MIGRATION_LOCK_KEY})`,
  createVersionTable: `CREATE TABLE IF NOT EXISTS closeout_schema_version (
     version    INTEGER PRIMARY KEY,
     applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
   )`,
  schemaVersion: `SELECT COALESCE(MAX(version), 0) AS version FROM closeout_schema_version`,
  databaseClock: DATABASE_CLOCK_SQL,
  recordVersion: `INSERT INTO closeout_schema_version (version) VALUES ($1)`,

  // create: the unique indexes decide; a losing idempotent create then reads the winner (a new statement, so it sees
  // the winner's commit). A create returns only the id it inserted: the row is what it sent (\`insertedTask\`), and
  // its arguments need not travel back
  insert: `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, status_message, created_at,
             last_updated_at, ttl_ms, expires_at, poll_interval_ms, resumable, idempotency_key, lease_owner,
             lease_expires_at, input_capabilities, trace_context, count_shard)
           VALUES ($1, $2, $3, $4, ${sqlStatus('working')}, $5, $6, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
           ON CONFLICT DO NOTHING
           RETURNING task_id`,
  // create under the per-principal limits, one statement: the upsert locks one of the principal's shard rows, $16
  // (waiting for a concurrent create of that shard to commit, then reading what it left); the insert happens only
  // while that shard is under its quota of each limit, dealt for these very limits ($17, $18: NULL for none), and the
  // insert trigger counts the new task before the lock is released at commit. Always one row: the task's id when
  // inserted, else NULL
  createInShard: `WITH counts AS (
                    INSERT INTO closeout_principal_tasks AS c (owner, shard) VALUES ($2, $16)
                    ON CONFLICT (owner, shard) DO UPDATE SET open_tasks = c.open_tasks
                    RETURNING c.*
                  ), inserted AS (
                    INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, status_message,
                      created_at, last_updated_at, ttl_ms, expires_at, poll_interval_ms, resumable, idempotency_key,
                      lease_owner, lease_expires_at, input_capabilities, trace_context, count_shard)
                    SELECT $1, $2, $3, $4, ${sqlStatus('working')}, $5, $6::bigint, $6::bigint, $7::bigint, $8::bigint,
                      $9::bigint, $10::boolean, $11, $12, $13::bigint, $14, $15, $16::smallint
                    FROM counts
                    WHERE ($17::bigint IS NULL
                           OR (counts.quota_open_limit = $17::bigint AND counts.open_tasks < counts.open_quota))
                      AND ($18::bigint IS NULL
                           OR (counts.quota_stored_limit = $18::bigint AND counts.stored_tasks < counts.stored_quota))
                    ON CONFLICT DO NOTHING
                    RETURNING task_id
                  )
                  SELECT inserted.task_id FROM counts LEFT JOIN inserted ON true`,
  // the creates of one batch (see \`batches\`) in one statement: as createInShard, each shard row locked (in
  // (owner, shard) order, the order every statement that locks several takes them in) and admitting, in the order
  // they were asked, as many of the batch's creates as its quota has room for. Returns the ids inserted; the others
  // (past a quota, or refused by a unique index) take the path of a refused createInShard
  createBatch: `WITH batch AS (
                  SELECT * FROM json_to_recordset($1::json) AS b (task_id text, owner text,
                    tool_name text, arguments text, status_message text, created_at bigint, ttl_ms bigint,
                    expires_at bigint, poll_interval_ms bigint, resumable boolean, idempotency_key text,
                    lease_owner text, lease_expires_at bigint, input_capabilities text, trace_context text,
                    count_shard smallint, open_limit bigint, stored_limit bigint, n bigint)
                ), counts AS (
                  INSERT INTO closeout_principal_tasks AS c (owner, shard)
                  SELECT DISTINCT owner, count_shard FROM batch ORDER BY owner, count_shard
                  ON CONFLICT (owner, shard) DO UPDATE SET open_tasks = c.open_tasks
                  RETURNING c.*
                ), placed AS (
                  SELECT batch.*, counts.open_tasks, counts.open_quota, counts.quota_open_limit, counts.stored_tasks,
                    counts.stored_quota, counts.quota_stored_limit,
                    row_number() OVER (PARTITION BY batch.owner, batch.count_shard ORDER BY batch.n) AS place
                  FROM batch JOIN counts ON counts.owner = batch.owner AND counts.shard = batch.count_shard
                ), inserted AS (
                  INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, status_message,
                    created_at, last_updated_at, ttl_ms, expires_at, poll_interval_ms, resumable, idempotency_key,
                    lease_owner, lease_expires_at, input_capabilities, trace_context, count_shard)
                  SELECT task_id, owner, tool_name, arguments, ${sqlStatus('working')}, status_message, created_at,
                    created_at, ttl_ms, expires_at, poll_interval_ms, resumable, idempotency_key, lease_owner,
                    lease_expires_at, input_capabilities, trace_context, count_shard
                  FROM placed
                  WHERE (open_limit IS NULL OR (quota_open_limit = open_limit AND open_tasks + place <= open_quota))
                    AND (stored_limit IS NULL
                         OR (quota_stored_limit = stored_limit AND stored_tasks + place <= stored_quota))
                  ORDER BY n
                  ON CONFLICT DO NOTHING
                  RETURNING task_id
                )
                SELECT * FROM inserted`,
  // when a shard's quota is spent: in one transaction, every shard of the principal locked in shard order, the
  // totals checked against the limits, what is left of each limit dealt out again, the task inserted
  ensureShards: `INSERT INTO closeout_principal_tasks (owner, shard)
                 SELECT $1, s FROM generate_series(0, $2::int - 1) s
                 ON CONFLICT DO NOTHING`,
  lockShards: `SELECT shard, open_tasks, stored_tasks FROM closeout_principal_tasks WHERE owner = $1
               ORDER BY shard FOR UPDATE`,
  dealQuotas: `UPDATE closeout_principal_tasks c
               SET open_quota = q.open_quota, stored_quota = q.stored_quota, quota_open_limit = $2,
                 quota_stored_limit = $3
               FROM unnest($4::smallint[], $5::bigint[], $6::bigint[]) AS q (shard, open_quota, stored_quota)
               WHERE c.owner = $1 AND c.shard = q.shard`,
  byIdempotencyKey: `SELECT ${TASK_WITH_INPUTS} FROM closeout_tasks t WHERE t.owner = $1 AND t.idempotency_key = $2`,
  get: `SELECT ${TASK_WITH_INPUTS} FROM closeout_tasks t WHERE t.task_id = $1`,
  getMany: `SELECT ${TASK_WITH_INPUTS} FROM closeout_tasks t WHERE t.task_id = ANY ($1::text[])`,
  purged: `SELECT 1 FROM closeout_purged_tasks WHERE task_id = $1 AND owner = $2`,

  // handler side: every write carries the fence and requires "not yet terminal"
  setStatusMessage: `WITH changed AS (
                       UPDATE closeout_tasks SET status_message = $1, last_updated_at = $2
                       WHERE task_id = $3 AND fence = $4 AND ${OPEN}
                       RETURNING task_id
                     ) ${NOTIFY_STATUS}`,
  // locks the task row: input requests and answers of one task are serialised on it
  lockHeld: `SELECT 1 FROM closeout_tasks WHERE task_id = $1 AND fence = $2 AND ${OPEN} FOR UPDATE`,
  input: `SELECT response FROM closeout_task_inputs WHERE task_id = $1 AND key = $2`,
  insertInput: `INSERT INTO closeout_task_inputs (task_id, key, seq, request, requested_at)
                VALUES ($1, $2, (SELECT COUNT(*) FROM closeout_task_inputs WHERE task_id = $1), $3, $4)`,
  toInputRequired: `WITH changed AS (
                      UPDATE closeout_tasks SET status = ${sqlStatus('input_required')}, last_updated_at = $1
                      WHERE task_id = $2 AND fence = $3 AND ${OPEN}
                      RETURNING task_id
                    ) ${NOTIFY_STATUS}`,
  finish: `WITH changed AS (
             UPDATE closeout_tasks SET status = $1, result = $2, error = $3,
               status_message = COALESCE($4, status_message), last_updated_at = $5,
               lease_owner = NULL, lease_expires_at = NULL
             WHERE task_id = $6 AND fence = $7 AND ${OPEN}
             RETURNING task_id
           ) ${NOTIFY_STATUS}`,
  // the finishes of one batch (see \`batches\`) in one statement, each as \`finish\`. The task rows are taken SKIP
  // LOCKED: a statement holding several must not wait for one, or it waits in a circle with another that holds several
  // (the lease renewal, one UPDATE over the instance's leases in an order of its own; expire). The statement then
  // counts the tasks it closed itself, one write per shard row (the rows it closes carry \`closed_counted\`, which the
  // status trigger leaves), taking those rows in (owner, shard) order, the order of every statement that locks several
  // (an INSERT takes its rows in the order of its SELECT; an UPDATE's order is its plan's): task rows first, then shard
  // rows, as expire and purge take them, while a create never waits for a task row another holds. Every shard row a
  // task counts in exists (its create inserted it, and none is ever deleted), so the upsert only ever updates. Returns
  // a row per task taken, and whether it finished; the caller runs the finish of a task not taken alone, as \`finish\`.
  // Prepared once per connection, its plan may be made on an empty table: each task is looked up by its id (LATERAL,
  // one primary key probe per id), so no plan can scan the table. The update says "not terminal" rather than "open"
  // (the same rows: status is NOT NULL and CHECKed), so no plan can read an open-tasks index, which also holds an entry
  // for every task finished since the last vacuum
  finishBatch: `WITH batch AS (
                  SELECT * FROM json_to_recordset($1::json) AS b (new_status text, new_result text, new_error text,
                    new_message text, finished_at bigint, id text, held_fence int)
                ), taken AS (
                  SELECT t.task_id FROM unnest($2::text[]) AS ids (id)
                  CROSS JOIN LATERAL (
                    SELECT task_id FROM closeout_tasks WHERE task_id = ids.id FOR UPDATE SKIP LOCKED
                  ) t
                ), changed AS (
                  UPDATE closeout_tasks t SET status = new_status, result = new_result, error = new_error,
                    status_message = COALESCE(new_message, status_message), last_updated_at = finished_at,
                    lease_owner = NULL, lease_expires_at = NULL, closed_counted = true
                  FROM batch JOIN taken ON taken.task_id = batch.id
                  WHERE t.task_id = ANY ($2::text[]) AND t.task_id = id AND fence = held_fence AND NOT ${TERMINAL}
                  RETURNING t.task_id, t.owner, t.count_shard, t.status
                ), counted AS (
                  INSERT INTO closeout_principal_tasks AS c (owner, shard, open_tasks)
                  SELECT owner, count_shard, -COUNT(*) FROM changed WHERE NOT ${OPEN}
                  GROUP BY owner, count_shard ORDER BY owner, count_shard
                  ON CONFLICT (owner, shard) DO UPDATE SET open_tasks = c.open_tasks + EXCLUDED.open_tasks
                )
                SELECT k.task_id, c.task_id IS NOT NULL AS finished,
                  CASE WHEN c.task_id IS NOT NULL THEN pg_notify('${TASK_SIGNAL_CHANNEL}',
                    json_build_object('taskId', c.task_id, 'kind', 'status')::text) END
                FROM taken k LEFT JOIN changed c ON c.task_id = k.task_id`,

  // steps: written under lockHeld, in the same transaction
  step: `SELECT name, result, committed_at FROM closeout_task_steps WHERE task_id = $1 AND kind = 'step' AND name = $2`,
  stepTotals: `SELECT COUNT(*) FILTER (WHERE kind = 'step') AS steps, COALESCE(SUM(bytes), 0) AS bytes,
                 COALESCE(SUM(bytes) FILTER (WHERE kind = 'checkpoint'), 0) AS checkpoint_bytes
               FROM closeout_task_steps WHERE task_id = $1`,
  insertStep: `INSERT INTO closeout_task_steps (task_id, kind, name, seq, result, bytes, committed_at)
               VALUES ($1, 'step', $2, (SELECT COUNT(*) FROM closeout_task_steps WHERE task_id = $1), $3, $4, $5)`,
  saveCheckpoint: `INSERT INTO closeout_task_steps (task_id, kind, name, seq, result, bytes, committed_at)
                   VALUES ($1, 'checkpoint', '', -1, $2, $3, $4)
                   ON CONFLICT (task_id, kind, name) DO UPDATE SET result = EXCLUDED.result, bytes = EXCLUDED.bytes,
                     committed_at = EXCLUDED.committed_at`,
  steps: `SELECT kind, name, result, committed_at FROM closeout_task_steps WHERE task_id = $1 ORDER BY seq`,

  // client side
  lockOpen: `SELECT 1 FROM closeout_tasks WHERE task_id = $1 AND ${OPEN} FOR UPDATE`,
  answer: `UPDATE closeout_task_inputs i SET response = a.response, answered_at = $4
           FROM unnest($2::text[], $3::text[]) AS a (key, response)
           WHERE i.task_id = $1 AND i.key = a.key AND i.response IS NULL
           RETURNING i.key`,
  // back to working when nothing is outstanding any more; otherwise only the update time moves
  afterAnswer: `UPDATE closeout_tasks SET last_updated_at = $2,
                  status = CASE
                    WHEN status = ${sqlStatus('input_required')} AND NOT EXISTS (
                      SELECT 1 FROM closeout_task_inputs WHERE task_id = $1 AND response IS NULL
                    ) THEN ${sqlStatus('working')}
                    ELSE status
                  END
                WHERE task_id = $1`,
  // acks every open task; the update time moves only when the intent is new
  cancel: `UPDATE closeout_tasks
           SET last_updated_at = CASE WHEN cancel_requested THEN last_updated_at ELSE $2 END, cancel_requested = true
           WHERE task_id = $1 AND ${OPEN}`,
  // delivered to every listener when the surrounding transaction commits, never if it rolls back
  notify: `SELECT pg_notify('${TASK_SIGNAL_CHANNEL}', $1)`,

  // leases
  // every lease of the instance in one statement, on the lease connection (see `leasePool`); the rows locked before
  // the expiry is computed, so it counts from after any wait for a lock (renewedLeaseExpirySql)
  renew: `WITH held AS MATERIALIZED (
            SELECT t.task_id FROM closeout_tasks t
            JOIN unnest($2::text[], $3::int[]) AS l (task_id, fence) ON t.task_id = l.task_id AND t.fence = l.fence
            WHERE t.lease_owner = $4 AND ${OPEN}
            FOR UPDATE OF t
          )
          UPDATE closeout_tasks t SET lease_expires_at = ${renewedLeaseExpirySql('$1', '$5')}
          FROM held
          WHERE t.task_id = held.task_id AND t.lease_owner = $4 AND ${OPEN}
          RETURNING t.task_id, t.fence, t.cancel_requested`,
  answered: `SELECT i.task_id, i.key, i.response
             FROM unnest($1::text[], $2::text[]) AS a (task_id, key)
             JOIN closeout_task_inputs i ON i.task_id = a.task_id AND i.key = a.key
             WHERE i.response IS NOT NULL`,
  // SKIP LOCKED: concurrent claimers split the orphans instead of queueing on them; a row another claimer took
  // and committed meanwhile is rechecked against the WHERE and dropped, so no task is claimed twice
  claim: `WITH orphans AS (
            SELECT task_id FROM closeout_tasks
            WHERE ${OPEN}
              AND (lease_expires_at IS NULL OR lease_expires_at < $1 OR lease_owner = ANY ($2::text[]))
            ORDER BY created_at
            LIMIT $3
            FOR UPDATE SKIP LOCKED
          ), claimed AS (
            UPDATE closeout_tasks t
            -- a claim by the holder itself starts no new attempt: its run goes on under the new fence
            SET lease_owner = $4, lease_expires_at = $5, fence = t.fence + 1,
              attempt = CASE WHEN t.lease_owner = $4 THEN t.attempt ELSE t.attempt + 1 END
            FROM orphans o
            WHERE t.task_id = o.task_id
            RETURNING t.*
          )
          SELECT ${TASK_WITH_INPUTS} FROM claimed t ORDER BY t.created_at`,
  leaseHolders: `SELECT DISTINCT lease_owner FROM closeout_tasks WHERE ${OPEN} AND lease_owner IS NOT NULL`,

  // sweeps: SKIP LOCKED so two instances sweeping at once never wait on (or deadlock over) each other's rows; a
  // skipped row is finished by its holder or swept next time
  // the principals' shard rows the status trigger will update are locked before it runs, in (owner, shard) order, as
  // every statement that locks several takes them (createBatch, finishBatch, the delete trigger): row by row, in the
  // order the tasks happen to be updated, the sweep waited in a circle with a batch of finishes or creates
  expire: `WITH overdue AS (
             SELECT task_id, owner, count_shard FROM closeout_tasks
             WHERE ${OPEN} AND expires_at IS NOT NULL AND expires_at <= $1
             LIMIT $2
             FOR UPDATE SKIP LOCKED
           ), locked AS (
             SELECT 1 FROM closeout_principal_tasks c JOIN overdue o ON o.owner = c.owner AND o.count_shard = c.shard
             ORDER BY c.owner, c.shard
             FOR UPDATE OF c
           ), expired AS (
             SELECT task_id, format('${EXPIRED_MESSAGE_FORMAT}', t.ttl_ms) AS message
             FROM closeout_tasks t JOIN overdue USING (task_id)
             WHERE (SELECT count(*) FROM locked) >= 0
           ), changed AS (
             UPDATE closeout_tasks t
             SET status = ${sqlStatus('failed')}, error = json_build_object('code', -32603, 'message', e.message)::text,
                 status_message = e.message, last_updated_at = $1, lease_owner = NULL, lease_expires_at = NULL
             FROM expired e
             WHERE t.task_id = e.task_id
             RETURNING t.task_id
           ) ${NOTIFY_STATUS}`,
  // cutoffs compared with the bare columns, so the partial indexes on expires_at and last_updated_at serve them; $4
  // NULL keeps finished tasks without a TTL
  purge: `WITH doomed_ttl AS (
            SELECT task_id FROM closeout_tasks
            WHERE ${TERMINAL} AND expires_at IS NOT NULL AND expires_at <= $1
            LIMIT $3
            FOR UPDATE SKIP LOCKED
          ), doomed_unlimited AS (
            SELECT task_id FROM closeout_tasks
            WHERE ${TERMINAL} AND expires_at IS NULL AND $4::bigint IS NOT NULL AND last_updated_at <= $4::bigint
            LIMIT $3
            FOR UPDATE SKIP LOCKED
          ), doomed AS (
            SELECT task_id FROM doomed_ttl UNION ALL SELECT task_id FROM doomed_unlimited LIMIT $3
          ), deleted AS (
            DELETE FROM closeout_tasks t USING doomed d WHERE t.task_id = d.task_id RETURNING t.task_id, t.owner
          )
          INSERT INTO closeout_purged_tasks (task_id, owner, purged_at) SELECT task_id, owner, $2 FROM deleted
          ON CONFLICT (task_id) DO UPDATE SET purged_at = EXCLUDED.purged_at, owner = EXCLUDED.owner`,
  dropTombstones: `DELETE FROM closeout_purged_tasks WHERE task_id IN (
                     SELECT task_id FROM closeout_purged_tasks WHERE purged_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED
                   )`,
  // push's periodic check: by primary key, no arguments, result or inputs
  versions: `SELECT task_id, status, last_updated_at, expires_at FROM closeout_tasks WHERE task_id = ANY ($1::text[])`,
  owners: `SELECT task_id, owner FROM closeout_tasks WHERE task_id = ANY ($1::text[])`,
} as const;

export interface PostgresTaskStoreOptions {
  /** Pool size when the store makes its own pool. Default 10. */
  maxConnections?: number;
  /** How long to wait for a connection before a call fails. Default 5000 ms. */
  connectionTimeoutMs?: number;
  /**
   * How long one statement may take before it fails, so a hung database cannot hang a request: enforced by the
   * server (`statement_timeout`) and, for a server that does not answer at all, by the client. Default 15000 ms. Not
   * applied to a pool passed in (configure that pool yourself); always applied to the store's lease connection.
   */
  statementTimeoutMs?: number;
  /** Start the LISTEN connection in `open()` so that signals flow from the moment it resolves. Default true. */
  listen?: boolean;
  /** Told about trouble the store handles on its own: a dropped LISTEN connection, a listener that threw. */
  onError?: (error: Error) => void;
}

/**
 * A node-postgres `pg.Pool` handed to the store, as far as its public type goes: declared here so that a consumer's
 * typecheck needs no `@types/pg` (docs/operations.md, "Install"). Any `pg.Pool` fits; the store uses it as one.
 */
export interface PostgresPool {
  readonly options: object;
  connect(): Promise<unknown>;
  query(...args: never[]): Promise<unknown>;
  end(): Promise<void>;
}

export class PostgresTaskStore implements TaskStore {
  private readonly pool: pg.Pool;
  /** The migrations of this store's first call (`migrated`). */
  private migration: Promise<void> | undefined;
  /**
   * One connection of the store's own for the lease loop (renew, claim): a renewal never queues behind request traffic
   * for a pooled connection (docs/DESIGN.md, "Rules learned in the field", 8).
   */
  private readonly leasePool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly onError: (error: Error) => void;
  private readonly listeners = new Set<(signal: TaskSignal) => void>();
  /** The LISTEN connection of the signal channel (its own module: postgresListener.ts). */
  private readonly listener: PostgresListener;
  private closed = false;
  /** Creates and finishes asked for in one turn of the event loop, each kind sent as one or two statements (`batches`). */
  private readonly creates = this.batches(
    (batch: readonly PendingCreate[]) => this.createBatch(batch),
    ({ task }) => [
      task.taskId,
      ...(task.idempotencyKey === undefined ? [] : [`${task.principal}\0${task.idempotencyKey}`]),
    ],
  );
  /** How many creates of a principal in one batch share a shard row (\`placeInShards\`, \`rememberShardGroup\`). */
  private readonly shardGroups = new Map<string, number>();
  private readonly finishes = this.batches(
    (batch: readonly PendingFinish[]) => this.finishBatch(batch),
    ({ lease }) => [lease.taskId],
  );
  /**
   * The creates and finishes asked for and not yet answered: `close()` waits for those made before it, their batch and
   * whatever each does after it (the exact path, an idempotent replay's read, a finish run alone).
   */
  private readonly callsInFlight = new Set<Promise<unknown>>();
  /** The database's clock (`now`, `syncClock`). */
  private readonly clock = new DatabaseClock(async () => {
    const { rows } = await this.guard('read the database clock', () =>
      this.pool.query<{ ms: number }>(SQL.databaseClock),
    );
    return Number(rows[0]!.ms);
  });
  /** The password the connection string carries, in every form: scrubbed from every error this store makes. */
  private readonly passwords: string[];

  /**
   * Uses an existing pool (left open by `close()`), or makes one from a connection string. The schema must already
   * be migrated: `PostgresTaskStore.open` does that.
   */
  constructor(poolOrConnectionString: PostgresPool | string, options: PostgresTaskStoreOptions = {}) {
    this.onError = options.onError ?? (() => {});
    const driver = loadPg();
    const timeouts = statementTimeouts(options);
    let connection: pg.ClientConfig;
    if (typeof poolOrConnectionString === 'string') {
      connection = connectionConfig(poolOrConnectionString, options);
      this.pool = new driver.Pool({ ...connection, ...timeouts, max: options.maxConnections ?? 10 });
      this.ownsPool = true;
      guardPool(this.pool, (error) => this.onError(this.wrap('idle connection lost', error)));
    } else {
      this.pool = poolOrConnectionString as pg.Pool;
      this.ownsPool = false;
      connection = { ...this.pool.options };
      // the caller's pool keeps the caller's 'error' listener
      guardPool(this.pool);
    }
    this.passwords = typeof connection.connectionString === 'string' ? passwordsOf(connection.connectionString) : [];
    if (typeof connection.password === 'string' && connection.password !== '') this.passwords.push(connection.password);
    this.leasePool = new driver.Pool({
      ...connection,
      ...timeouts,
      keepAlive: true,
      max: 1,
      application_name: 'closeout leases',
    });
    guardPool(this.leasePool, (error) => this.onError(this.wrap('idle lease connection lost', error)));
    // LISTEN needs a connection of its own, outside the pool
    this.listener = new PostgresListener({
      connection,
      channel: TASK_SIGNAL_CHANNEL,
      onPayload: (payload) => this.deliver(payload),
      onError: (error) => this.onError(error),
      wrap: (op, error) => this.wrap(op, error),
    });
  }

  /** Connects, brings the schema to the current version, and (unless `listen: false`) starts listening for signals. */
  static async open(
    poolOrConnectionString: PostgresPool | string,
    options: PostgresTaskStoreOptions = {},
  ): Promise<PostgresTaskStore> {
    const store = new PostgresTaskStore(poolOrConnectionString, options);
    try {
      await store.migrated();
      await store.syncClock();
      if (options.listen ?? true) await store.listening();
      return store;
    } catch (error) {
      await store.close();
      throw error;
    }
  }

  /**
   * Resolves once this store has applied the migrations its database lacks: on the first call of any kind, so a store
   * made with `new` works as one made with `open()` (which also reads the database's clock and starts LISTEN first).
   * A failed attempt (the database unreachable) is tried again by the next call.
   */
  private migrated(): Promise<void> {
    this.migration ??= this.migrate().catch((error: unknown) => {
      this.migration = undefined;
      throw error;
    });
    return this.migration;
  }

  /** Applies the migrations this database lacks. Safe to run from several instances at once. */
  async migrate(): Promise<void> {
    await this.transaction('migrate', async (client) => {
      const statements = { ...SQL, lock: SQL.migrationLock };
      await runMigrations(client, statements, MIGRATIONS, 'task store');
    });
  }

  async create(task: NewTask): Promise<{ task: StoredTask; created: boolean }> {
    const open = task.maxOpenTasksForPrincipal ?? null;
    const stored = task.maxStoredTasksForPrincipal ?? null;
    const shard = Math.floor(Math.random() * COUNT_SHARDS);
    return this.inFlight(
      this.guard('create', async () => {
        // most creates: one statement (with the other creates of this turn), on a shard drawn at random (its batch
        // may place it on another: \`placeInShards\`)
        const pending: PendingCreate = {
          task,
          shard,
          open,
          stored,
          parameters: [...insertParameters(task), shard, open, stored],
        };
        const inserted = await this.creates.load(pending);
        if (inserted) return { task: inserted, created: true };
        // an idempotent replay returns its task, at the limits too
        const replay = await this.byIdempotencyKey(task);
        if (replay) return { task: replay, created: false };
        if (open === null && stored === null) throw new Error(`task id collision on ${task.taskId}`);
        // the exact path locks all of the principal's rows; a sweep changing many tasks at once (expire) may lock two
        // of them in another order, and PostgreSQL then ends one side as a deadlock: the create tries again
        for (let attempt = 1; ; attempt++) {
          try {
            return await this.createDealingQuotas(task, pending.shard, open, stored);
          } catch (error) {
            if (attempt >= 3 || (error as { code?: unknown }).code !== DEADLOCK_DETECTED) throw error;
          }
        }
      }),
    );
  }

  /**
   * The create whose shard had no quota left: under every shard's lock, the principal's totals decide (exactly), and
   * what is left of each limit is dealt out again over the shards, this shard first. Every shard keeps within its
   * quota and the quotas add up to at most the limit, so the principal keeps within it.
   */
  private async createDealingQuotas(
    task: NewTask,
    shard: number,
    open: number | null,
    stored: number | null,
  ): Promise<{ task: StoredTask; created: boolean }> {
    const answer = await inTransaction(this.pool, async (client) => {
      await client.query(SQL.ensureShards, [task.principal, COUNT_SHARDS]);
      const counts = (await client.query<ShardCounts>(SQL.lockShards, [task.principal])).rows;
      // a create of the same key that was in flight when \`create\` looked for a replay holds one of these rows until it
      // commits: read again under the locks, its task is the answer, at the limits too (an idempotent replay is never
      // refused)
      const replay = await this.byIdempotencyKey(task, client);
      if (replay) return { task: replay, created: false };
      const openNow = counts.map((c) => Number(c.open_tasks));
      const storedNow = counts.map((c) => Number(c.stored_tasks));
      const total = (values: number[]) => values.reduce((sum, n) => sum + n, 0);
      if (open !== null && total(openNow) >= open) throw new OpenTaskLimitError(open);
      if (stored !== null && total(storedNow) >= stored) throw new StoredTaskLimitError(stored);
      const at = counts.findIndex((c) => c.shard === shard);
      // the room each shard gets, this create's task aside, sets how many creates of a batch may share one
      const room = (limit: number | null, now: number[]) =>
        limit === null ? Infinity : Math.floor((limit - total(now) - 1) / COUNT_SHARDS);
      this.rememberShardGroup(task.principal, Math.min(room(open, openNow), room(stored, storedNow)));
      await client.query(SQL.dealQuotas, [
        task.principal,
        open,
        stored,
        counts.map((c) => c.shard),
        dealQuotas(openNow, open, at),
        dealQuotas(storedNow, stored, at),
      ]);
      const parameters = [...insertParameters(task), shard];
      const { rowCount } = await client.query(SQL.insert, parameters);
      return rowCount === 1
        ? { task: insertedTask(task, parameters[ARGUMENTS_PARAMETER] as string), created: true }
        : undefined;
    });
    if (answer) return answer;
    // lost a race to an idempotent create of the same key, committed since
    const existing = await this.byIdempotencyKey(task);
    if (existing) return { task: existing, created: false };
    throw new Error(`task id collision on ${task.taskId}`);
  }

  /**
   * Calls of one kind made in one turn of the event loop, sent as one statement: one round trip and one commit for
   * them all, each answered when that commit is. A turn of PIPELINE_CALLS calls or more goes out as two statements at
   * once, each answering its own callers when it commits: while the database runs one, this process answers the
   * other's callers and sends what they ask next, where one statement would leave one of the two idle (bench/RESULTS.md,
   * section 34); a turn asking for one row twice (`rowsOf`: a task id, an idempotency key) stays one statement, which
   * runs the later twin alone after it, where two at once would have one wait for the other's commit. A statement
   * PostgreSQL refuses changes nothing (it is its own transaction); refused for what one call carried or for a
   * conflict between them (`ranAloneAfter`), each call is then run alone and fails alone, while any other failure
   * (the database unreachable, a timeout) fails the calls of that statement, as it would have failed each alone.
   */
  private batches<K extends { parameters: unknown[] }, V>(
    run: (batch: readonly K[]) => Promise<Array<V | Error>>,
    rowsOf: (call: K) => readonly string[],
  ): { load: (call: K) => Promise<V> } {
    // calls whose values add up to more than MAX_BATCH_BYTES go out as several statements, one after the other
    const inOrder = async (calls: readonly K[]) => {
      const answers: Array<V | Error> = [];
      for (const part of partsOfBytes(calls)) {
        answers.push(...(await run(part).catch((error: unknown) => part.map(() => asError(error)))));
      }
      return answers;
    };
    // each call's value is the promise of its own answer, which its `load` adopts: a half answers its callers when its
    // statement commits, whatever the other half is doing
    const loader = new DataLoader<K, Promise<V>>(
      async (batch) =>
        halves(batch, rowsOf).flatMap((calls) => {
          const answers = inOrder(calls);
          return calls.map((_, i) => {
            const answer = answers.then((all) => (all[i] instanceof Error ? Promise.reject(all[i]) : (all[i] as V)));
            // adopted by the call's `load` a few microtasks later: not an unhandled rejection meanwhile
            answer.catch(() => {});
            return answer;
          });
        }),
      { cache: false, maxBatchSize: MAX_BATCH, batchScheduleFn: (send) => setImmediate(send) },
    );
    return { load: async (call) => await loader.load(call) };
  }

  /** `call`, counted in `callsInFlight` until it settles. */
  private inFlight<T>(call: Promise<T>): Promise<T> {
    this.callsInFlight.add(call);
    void call.finally(() => this.callsInFlight.delete(call)).catch(() => {});
    return call;
  }

  /**
   * A principal's shard group after the deal of its quotas this instance made last: about half the room each shard
   * got, from 1 to SHARD_GROUP. The oldest is forgotten past SHARD_GROUP_PRINCIPALS principals.
   */
  private rememberShardGroup(principal: string, roomPerShard: number): void {
    this.shardGroups.delete(principal);
    this.shardGroups.set(principal, Math.max(1, Math.min(SHARD_GROUP, Math.floor(roomPerShard / 2))));
    if (this.shardGroups.size > SHARD_GROUP_PRINCIPALS) this.shardGroups.delete(this.shardGroups.keys().next().value!);
  }

  /**
   * Places the creates of a batch on shards: each principal's on consecutive shards from the one its first create
   * drew, its group (\`shardGroups\`; SHARD_GROUP without limits, 1 for a principal whose quotas another instance
   * dealt) to a shard. Every shard row a batch touches is written by its statement and its insert trigger, each row
   * once (bench/RESULTS.md, section 19): fewer rows, less work, as long as each shard has room for its group; a
   * create past its shard's quota takes the exact path, as a create alone would.
   */
  private placeInShards(batch: readonly PendingCreate[]): void {
    const principals = new Map<string, { first: number; placed: number; group: number }>();
    for (const create of batch) {
      const { principal } = create.task;
      let at = principals.get(principal);
      if (!at) {
        const unlimited = create.open === null && create.stored === null;
        at = {
          first: create.shard,
          placed: 0,
          group: unlimited ? SHARD_GROUP : (this.shardGroups.get(principal) ?? 1),
        };
        principals.set(principal, at);
      }
      create.shard = (at.first + Math.floor(at.placed++ / at.group)) % COUNT_SHARDS;
      create.parameters[SHARD_PARAMETER] = create.shard;
    }
  }

  /** A batch of creates: each inserted task, or undefined where its shard or a unique index did not admit it. */
  private async createBatch(batch: readonly PendingCreate[]): Promise<Array<StoredTask | undefined | Error>> {
    const alone = (create: PendingCreate) => this.createAlone(create).catch(asError);
    if (batch.length === 1) return [await alone(batch[0]!)];
    // a task id twice in one batch: the later call runs after the statement, and finds the id taken
    const { firsts, repeats } = splitRepeats(batch, (c) => c.task.taskId);
    this.placeInShards(firsts);
    let rows: Array<{ task_id: string }>;
    try {
      const records = firsts.map((c, n) => [...c.parameters, n]);
      rows = (
        await this.pool.query<{ task_id: string }>(
          prepared('create_batch', SQL.createBatch, [asJson(records, CREATE_FIELDS)]),
        )
      ).rows;
    } catch (error) {
      if (!ranAloneAfter(error)) throw error;
      return Promise.all(batch.map(alone));
    }
    const inserted = new Set(rows.map((row) => row.task_id));
    return Promise.all(
      batch.map(async (create, i) => {
        if (repeats.has(i)) return alone(create);
        return inserted.has(create.task.taskId) ? createdTask(create) : undefined;
      }),
    );
  }

  /** One create in one statement: its task, or undefined where its shard or a unique index did not admit it. */
  private async createAlone(create: PendingCreate): Promise<StoredTask | undefined> {
    const { rows } = await this.pool.query<{ task_id: string | null }>(
      prepared('create_in_shard', SQL.createInShard, create.parameters),
    );
    return rows[0]!.task_id === null ? undefined : createdTask(create);
  }

  private async byIdempotencyKey(
    task: NewTask,
    client: pg.Pool | pg.PoolClient = this.pool,
  ): Promise<StoredTask | undefined> {
    if (task.idempotencyKey === undefined) return undefined;
    const { rows } = await client.query<TaskRow>(SQL.byIdempotencyKey, [task.principal, task.idempotencyKey]);
    return rows[0] ? toTask(rows[0]) : undefined;
  }

  async get(taskId: string): Promise<StoredTask | undefined> {
    return this.guard('get', () => this.read(taskId));
  }

  async getMany(taskIds: string[]): Promise<StoredTask[]> {
    if (taskIds.length === 0) return [];
    return this.guard('getMany', async () => {
      const { rows } = await this.pool.query<TaskRow>(SQL.getMany, [taskIds]);
      return rows.map(toTask);
    });
  }

  async wasPurged(taskId: string, principal: string): Promise<boolean> {
    return this.guard(
      'wasPurged',
      async () => ((await this.pool.query(SQL.purged, [taskId, principal])).rowCount ?? 0) > 0,
    );
  }

  async setStatusMessage(lease: LeaseRef, message: string, now: number): Promise<boolean> {
    return this.guard('setStatusMessage', async () => {
      const { rowCount } = await this.pool.query(SQL.setStatusMessage, [message, now, lease.taskId, lease.fence]);
      return rowCount === 1;
    });
  }

  async requestInput(
    lease: LeaseRef,
    key: string,
    request: InputRequest,
    now: number,
  ): Promise<{ held: boolean; response: InputResponse | undefined }> {
    return this.transaction('requestInput', async (client) => {
      const held = await client.query(SQL.lockHeld, [lease.taskId, lease.fence]);
      if (held.rowCount !== 1) return { held: false, response: undefined };
      const existing = await client.query<{ response: string | null }>(SQL.input, [lease.taskId, key]);
      const row = existing.rows[0];
      if (row?.response != null) return { held: true, response: JSON.parse(row.response) as InputResponse };
      if (!row) await client.query(SQL.insertInput, [lease.taskId, key, JSON.stringify(request), now]);
      await client.query(SQL.toInputRequired, [now, lease.taskId, lease.fence]);
      return { held: true, response: undefined };
    });
  }

  async finish(lease: LeaseRef, outcome: TerminalOutcome, now: number): Promise<boolean> {
    // one statement, with the other finishes of this turn
    return this.inFlight(
      this.guard('finish', () => this.finishes.load({ lease, parameters: finishParameters(lease, outcome, now) })),
    );
  }

  /** A batch of finishes: whether each finished its task (false: the lease was lost, or the task had ended). */
  private async finishBatch(batch: readonly PendingFinish[]): Promise<Array<boolean | Error>> {
    const alone = (finish: PendingFinish) => this.finishAlone(finish).catch(asError);
    if (batch.length === 1) return [await alone(batch[0]!)];
    // one task twice in one batch: the later call runs after the statement, and finds the task ended
    const { firsts, repeats } = splitRepeats(batch, (f) => f.lease.taskId);
    let rows: Array<{ task_id: string; finished: boolean }>;
    try {
      const values = [
        asJson(
          firsts.map((f) => f.parameters),
          FINISH_FIELDS,
        ),
        firsts.map((f) => f.lease.taskId),
      ];
      rows = (
        await this.pool.query<{ task_id: string; finished: boolean }>(prepared('finish_batch', SQL.finishBatch, values))
      ).rows;
    } catch (error) {
      if (!ranAloneAfter(error)) throw error;
      return Promise.all(batch.map(alone));
    }
    // a task the statement did not take (its row locked by another statement, or gone) is finished alone, waiting
    // for that lock as \`finish\` does
    const taken = new Map(rows.map((row) => [row.task_id, row.finished]));
    return Promise.all(
      batch.map(async (finish, i) => {
        const finished = repeats.has(i) ? undefined : taken.get(finish.lease.taskId);
        return finished ?? alone(finish);
      }),
    );
  }

  private async finishAlone(finish: PendingFinish): Promise<boolean> {
    const { rowCount } = await this.pool.query(prepared('finish', SQL.finish, finish.parameters));
    return rowCount === 1;
  }

  async recordStep(
    lease: LeaseRef,
    name: string,
    result: JsonValue | undefined,
    now: number,
    limits: StepWriteLimits = {},
  ): Promise<{ held: boolean; step: StoredStep | undefined }> {
    const json = result === undefined ? null : JSON.stringify(result);
    const bytes = json === null ? 0 : Buffer.byteLength(json, 'utf8');
    return this.transaction('recordStep', async (client) => {
      if ((await client.query(SQL.lockHeld, [lease.taskId, lease.fence])).rowCount !== 1) {
        return { held: false, step: undefined };
      }
      const existing = await client.query<StepRow>(SQL.step, [lease.taskId, name]);
      if (existing.rows[0]) return { held: true, step: toStep(existing.rows[0]) };
      const totals = (await client.query<StepTotals>(SQL.stepTotals, [lease.taskId])).rows[0]!;
      checkStepLimits(limits, Number(totals.steps) + 1, Number(totals.bytes) + bytes);
      await client.query(SQL.insertStep, [lease.taskId, name, json, bytes, now]);
      return { held: true, step: toStep({ name, result: json, committed_at: String(now) }) };
    });
  }

  async saveCheckpoint(lease: LeaseRef, value: JsonValue, now: number, limits: StepWriteLimits = {}): Promise<boolean> {
    const json = JSON.stringify(value);
    const bytes = Buffer.byteLength(json, 'utf8');
    return this.transaction('saveCheckpoint', async (client) => {
      if ((await client.query(SQL.lockHeld, [lease.taskId, lease.fence])).rowCount !== 1) return false;
      const totals = (await client.query<StepTotals>(SQL.stepTotals, [lease.taskId])).rows[0]!;
      // the new checkpoint replaces the old one: only the steps and the new value count
      const wouldHold = Number(totals.bytes) - Number(totals.checkpoint_bytes) + bytes;
      checkStepLimits({ maxTotalBytes: limits.maxTotalBytes }, 0, wouldHold);
      await client.query(SQL.saveCheckpoint, [lease.taskId, json, bytes, now]);
      return true;
    });
  }

  async readSteps(taskId: string): Promise<TaskSteps> {
    return this.guard('readSteps', async () => {
      const { rows } = await this.pool.query<StepRow & { kind: 'step' | 'checkpoint' }>(SQL.steps, [taskId]);
      const checkpoint = rows.find((r) => r.kind === 'checkpoint');
      return {
        steps: rows.filter((r) => r.kind === 'step').map(toStep),
        checkpoint: checkpoint?.result == null ? undefined : (JSON.parse(checkpoint.result) as JsonValue),
      };
    });
  }

  async answerInputs(taskId: string, responses: Record<string, InputResponse>, now: number): Promise<string[]> {
    const entries = Object.entries(responses);
    if (entries.length === 0) return [];
    return this.transaction('answerInputs', async (client) => {
      if ((await client.query(SQL.lockOpen, [taskId])).rowCount !== 1) return [];
      const { rows } = await client.query<{ key: string }>(SQL.answer, [
        taskId,
        entries.map(([key]) => key),
        entries.map(([, response]) => JSON.stringify(response)),
        now,
      ]);
      if (rows.length === 0) return [];
      await client.query(SQL.afterAnswer, [taskId, now]);
      await client.query(SQL.notify, [signalPayload({ taskId, kind: 'input' })]);
      // in the caller's order, not the order the rows were updated in
      const accepted = new Set(rows.map((r) => r.key));
      return entries.map(([key]) => key).filter((key) => accepted.has(key));
    });
  }

  async requestCancel(taskId: string, now: number): Promise<boolean> {
    return this.transaction('requestCancel', async (client) => {
      if ((await client.query(SQL.cancel, [taskId, now])).rowCount !== 1) return false;
      await client.query(SQL.notify, [signalPayload({ taskId, kind: 'cancel' })]);
      return true;
    });
  }

  async renewLeases(holder: string, leases: LeaseRef[], until: number): Promise<RenewedLease[]> {
    if (leases.length === 0) return [];
    return this.guard('renewLeases', async () => {
      const { rows } = await this.leasePool.query<{ task_id: string; fence: number; cancel_requested: boolean }>(
        SQL.renew,
        [
          until,
          leases.map((l) => l.taskId),
          leases.map((l) => l.fence),
          holder,
          renewedLeaseLength(until, this.clock.now()),
        ],
      );
      const renewed = new Map(rows.map((r) => [`${r.fence}:${r.task_id}`, r.cancel_requested]));
      return leases.flatMap((l) => {
        const cancelRequested = renewed.get(`${l.fence}:${l.taskId}`);
        return cancelRequested === undefined ? [] : [{ taskId: l.taskId, fence: l.fence, cancelRequested }];
      });
    });
  }

  async answeredInputs(awaited: AwaitedInput[]): Promise<Array<AwaitedInput & { response: InputResponse }>> {
    if (awaited.length === 0) return [];
    return this.guard('answeredInputs', async () => {
      const { rows } = await this.pool.query<{ task_id: string; key: string; response: string }>(SQL.answered, [
        awaited.map((a) => a.taskId),
        awaited.map((a) => a.key),
      ]);
      return rows.map((r) => ({ taskId: r.task_id, key: r.key, response: JSON.parse(r.response) as InputResponse }));
    });
  }

  async claimOrphans(
    holder: string,
    now: number,
    until: number,
    limit: number,
    deadHolders: string[] = [],
  ): Promise<StoredTask[]> {
    return this.guard('claimOrphans', async () => {
      const { rows } = await this.leasePool.query<TaskRow>(SQL.claim, [now, deadHolders, limit, holder, until]);
      return rows.map(toTask);
    });
  }

  async leaseHolders(): Promise<string[]> {
    return this.guard('leaseHolders', async () => {
      const { rows } = await this.pool.query<{ lease_owner: string }>(SQL.leaseHolders);
      return rows.map((r) => r.lease_owner);
    });
  }

  async expireOverdue(now: number, limit?: number): Promise<string[]> {
    return this.guard('expireOverdue', async () => {
      const { rows } = await this.pool.query<{ task_id: string }>(SQL.expire, [now, limit ?? null]);
      return rows.map((r) => r.task_id);
    });
  }

  async purge(now: number, retentionMs: number, options: PurgeOptions = {}): Promise<number> {
    const limit = options.limit ?? SWEEP_PAGE;
    const unlimitedCutoff = options.unlimitedRetentionMs === undefined ? null : now - options.unlimitedRetentionMs;
    return this.transaction('purge', async (client) => {
      const purged = await client.query(SQL.purge, [now - retentionMs, now, limit, unlimitedCutoff]);
      const dropped = await client.query(SQL.dropTombstones, [now - TOMBSTONE_RETENTION_MS, limit]);
      return (purged.rowCount ?? 0) + (dropped.rowCount ?? 0);
    });
  }

  /**
   * Signals committed by any instance on this database reach `listener` once LISTEN is active (see `listening()`).
   * A notification sent while the connection is down is lost; the runtime's lease loop is the fallback.
   */
  subscribe(listener: (signal: TaskSignal) => void): () => void {
    this.listeners.add(listener);
    if (!this.closed) this.listening().catch((error: unknown) => this.onError(asError(error)));
    return () => {
      this.listeners.delete(listener);
    };
  }

  /** Resolves once the LISTEN connection is up, starting it if needed; after a drop it reconnects on its own. */
  listening(): Promise<void> {
    if (this.closed) return Promise.reject(new Error('PostgreSQL task store: closed'));
    return this.listener.listening();
  }

  /**
   * The database's time (TaskStore.now): every instance on this database stamps and compares leases, creation times
   * and expiry on it, whatever its host's wall clock says (docs/DESIGN.md, "Rules learned in the field", 2). Off by
   * at most half the round trip of the read it was taken from. Before the first `syncClock`, the host's clock.
   */
  now(): number {
    return this.clock.now();
  }

  /**
   * Reads the database's clock, and from then on every minute (monotonic clocks drift a little). A slower read than
   * the one in use is kept only when the one in use is old: its error is half its round trip.
   */
  async syncClock(): Promise<void> {
    await this.clock.sync();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.clock.stop();
    // creates and finishes asked for before close() are sent (their batch goes out on the next turn) and answered
    // before the pool ends
    await Promise.allSettled([...this.callsInFlight]);
    await this.listener.close();
    await this.leasePool.end();
    if (this.ownsPool) await this.pool.end();
  }

  private deliver(payload: string | undefined): void {
    const signal = parseSignal(payload);
    if (!signal) return;
    for (const listener of this.listeners) {
      try {
        listener(signal);
      } catch (error) {
        // one listener's failure must not keep the signal from the others, nor break the connection
        this.onError(asError(error));
      }
    }
  }

  private async read(taskId: string): Promise<StoredTask | undefined> {
    const { rows } = await this.pool.query<TaskRow>(SQL.get, [taskId]);
    return rows[0] ? toTask(rows[0]) : undefined;
  }

  /** Runs `fn` in one transaction on one connection: all of it commits, or none of it. */
  private async transaction<T>(op: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    return this.guard(op, () => inTransaction(this.pool, fn));
  }

  /** Database trouble surfaces as an Error that says which store call failed (the runtime maps it to -32603). */
  private async guard<T>(op: string, fn: () => Promise<T>): Promise<T> {
    try {
      if (op !== 'migrate') await this.migrated();
      return await fn();
    } catch (error) {
      // the store's own refusals keep their class: the runtime answers them with their own error
      if (
        error instanceof OpenTaskLimitError ||
        error instanceof StoredTaskLimitError ||
        error instanceof StepLimitError ||
        error instanceof TaskListQueryError
      ) {
        throw error;
      }
      throw this.wrap(op, error);
    }
  }

  private wrap(op: string, error: unknown): Error {
    return wrapPostgresError('PostgreSQL task store', op, error, this.passwords);
  }

  async listTasks(query: TaskListQuery = {}): Promise<TaskListPage> {
    return this.guard('listTasks', () => listPostgresTasks(this.pool, query));
  }

  async countTasks(query: TaskListQuery = {}): Promise<TaskCounts> {
    return this.guard('countTasks', () => countPostgresTasks(this.pool, query));
  }

  async taskVersions(taskIds: string[]): Promise<TaskVersion[]> {
    if (taskIds.length === 0) return [];
    return this.guard('taskVersions', async () => {
      const { rows } = await this.pool.query<{
        task_id: string;
        status: TaskStatus;
        // BIGINT arrives as a string
        last_updated_at: string;
        expires_at: string | null;
      }>(SQL.versions, [taskIds]);
      return rows.map((r) => ({
        taskId: r.task_id,
        status: r.status,
        lastUpdatedAt: Number(r.last_updated_at),
        expiresAt: r.expires_at === null ? undefined : Number(r.expires_at),
      }));
    });
  }

  async taskOwners(taskIds: string[]): Promise<TaskOwner[]> {
    if (taskIds.length === 0) return [];
    return this.guard('taskOwners', async () => {
      const { rows } = await this.pool.query<{ task_id: string; owner: string }>(SQL.owners, [taskIds]);
      return rows.map((r) => ({ taskId: r.task_id, principal: r.owner }));
    });
  }
}
