/**
 * Every statement of the PostgreSQL task store (postgresTaskStore.ts runs them): each write is one statement or one
 * transaction; claims take rows with `FOR UPDATE SKIP LOCKED`, handler writes carry the fence, and cancel, input and
 * status signals are NOTIFYs in the same statement or transaction as the write.
 */
import { DATABASE_CLOCK_SQL, renewedLeaseExpirySql } from '../../../shared/postgres/databaseClock.js';
import { OPEN_STATUS_SQL as OPEN, sqlStatus, TERMINAL_STATUS_SQL as TERMINAL } from '../../../shared/statusSql.js';
import { EXPIRED_MESSAGE_FORMAT } from '../housekeeping.js';
import { MIGRATION_LOCK_KEY, TASK_SIGNAL_CHANNEL } from './schema.js';

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
            -- a claim by the holder itself starts no new attempt (its run goes on under the new fence), unless it
            -- handed the lease back (expiry 0: its run was stopped)
            SET lease_owner = $4, lease_expires_at = $5, fence = t.fence + 1,
              attempt = CASE WHEN t.lease_owner = $4 AND t.lease_expires_at <> 0 THEN t.attempt ELSE t.attempt + 1 END
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
