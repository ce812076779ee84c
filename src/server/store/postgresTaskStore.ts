/**
 * The TaskStore for many instances on one PostgreSQL database (docs/DESIGN.md, "The task's life on the server", points
 * 7 and 8): "a table of SQL plus the rules". The statements are in postgres/sql.ts, the schema in postgres/schema.ts,
 * the creates (batched, under the per-principal limits) in postgres/creates.ts; each write is one statement or one
 * transaction, committed before its promise resolves. Claims take rows with `FOR UPDATE SKIP LOCKED`, handler writes
 * carry the fence, and cancel and input signals travel by LISTEN/NOTIFY in the same transaction as the write.
 *
 * JSON values are kept as TEXT written by `JSON.stringify`: exact round trips, including strings that PostgreSQL's
 * json/jsonb types refuse (`\u0000`, lone surrogates), which a tool's arguments may carry.
 */
import type pg from 'pg';

import type { InputRequest, InputResponse, TaskStatus } from '../../protocol/index.js';
import { passwordsOf } from '../../shared/postgres/connectionString.js';
import { DatabaseClock, renewedLeaseLength } from '../../shared/postgres/databaseClock.js';
import { loadPg } from '../../shared/postgres/driver.js';
import { asError, wrapPostgresError } from '../../shared/postgres/errors.js';
import { runMigrations } from '../../shared/postgres/migrations.js';
import { connectionConfig, guardPool, statementTimeouts } from '../../shared/postgres/pool.js';
import { inTransaction } from '../../shared/postgres/transaction.js';
import { SWEEP_PAGE, TOMBSTONE_RETENTION_MS } from './housekeeping.js';
import { countPostgresTasks, listPostgresTasks } from './listing/postgres.js';
import type { TaskCounts, TaskListPage, TaskListQuery } from './listing/query.js';
import { TaskListQueryError } from './listing/query.js';
import type { PendingFinish } from './postgres/batches.js';
import {
  asJson,
  FINISH_FIELDS,
  finishParameters,
  prepared,
  ranAloneAfter,
  splitRepeats,
  turnBatcher,
} from './postgres/batches.js';
import { PostgresCreates } from './postgres/creates.js';
import type { StepRow, StepTotals, TaskRow } from './postgres/rows.js';
import { parseSignal, signalPayload, toStep, toTask } from './postgres/rows.js';
import { MIGRATIONS, TASK_SIGNAL_CHANNEL } from './postgres/schema.js';
import { SQL } from './postgres/sql.js';
import { PostgresListener } from './postgresListener.js';
import { toAnsweredInput } from './taskRows.js';
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
import { checkStepLimits, OpenTaskLimitError, StepLimitError, StoredTaskLimitError } from './taskStore.js';

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
  /** The creates, most sent with the others of their turn in one statement (its own module: postgres/creates.ts). */
  private readonly creates: PostgresCreates;
  /** Finishes asked for in one turn of the event loop, sent as one or two statements (`batches`). */
  private readonly finishes = turnBatcher(
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
   * Uses an existing pool (left open by `close()`), or makes one from a connection string. Connects lazily: the first
   * call of any kind migrates the schema (`migrated`); `PostgresTaskStore.open` does that at once, and also reads the
   * database's clock and starts LISTEN before it returns.
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
    this.creates = new PostgresCreates(this.pool);
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
    return this.inFlight(this.guard('create', () => this.creates.create(task)));
  }

  /** `call`, counted in `callsInFlight` until it settles. */
  private inFlight<T>(call: Promise<T>): Promise<T> {
    this.callsInFlight.add(call);
    void call.finally(() => this.callsInFlight.delete(call)).catch(() => {});
    return call;
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
      return rows.map(toAnsweredInput);
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
