/**
 * The embedded default TaskStore: one SQLite file (better-sqlite3, WAL). Every statement of the store is in this
 * file; each write is one transaction, or one savepoint of a group commit (`SqliteGroupCommit`), committed before
 * its promise resolves.
 */
import type Database from 'better-sqlite3';

import type { InputRequest, InputResponse, TaskStatus } from '../../protocol/index.js';
import { openSqliteFile } from '../../shared/sqlite/sqliteFile.js';
import { SqliteGroupCommit } from '../../shared/sqlite/sqliteGroupCommit.js';
import type { SqliteSynchronous } from '../../shared/sqlite/sqliteSynchronous.js';
import { OPEN_STATUS_SQL as OPEN, sqlStatus, TERMINAL_STATUS_SQL as TERMINAL } from '../../shared/statusSql.js';
import { expiredMessage, SWEEP_PAGE, TOMBSTONE_RETENTION_MS } from './housekeeping.js';
import type { TaskCounts, TaskListPage, TaskListQuery } from './listing/query.js';
import { countSqliteTasks, listSqliteTasks } from './listing/sqlite.js';
import type { Checkpointer } from './sqliteCheckpointer.js';
import { startCheckpointer } from './sqliteCheckpointer.js';
import type { TaskRowColumns } from './taskRows.js';
import { toAnsweredInput, toStoredStep, toStoredTask } from './taskRows.js';
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
import { checkStepLimits, insertedTask, OpenTaskLimitError, StoredTaskLimitError } from './taskStore.js';

/**
 * Versioned schema: entry i brings `user_version` from i to i + 1. Never edit a shipped entry; append. Its status sets
 * stay written out, and test/server/store/statusSql.test.ts fails when they no longer match the status machine.
 */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE tasks (
     task_id          TEXT PRIMARY KEY,
     owner            TEXT NOT NULL,
     tool_name        TEXT NOT NULL,
     arguments        TEXT NOT NULL,
     status           TEXT NOT NULL CHECK (status IN ('working','input_required','completed','failed','cancelled')),
     status_message   TEXT,
     created_at       INTEGER NOT NULL,
     last_updated_at  INTEGER NOT NULL,
     ttl_ms           INTEGER,
     expires_at       INTEGER, -- created_at + ttl_ms; NULL for an unlimited TTL
     poll_interval_ms INTEGER NOT NULL,
     resumable        INTEGER NOT NULL,
     idempotency_key  TEXT,
     result           TEXT,
     error            TEXT,
     cancel_requested INTEGER NOT NULL DEFAULT 0,
     lease_owner      TEXT,
     lease_expires_at INTEGER,
     fence            INTEGER NOT NULL DEFAULT 1,
     attempt          INTEGER NOT NULL DEFAULT 1
   );
   -- one task per owner and idempotency key
   CREATE UNIQUE INDEX tasks_idempotency ON tasks (owner, idempotency_key) WHERE idempotency_key IS NOT NULL;
   -- the sweeps only ever look at open tasks
   CREATE INDEX tasks_open_lease ON tasks (lease_expires_at) WHERE status IN ('working','input_required');
   CREATE INDEX tasks_open_expiry ON tasks (expires_at) WHERE status IN ('working','input_required');
   CREATE INDEX tasks_closed_expiry ON tasks (expires_at) WHERE status IN ('completed','failed','cancelled');
   CREATE TABLE task_inputs (
     task_id      TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
     key          TEXT NOT NULL,
     seq          INTEGER NOT NULL,
     request      TEXT NOT NULL,
     response     TEXT,
     requested_at INTEGER NOT NULL,
     answered_at  INTEGER,
     PRIMARY KEY (task_id, key) -- keys are unique over the task's life
   );
   CREATE TABLE purged_tasks (task_id TEXT PRIMARY KEY, purged_at INTEGER NOT NULL);`,
  // the per-principal open-task limit counts a principal's open tasks on every tools/call
  `CREATE INDEX tasks_open_owner ON tasks (owner) WHERE status IN ('working','input_required');`,
  // a tombstone remembers its owner: only the owner may learn that the id existed
  `ALTER TABLE purged_tasks ADD COLUMN owner TEXT;`,
  // the input kinds the creating request declared (JSON text; NULL for tasks created before): docs/DESIGN.md rule 6
  `ALTER TABLE tasks ADD COLUMN input_capabilities TEXT;`,
  // every column a sweep filters on is indexed (docs/DESIGN.md, "Rules learned in the field", 8): tombstones by age, a
  // dead owner's leases, finished tasks without a TTL by the time they finished
  `CREATE INDEX purged_tasks_purged_at ON purged_tasks (purged_at);
   CREATE INDEX tasks_open_lease_owner ON tasks (lease_owner) WHERE status IN ('working','input_required');
   CREATE INDEX tasks_closed_unlimited ON tasks (last_updated_at)
     WHERE status IN ('completed','failed','cancelled') AND expires_at IS NULL;`,
  // the per-principal stored-task limit counts a principal's tasks, open and finished, on every tools/call
  `CREATE INDEX tasks_owner ON tasks (owner);`,
  // durable steps (ctx.step) and the checkpoint (ctx.checkpoint) of a task, written by its lease holder only and
  // deleted with the task; the checkpoint is the one row of kind 'checkpoint', named ''
  `CREATE TABLE task_steps (
     task_id      TEXT NOT NULL REFERENCES tasks (task_id) ON DELETE CASCADE,
     kind         TEXT NOT NULL CHECK (kind IN ('step','checkpoint')),
     name         TEXT NOT NULL,
     seq          INTEGER NOT NULL,
     result       TEXT, -- JSON text; NULL for a step whose function returned nothing
     bytes        INTEGER NOT NULL, -- UTF-8 length of result, for the per-task limit
     committed_at INTEGER NOT NULL,
     PRIMARY KEY (task_id, kind, name) -- step names are unique over the task's life
   );`,
  // the W3C trace context of the creating tools/call (JSON text; NULL without one), so every run joins its trace
  `ALTER TABLE tasks ADD COLUMN trace_context TEXT;`,
  // push's periodic check reads a task's version from this index alone: read from the row, it would walk past the
  // task's arguments (overflow pages), a cost that grows with what the task holds (docs/DESIGN.md rule 8)
  `CREATE INDEX tasks_version ON tasks (task_id, status, last_updated_at, expires_at);`,
  // each principal's open and stored tasks, kept by triggers in the writes' own transactions, so the per-principal
  // limits at creation read one row: counting them cost a create 0.5 ms with nothing stored and 14 ms at 100,000 of a
  // principal's tasks (the default maxStoredTasksPerPrincipal), on the serving thread
  `CREATE TABLE principal_tasks (
     owner        TEXT PRIMARY KEY,
     open_tasks   INTEGER NOT NULL DEFAULT 0,
     stored_tasks INTEGER NOT NULL DEFAULT 0
   ) WITHOUT ROWID;
   INSERT INTO principal_tasks (owner, open_tasks, stored_tasks)
   SELECT owner, SUM(status IN ('working','input_required')), COUNT(*) FROM tasks GROUP BY owner;
   CREATE TRIGGER tasks_counted_insert AFTER INSERT ON tasks BEGIN
     INSERT INTO principal_tasks (owner, open_tasks, stored_tasks)
     VALUES (NEW.owner, NEW.status IN ('working','input_required'), 1)
     ON CONFLICT (owner) DO UPDATE SET open_tasks = open_tasks + excluded.open_tasks, stored_tasks = stored_tasks + 1;
   END;
   CREATE TRIGGER tasks_counted_status AFTER UPDATE OF status ON tasks
   WHEN (OLD.status IN ('working','input_required')) IS NOT (NEW.status IN ('working','input_required'))
   BEGIN
     UPDATE principal_tasks
     SET open_tasks = open_tasks + CASE WHEN NEW.status IN ('working','input_required') THEN 1 ELSE -1 END
     WHERE owner = NEW.owner;
   END;
   CREATE TRIGGER tasks_counted_delete AFTER DELETE ON tasks BEGIN
     UPDATE principal_tasks
     SET open_tasks = open_tasks - (OLD.status IN ('working','input_required')), stored_tasks = stored_tasks - 1
     WHERE owner = OLD.owner;
   END;`,
  // the operators' listing (listing/query.ts), newest first within a status, a principal or a tool; the owner index
  // takes the place of tasks_owner, which no statement reads since version 10 (one index fewer for every create)
  `CREATE INDEX tasks_listing_status ON tasks (status, created_at, task_id);
   CREATE INDEX tasks_listing_tool ON tasks (tool_name, created_at, task_id);
   CREATE INDEX tasks_listing_owner ON tasks (owner, created_at, task_id);
   DROP INDEX tasks_owner;`,
  // the operators' listing finds a task by its idempotency key whoever's it is: the unique index leads with the key,
  // as unique as before and no index more for a create to write
  `DROP INDEX tasks_idempotency;
   CREATE UNIQUE INDEX tasks_idempotency ON tasks (idempotency_key, owner) WHERE idempotency_key IS NOT NULL;`,
];

/** The task store schema version this build writes. */
export const STORE_SCHEMA_VERSION = MIGRATIONS.length;

/**
 * Leases renewed per statement, the event loop free between two: about 27 ms of the serving thread per step at load
 * 18, 14 ms for 500, but 140 ms for 2,000 (bench/RESULTS.md, section 8a). Not smaller: every step also waits for a
 * turn of a busy loop, and 24 steps of 500 stretched a 12,000-lease renewal to 6.4 s of a 10 s lease at load 25.
 */
const RENEW_STEP = 1000;

/** A row of `tasks`: its columns are named in taskRows.ts, for both dialects. */
type TaskRow = TaskRowColumns;

interface InputRow {
  key: string;
  request: string;
  response: string | null;
  requested_at: number;
  answered_at: number | null;
}

export interface SqliteTaskStoreOptions {
  /** How long the busy handler waits for another process's write lock before failing. Default 5000 ms. */
  busyTimeoutMs?: number;
  /**
   * Run WAL checkpoints in a worker thread instead of inside the commit that crosses SQLite's threshold (see
   * sqliteCheckpointer.ts). Default true; false leaves SQLite's automatic checkpoint on the serving thread.
   */
  backgroundCheckpoints?: boolean;
  /**
   * `full` (default): task creation, terminal results and every other write are on disk before they are acknowledged,
   * so they survive a power cut. `normal`: faster, and safe against a crash of the process, but the last writes before
   * a power cut or an OS crash may be lost, CreateTaskResults already answered among them. See `SqliteSynchronous`.
   */
  synchronous?: SqliteSynchronous;
}

export class SqliteTaskStore implements TaskStore {
  readonly path: string;
  private readonly db: Database.Database;
  private readonly listeners = new Set<(signal: TaskSignal) => void>();
  private readonly stmt;
  private readonly checkpointer: Checkpointer | undefined;
  /** The creations, terminal results and steps of one turn, committed together (`SqliteGroupCommit`). */
  private readonly group: SqliteGroupCommit;

  constructor(path: string, options: SqliteTaskStoreOptions = {}) {
    this.path = path;
    this.db = openSqliteFile(path, { migrations: MIGRATIONS, what: 'task store' }, options);
    const db = this.db;
    this.stmt = {
      insert: db.prepare(
        `INSERT INTO tasks (task_id, owner, tool_name, arguments, status, status_message, created_at, last_updated_at,
           ttl_ms, expires_at, poll_interval_ms, resumable, idempotency_key, lease_owner, lease_expires_at,
           input_capabilities, trace_context)
         VALUES (@taskId, @principal, @toolName, @arguments, ${sqlStatus('working')}, @statusMessage, @createdAt, @createdAt,
           @ttlMs, @expiresAt, @pollIntervalMs, @resumable, @idempotencyKey, @holder, @leaseExpiresAt,
           @inputCapabilities, @traceContext)
         ON CONFLICT DO NOTHING`,
      ),
      byIdempotencyKey: db.prepare(`SELECT * FROM tasks WHERE owner = ? AND idempotency_key = ?`),
      openOfPrincipal: db.prepare(`SELECT COALESCE(MAX(open_tasks), 0) AS n FROM principal_tasks WHERE owner = ?`),
      // both from the principal's row of counts (schema version 10), one read whatever the principal stores
      storedOfPrincipal: db.prepare(`SELECT COALESCE(MAX(stored_tasks), 0) AS n FROM principal_tasks WHERE owner = ?`),
      get: db.prepare(`SELECT * FROM tasks WHERE task_id = ?`),
      inputs: db.prepare(
        `SELECT key, request, response, requested_at, answered_at FROM task_inputs WHERE task_id = ? ORDER BY seq`,
      ),
      purged: db.prepare(`SELECT 1 FROM purged_tasks WHERE task_id = ? AND owner = ?`),
      setStatusMessage: db.prepare(
        `UPDATE tasks SET status_message = ?, last_updated_at = ? WHERE task_id = ? AND fence = ? AND ${OPEN}`,
      ),
      input: db.prepare(`SELECT response FROM task_inputs WHERE task_id = ? AND key = ?`),
      insertInput: db.prepare(
        `INSERT INTO task_inputs (task_id, key, seq, request, requested_at)
         VALUES (?, ?, (SELECT COUNT(*) FROM task_inputs WHERE task_id = ?), ?, ?)`,
      ),
      toInputRequired: db.prepare(
        `UPDATE tasks SET status = ${sqlStatus('input_required')}, last_updated_at = ? WHERE task_id = ? AND fence = ? AND ${OPEN}`,
      ),
      holds: db.prepare(`SELECT 1 FROM tasks WHERE task_id = ? AND fence = ? AND ${OPEN}`),
      finish: db.prepare(
        `UPDATE tasks SET status = @status, result = @result, error = @error,
           status_message = COALESCE(@statusMessage, status_message), last_updated_at = @now,
           lease_owner = NULL, lease_expires_at = NULL
         WHERE task_id = @taskId AND fence = @fence AND ${OPEN}`,
      ),
      openStatus: db.prepare(`SELECT status FROM tasks WHERE task_id = ? AND ${OPEN}`),
      answer: db.prepare(
        `UPDATE task_inputs SET response = ?, answered_at = ? WHERE task_id = ? AND key = ? AND response IS NULL`,
      ),
      outstanding: db.prepare(`SELECT COUNT(*) AS n FROM task_inputs WHERE task_id = ? AND response IS NULL`),
      toWorking: db.prepare(
        `UPDATE tasks SET status = ${sqlStatus('working')}, last_updated_at = ? WHERE task_id = ? AND status = ${sqlStatus('input_required')}`,
      ),
      touch: db.prepare(`UPDATE tasks SET last_updated_at = ? WHERE task_id = ?`),
      cancel: db.prepare(
        `UPDATE tasks SET cancel_requested = 1, last_updated_at = ? WHERE task_id = ? AND ${OPEN} AND cancel_requested = 0`,
      ),
      isOpen: db.prepare(`SELECT 1 FROM tasks WHERE task_id = ? AND ${OPEN}`),
      // every lease of the instance in one statement: the task ids as one JSON array (looked up by primary key), and
      // "fence:taskId" of each lease as another (probed in a transient index), so the cost grows with the leases only
      renew: db.prepare(
        `UPDATE tasks SET lease_expires_at = ?
         WHERE task_id IN (SELECT value FROM json_each(?))
           AND (fence || ':' || task_id) IN (SELECT value FROM json_each(?))
           -- unary +: rows are found by task_id, one step's worth, not by a scan of every open lease of the owner
           AND +lease_owner = ? AND ${OPEN}
         RETURNING task_id, fence, cancel_requested`,
      ),
      answered: db.prepare(
        `SELECT i.task_id, i.key, i.response
         FROM (SELECT value ->> 0 AS task_id, value ->> 1 AS key FROM json_each(?)) AS a
         JOIN task_inputs i ON i.task_id = a.task_id AND i.key = a.key
         WHERE i.response IS NOT NULL`,
      ),
      orphans: db.prepare(
        `SELECT task_id FROM tasks
         WHERE ${OPEN} AND (lease_expires_at IS NULL OR lease_expires_at < ? OR lease_owner IN (SELECT value FROM json_each(?)))
         ORDER BY created_at LIMIT ?`,
      ),
      claim: db.prepare(
        // a claim by the holder itself starts no new attempt (its run goes on under the new fence), unless it handed
        // the lease back (expiry 0: its run was stopped)
        `UPDATE tasks SET lease_owner = ?, lease_expires_at = ?, fence = fence + 1,
           attempt = CASE WHEN lease_owner = ? AND lease_expires_at <> 0 THEN attempt ELSE attempt + 1 END
         WHERE task_id = ? AND ${OPEN}`,
      ),
      leaseHolders: db.prepare(`SELECT DISTINCT lease_owner FROM tasks WHERE ${OPEN} AND lease_owner IS NOT NULL`),
      overdue: db.prepare(
        `SELECT task_id, ttl_ms FROM tasks WHERE ${OPEN} AND expires_at IS NOT NULL AND expires_at <= ? LIMIT ?`,
      ),
      expire: db.prepare(
        `UPDATE tasks SET status = ${sqlStatus('failed')}, error = ?, status_message = ?, last_updated_at = ?,
           lease_owner = NULL, lease_expires_at = NULL
         WHERE task_id = ? AND ${OPEN}`,
      ),
      // a cutoff compared with the bare column, so the partial indexes on expires_at and last_updated_at serve it
      purgeable: db.prepare(
        `SELECT task_id, owner AS principal FROM tasks WHERE ${TERMINAL}
           AND expires_at IS NOT NULL AND expires_at <= ? LIMIT ?`,
      ),
      purgeableUnlimited: db.prepare(
        `SELECT task_id, owner AS principal FROM tasks WHERE ${TERMINAL}
           AND expires_at IS NULL AND last_updated_at <= ? LIMIT ?`,
      ),
      // steps: every write checks the fence first (holds), in the same transaction
      step: db.prepare(
        `SELECT name, result, committed_at FROM task_steps WHERE task_id = ? AND kind = 'step' AND name = ?`,
      ),
      stepTotals: db.prepare(
        `SELECT COALESCE(SUM(kind = 'step'), 0) AS steps, COALESCE(SUM(bytes), 0) AS bytes,
           COALESCE(SUM(CASE WHEN kind = 'checkpoint' THEN bytes END), 0) AS checkpoint_bytes
         FROM task_steps WHERE task_id = ?`,
      ),
      insertStep: db.prepare(
        `INSERT INTO task_steps (task_id, kind, name, seq, result, bytes, committed_at)
         VALUES (?, 'step', ?, (SELECT COUNT(*) FROM task_steps WHERE task_id = ?), ?, ?, ?)`,
      ),
      saveCheckpoint: db.prepare(
        `INSERT INTO task_steps (task_id, kind, name, seq, result, bytes, committed_at)
         VALUES (?, 'checkpoint', '', -1, ?, ?, ?)
         ON CONFLICT (task_id, kind, name) DO UPDATE SET result = excluded.result, bytes = excluded.bytes,
           committed_at = excluded.committed_at`,
      ),
      steps: db.prepare(`SELECT kind, name, result, committed_at FROM task_steps WHERE task_id = ? ORDER BY seq`),
      delete: db.prepare(`DELETE FROM tasks WHERE task_id = ?`),
      tombstone: db.prepare(`INSERT OR REPLACE INTO purged_tasks (task_id, owner, purged_at) VALUES (?, ?, ?)`),
      dropTombstones: db.prepare(
        `DELETE FROM purged_tasks WHERE rowid IN (SELECT rowid FROM purged_tasks WHERE purged_at < ? LIMIT ?)`,
      ),
      // push's periodic check: the ids as one JSON array, each looked up in the covering index tasks_version, never in
      // the row (the planner, without statistics, would pick the primary key's index and read the row)
      versions: db.prepare(
        `SELECT task_id, status, last_updated_at, expires_at FROM tasks INDEXED BY tasks_version
         WHERE task_id IN (SELECT value FROM json_each(?))`,
      ),
      // owner is the row's second column: read without the payload of the columns after it
      owners: db.prepare(`SELECT task_id, owner FROM tasks WHERE task_id IN (SELECT value FROM json_each(?))`),
    };
    this.group = new SqliteGroupCommit(db);
    if (path !== ':memory:' && options.backgroundCheckpoints !== false) {
      this.checkpointer = startCheckpointer(this.db, path);
    }
  }

  async create(task: NewTask): Promise<{ task: StoredTask; created: boolean }> {
    return this.group.run(() => {
      if (task.maxOpenTasksForPrincipal !== undefined || task.maxStoredTasksForPrincipal !== undefined) {
        // an idempotent replay returns its task below, at the limits too
        const replay =
          task.idempotencyKey !== undefined && this.stmt.byIdempotencyKey.get(task.principal, task.idempotencyKey);
        if (!replay && task.maxOpenTasksForPrincipal !== undefined) {
          const { n } = this.stmt.openOfPrincipal.get(task.principal) as { n: number };
          if (n >= task.maxOpenTasksForPrincipal) throw new OpenTaskLimitError(task.maxOpenTasksForPrincipal);
        }
        if (!replay && task.maxStoredTasksForPrincipal !== undefined) {
          const max = task.maxStoredTasksForPrincipal;
          const { n } = this.stmt.storedOfPrincipal.get(task.principal) as { n: number };
          if (n >= max) throw new StoredTaskLimitError(max);
        }
      }
      const argumentsJson = JSON.stringify(task.arguments);
      const info = this.stmt.insert.run({
        taskId: task.taskId,
        principal: task.principal,
        toolName: task.toolName,
        arguments: argumentsJson,
        statusMessage: task.statusMessage ?? null,
        createdAt: task.createdAt,
        ttlMs: task.ttlMs,
        expiresAt: task.ttlMs === null ? null : task.createdAt + task.ttlMs,
        pollIntervalMs: task.pollIntervalMs,
        resumable: task.resumable ? 1 : 0,
        idempotencyKey: task.idempotencyKey ?? null,
        holder: task.leaseHolder,
        leaseExpiresAt: task.leaseExpiresAt,
        inputCapabilities: task.inputCapabilities === undefined ? null : JSON.stringify(task.inputCapabilities),
        traceContext: task.traceContext === undefined ? null : JSON.stringify(task.traceContext),
      });
      // the row is exactly what was just inserted: built, not read back (two statements fewer on every create)
      if (info.changes === 1) return { task: insertedTask(task, argumentsJson), created: true };
      if (task.idempotencyKey !== undefined) {
        const row = this.stmt.byIdempotencyKey.get(task.principal, task.idempotencyKey) as TaskRow | undefined;
        if (row) return { task: this.toTask(row), created: false };
      }
      throw new Error(`task id collision on ${task.taskId}`);
    });
  }

  async get(taskId: string): Promise<StoredTask | undefined> {
    return this.read(taskId);
  }

  async getMany(taskIds: string[]): Promise<StoredTask[]> {
    // one read transaction: every task from one snapshot
    return this.db.transaction(() => taskIds.flatMap((taskId) => this.read(taskId) ?? []))();
  }

  async wasPurged(taskId: string, principal: string): Promise<boolean> {
    return this.stmt.purged.get(taskId, principal) !== undefined;
  }

  async setStatusMessage(lease: LeaseRef, message: string, now: number): Promise<boolean> {
    return this.stmt.setStatusMessage.run(message, now, lease.taskId, lease.fence).changes === 1;
  }

  async requestInput(
    lease: LeaseRef,
    key: string,
    request: InputRequest,
    now: number,
  ): Promise<{ held: boolean; response: InputResponse | undefined }> {
    return this.db
      .transaction(() => {
        if (this.stmt.holds.get(lease.taskId, lease.fence) === undefined) return { held: false, response: undefined };
        const existing = this.stmt.input.get(lease.taskId, key) as { response: string | null } | undefined;
        if (existing?.response != null) {
          return { held: true, response: JSON.parse(existing.response) as InputResponse };
        }
        if (!existing) this.stmt.insertInput.run(lease.taskId, key, lease.taskId, JSON.stringify(request), now);
        this.stmt.toInputRequired.run(now, lease.taskId, lease.fence);
        return { held: true, response: undefined };
      })
      .immediate();
  }

  async finish(lease: LeaseRef, outcome: TerminalOutcome, now: number): Promise<boolean> {
    const row = {
      taskId: lease.taskId,
      fence: lease.fence,
      status: outcome.status,
      result: outcome.status === 'completed' ? JSON.stringify(outcome.result) : null,
      error: outcome.status === 'failed' ? JSON.stringify(outcome.error) : null,
      statusMessage: outcome.statusMessage ?? null,
      now,
    };
    return this.group.run(() => this.stmt.finish.run(row).changes === 1);
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
    return this.group.run(() => {
      if (this.stmt.holds.get(lease.taskId, lease.fence) === undefined) return { held: false, step: undefined };
      const existing = this.stmt.step.get(lease.taskId, name) as StepRow | undefined;
      if (existing) return { held: true, step: toStep(existing) };
      const totals = this.stmt.stepTotals.get(lease.taskId) as StepTotals;
      checkStepLimits(limits, totals.steps + 1, totals.bytes + bytes);
      this.stmt.insertStep.run(lease.taskId, name, lease.taskId, json, bytes, now);
      return {
        held: true,
        step: { name, result: json === null ? undefined : (JSON.parse(json) as JsonValue), committedAt: now },
      };
    });
  }

  async saveCheckpoint(lease: LeaseRef, value: JsonValue, now: number, limits: StepWriteLimits = {}): Promise<boolean> {
    const json = JSON.stringify(value);
    const bytes = Buffer.byteLength(json, 'utf8');
    return this.group.run(() => {
      if (this.stmt.holds.get(lease.taskId, lease.fence) === undefined) return false;
      const totals = this.stmt.stepTotals.get(lease.taskId) as StepTotals;
      // the new checkpoint replaces the old one: only the steps and the new value count
      checkStepLimits({ maxTotalBytes: limits.maxTotalBytes }, 0, totals.bytes - totals.checkpoint_bytes + bytes);
      this.stmt.saveCheckpoint.run(lease.taskId, json, bytes, now);
      return true;
    });
  }

  async readSteps(taskId: string): Promise<TaskSteps> {
    const rows = this.stmt.steps.all(taskId) as (StepRow & { kind: 'step' | 'checkpoint' })[];
    const checkpoint = rows.find((r) => r.kind === 'checkpoint');
    return {
      steps: rows.filter((r) => r.kind === 'step').map(toStep),
      checkpoint: checkpoint?.result == null ? undefined : (JSON.parse(checkpoint.result) as JsonValue),
    };
  }

  async answerInputs(taskId: string, responses: Record<string, InputResponse>, now: number): Promise<string[]> {
    const accepted = this.db
      .transaction(() => {
        if (this.stmt.openStatus.get(taskId) === undefined) return [];
        const keys: string[] = [];
        for (const [key, response] of Object.entries(responses)) {
          if (this.stmt.answer.run(JSON.stringify(response), now, taskId, key).changes === 1) keys.push(key);
        }
        if (keys.length > 0) {
          const { n } = this.stmt.outstanding.get(taskId) as { n: number };
          if (n === 0) this.stmt.toWorking.run(now, taskId);
          else this.stmt.touch.run(now, taskId);
        }
        return keys;
      })
      .immediate();
    if (accepted.length > 0) this.emit({ taskId, kind: 'input' });
    return accepted;
  }

  async requestCancel(taskId: string, now: number): Promise<boolean> {
    const changed = this.stmt.cancel.run(now, taskId).changes === 1;
    const open = changed || this.stmt.isOpen.get(taskId) !== undefined;
    if (open) this.emit({ taskId, kind: 'cancel' });
    return open;
  }

  async renewLeases(holder: string, leases: LeaseRef[], until: number): Promise<RenewedLease[]> {
    const renewed: RenewedLease[] = [];
    // one statement per step of RENEW_STEP leases, the event loop free between steps: SQLite runs on the serving
    // thread, and thousands of leases in one statement would hold it for longer than a request may wait
    for (let from = 0; from < leases.length; from += RENEW_STEP) {
      if (from > 0) await new Promise((resolve) => setImmediate(resolve));
      renewed.push(...this.renewStep(holder, leases.slice(from, from + RENEW_STEP), until));
    }
    return renewed;
  }

  private renewStep(holder: string, leases: LeaseRef[], until: number): RenewedLease[] {
    const rows = this.stmt.renew.all(
      until,
      JSON.stringify(leases.map((l) => l.taskId)),
      JSON.stringify(leases.map((l) => `${l.fence}:${l.taskId}`)),
      holder,
    ) as {
      task_id: string;
      fence: number;
      cancel_requested: number;
    }[];
    const byLease = new Map(rows.map((r) => [`${r.fence}:${r.task_id}`, r.cancel_requested === 1]));
    return leases.flatMap((l) => {
      const cancelRequested = byLease.get(`${l.fence}:${l.taskId}`);
      return cancelRequested === undefined ? [] : [{ taskId: l.taskId, fence: l.fence, cancelRequested }];
    });
  }

  async answeredInputs(awaited: AwaitedInput[]): Promise<Array<AwaitedInput & { response: InputResponse }>> {
    if (awaited.length === 0) return [];
    const rows = this.stmt.answered.all(JSON.stringify(awaited.map((a) => [a.taskId, a.key]))) as {
      task_id: string;
      key: string;
      response: string;
    }[];
    return rows.map(toAnsweredInput);
  }

  async claimOrphans(
    holder: string,
    now: number,
    until: number,
    limit: number,
    deadHolders: string[] = [],
  ): Promise<StoredTask[]> {
    return this.db
      .transaction(() => {
        const rows = this.stmt.orphans.all(now, JSON.stringify(deadHolders), limit) as { task_id: string }[];
        for (const { task_id } of rows) this.stmt.claim.run(holder, until, holder, task_id);
        return rows.map(({ task_id }) => this.read(task_id)!);
      })
      .immediate();
  }

  async leaseHolders(): Promise<string[]> {
    return (this.stmt.leaseHolders.all() as { lease_owner: string }[]).map((r) => r.lease_owner);
  }

  async expireOverdue(now: number, limit = -1): Promise<string[]> {
    return this.db
      .transaction(() => {
        // LIMIT -1: no limit
        const rows = this.stmt.overdue.all(now, limit) as { task_id: string; ttl_ms: number }[];
        for (const { task_id, ttl_ms } of rows) {
          const message = expiredMessage(ttl_ms);
          this.stmt.expire.run(JSON.stringify({ code: -32603, message }), message, now, task_id);
        }
        return rows.map((r) => r.task_id);
      })
      .immediate();
  }

  async purge(now: number, retentionMs: number, options: PurgeOptions = {}): Promise<number> {
    const limit = options.limit ?? SWEEP_PAGE;
    const unlimitedRetentionMs = options.unlimitedRetentionMs;
    return this.db
      .transaction(() => {
        const rows = this.stmt.purgeable.all(now - retentionMs, limit) as { task_id: string; principal: string }[];
        if (unlimitedRetentionMs !== undefined && rows.length < limit) {
          rows.push(
            ...(this.stmt.purgeableUnlimited.all(now - unlimitedRetentionMs, limit - rows.length) as {
              task_id: string;
              principal: string;
            }[]),
          );
        }
        for (const { task_id, principal } of rows) {
          this.stmt.delete.run(task_id);
          this.stmt.tombstone.run(task_id, principal, now);
        }
        // tombstones only need to outlive a client's last reasonable poll
        const dropped = this.stmt.dropTombstones.run(now - TOMBSTONE_RETENTION_MS, limit).changes;
        return rows.length + dropped;
      })
      .immediate();
  }

  subscribe(listener: (signal: TaskSignal) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    // writes already asked for are committed (or failed) before the file closes, never dropped
    this.group.commit();
    await this.checkpointer?.stop();
    if (this.db.open) this.db.close();
  }

  private emit(signal: TaskSignal): void {
    for (const listener of this.listeners) listener(signal);
  }

  private read(taskId: string): StoredTask | undefined {
    const row = this.stmt.get.get(taskId) as TaskRow | undefined;
    return row ? this.toTask(row) : undefined;
  }

  private toTask(row: TaskRow): StoredTask {
    const inputs = (this.stmt.inputs.all(row.task_id) as InputRow[]).map((i) => ({
      ...i,
      requestedAt: i.requested_at,
      answeredAt: i.answered_at,
    }));
    return toStoredTask(row, inputs);
  }

  async listTasks(query: TaskListQuery = {}): Promise<TaskListPage> {
    return listSqliteTasks(this.db, query);
  }

  async countTasks(query: TaskListQuery = {}): Promise<TaskCounts> {
    return countSqliteTasks(this.db, query);
  }

  async taskVersions(taskIds: string[]): Promise<TaskVersion[]> {
    if (taskIds.length === 0) return [];
    const rows = this.stmt.versions.all(JSON.stringify(taskIds)) as {
      task_id: string;
      status: TaskStatus;
      last_updated_at: number;
      expires_at: number | null;
    }[];
    return rows.map((r) => ({
      taskId: r.task_id,
      status: r.status,
      lastUpdatedAt: r.last_updated_at,
      expiresAt: r.expires_at ?? undefined,
    }));
  }

  async taskOwners(taskIds: string[]): Promise<TaskOwner[]> {
    if (taskIds.length === 0) return [];
    const rows = this.stmt.owners.all(JSON.stringify(taskIds)) as { task_id: string; owner: string }[];
    return rows.map((r) => ({ taskId: r.task_id, principal: r.owner }));
  }
}

interface StepRow {
  name: string;
  result: string | null;
  committed_at: number;
}

interface StepTotals {
  steps: number;
  bytes: number;
  checkpoint_bytes: number;
}

function toStep(row: StepRow): StoredStep {
  return toStoredStep(row);
}
