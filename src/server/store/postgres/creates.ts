/**
 * The PostgreSQL store's creates (docs/DESIGN.md, "Per-principal limits on PostgreSQL"): most go out with the other
 * creates of their turn in one statement, each counted on a shard row of its principal; an idempotent replay answers
 * the task its key made; a create whose shard has no quota left takes the exact path, under every shard row's lock.
 */
import type pg from 'pg';

import { asError } from '../../../shared/postgres/errors.js';
import { inTransaction } from '../../../shared/postgres/transaction.js';
import type { NewTask, StoredTask } from '../taskStore.js';
import { insertedTask, OpenTaskLimitError, StoredTaskLimitError } from '../taskStore.js';
import type { PendingCreate } from './batches.js';
import {
  asJson,
  CREATE_FIELDS,
  createdTask,
  DEADLOCK_DETECTED,
  insertParameters,
  prepared,
  ranAloneAfter,
  splitRepeats,
  turnBatcher,
} from './batches.js';
import type { ShardCounts } from './quotaShards.js';
import { ARGUMENTS_PARAMETER, COUNT_SHARDS, dealQuotas } from './quotaShards.js';
import type { TaskRow } from './rows.js';
import { toTask } from './rows.js';
import { ShardGroups } from './shardGroups.js';
import { SQL } from './sql.js';

/** The creates of one PostgresTaskStore, on its pool; the store wraps each in its error handling. */
export class PostgresCreates {
  private readonly pool: pg.Pool;
  /** Creates asked for in one turn of the event loop, sent as one or two statements (`batches`). */
  private readonly batcher = turnBatcher(
    (batch: readonly PendingCreate[]) => this.createBatch(batch),
    ({ task }) => [
      task.taskId,
      ...(task.idempotencyKey === undefined ? [] : [`${task.principal}\0${task.idempotencyKey}`]),
    ],
  );
  /** How many creates of a principal in one batch share a shard row. */
  private readonly shardGroups = new ShardGroups();

  constructor(pool: pg.Pool) {
    this.pool = pool;
  }

  /** One create: the task as stored, and whether this call made it (false: an idempotent replay's task). */
  async create(task: NewTask): Promise<{ task: StoredTask; created: boolean }> {
    const open = task.maxOpenTasksForPrincipal ?? null;
    const stored = task.maxStoredTasksForPrincipal ?? null;
    const shard = Math.floor(Math.random() * COUNT_SHARDS);
    // most creates: one statement (with the other creates of this turn), on a shard drawn at random (its batch may
    // place it on another: \`ShardGroups\`)
    const pending: PendingCreate = {
      task,
      shard,
      open,
      stored,
      parameters: [...insertParameters(task), shard, open, stored],
    };
    const inserted = await this.batcher.load(pending);
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
      this.shardGroups.remember(task.principal, Math.min(room(open, openNow), room(stored, storedNow)));
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

  /** A batch of creates: each inserted task, or undefined where its shard or a unique index did not admit it. */
  private async createBatch(batch: readonly PendingCreate[]): Promise<Array<StoredTask | undefined | Error>> {
    const alone = (create: PendingCreate) => this.createAlone(create).catch(asError);
    if (batch.length === 1) return [await alone(batch[0]!)];
    // a task id twice in one batch: the later call runs after the statement, and finds the id taken
    const { firsts, repeats } = splitRepeats(batch, (c) => c.task.taskId);
    this.shardGroups.place(firsts);
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
}
