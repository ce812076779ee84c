// The per-principal limits on PostgreSQL stay exact under load (docs/DESIGN.md, "Per-principal limits on
// PostgreSQL"): many creates of one principal racing on several instances at its limit never let it exceed
// maxOpenTasksForPrincipal or maxStoredTasksForPrincipal, and never refuse one that fits, while tasks finish, expire
// and are purged beside them; a database migrated with tasks in it keeps counting them, and so does one an operator
// TRUNCATEs (the tasks, or the counts). A create of an idempotency key whose twin is in flight is that task's replay,
// not refused, with the principal one task under its limit.
import { randomUUID } from 'node:crypto';

import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { PostgresTaskStore } from '../../../src/server/store/postgresTaskStore.js';
import type { NewTask, StoredTask } from '../../../src/server/store/taskStore.js';
import { OpenTaskLimitError, StoredTaskLimitError } from '../../../src/server/store/taskStore.js';
import { type StartedPostgres, startPostgres } from '../../support/postgres.js';

const T0 = 1_700_000_000_000;
const LIMITS = { maxOpenTasksForPrincipal: 5, maxStoredTasksForPrincipal: 12 };

let postgres: StartedPostgres;
let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
let admin: pg.Client;
let stores: PostgresTaskStore[] = [];

beforeAll(async () => {
  postgres = await startPostgres();
});

afterAll(async () => {
  await postgres?.stop();
});

beforeEach(async () => {
  database = await postgres.createDatabase();
  admin = new pg.Client({ connectionString: database.connectionString });
  await admin.connect();
  stores = await Promise.all([1, 2, 3].map(() => PostgresTaskStore.open(database.connectionString, { listen: false })));
});

afterEach(async () => {
  for (const store of stores.splice(0)) await store.close();
  await admin.end();
  await database.drop();
});

function newTask(overrides: Partial<NewTask> = {}): NewTask {
  return {
    taskId: `task-${randomUUID()}`,
    principal: 'carol',
    toolName: 'slow_echo',
    arguments: {},
    createdAt: T0,
    ttlMs: 600_000,
    pollIntervalMs: 500,
    resumable: false,
    leaseHolder: 'instance-a',
    leaseExpiresAt: T0 + 30_000,
    ...LIMITS,
    ...overrides,
  };
}

/** `count` creates at once, spread over the instances; the tasks created and the refusals by class. */
async function race(count: number, overrides: Partial<NewTask> = {}) {
  const settled = await Promise.allSettled(
    Array.from({ length: count }, (_, i) => stores[i % stores.length]!.create(newTask(overrides))),
  );
  const created: StoredTask[] = [];
  let open = 0;
  let stored = 0;
  for (const result of settled) {
    if (result.status === 'fulfilled') {
      expect(result.value.created).toBe(true);
      created.push(result.value.task);
    } else if (result.reason instanceof OpenTaskLimitError) open++;
    else if (result.reason instanceof StoredTaskLimitError) stored++;
    else throw result.reason;
  }
  return { created, refused: { open, stored } };
}

/** What the database holds for the principal, counted from the tasks themselves. */
async function held(principal = 'carol') {
  const { rows } = await admin.query<{ open: string; stored: string }>(
    `SELECT COUNT(*) FILTER (WHERE status IN ('working','input_required')) AS open, COUNT(*) AS stored
     FROM closeout_tasks WHERE owner = $1`,
    [principal],
  );
  return { open: Number(rows[0]!.open), stored: Number(rows[0]!.stored) };
}

const finish = (task: StoredTask, now = T0 + 1) =>
  stores[0]!.finish({ taskId: task.taskId, fence: task.fence }, { status: 'completed', result: {} }, now);

describe('PostgreSQL per-principal limits under racing creates', () => {
  it('never lets a principal exceed either limit, and never refuses a create that fits', async () => {
    // open limit first: 40 racing creates, exactly 5 get in
    const first = await race(40);
    expect(first.created).toHaveLength(5);
    expect(first.refused).toEqual({ open: 35, stored: 0 });
    expect(await held()).toEqual({ open: 5, stored: 5 });

    // two finish while 30 more race: exactly the two freed slots are taken, whichever lands first
    const [, , second] = await Promise.all([finish(first.created[0]!), finish(first.created[1]!), race(30)]);
    const afterSecond = await held();
    expect(afterSecond.open).toBeLessThanOrEqual(5);
    await Promise.all(first.created.slice(2).map((task) => finish(task)));
    await Promise.all(second.created.map((task) => finish(task)));
    expect((await held()).open).toBe(0);
    const storedSoFar = 5 + second.created.length;
    expect(storedSoFar).toBeLessThanOrEqual(7);

    // a principal at none of its limits: every slot up to the tighter one is taken, no more
    const third = await race(30);
    expect(third.created).toHaveLength(Math.min(5, 12 - storedSoFar));
    expect(await held()).toEqual({ open: third.created.length, stored: storedSoFar + third.created.length });
    await Promise.all(third.created.map((task) => finish(task)));
    const full = await race(20);
    const atStored = await held();
    expect(atStored.stored).toBeLessThanOrEqual(12);
    expect(atStored.open).toBeLessThanOrEqual(5);
    expect(full.created).toHaveLength(Math.min(5, 12 - (storedSoFar + third.created.length)));
    await Promise.all(full.created.map((task) => finish(task)));
    expect(await held()).toEqual({ open: 0, stored: 12 });
    const refused = await race(10);
    expect(refused).toEqual({ created: [], refused: { open: 0, stored: 10 } });

    // purge frees stored slots, expiry frees open ones; another principal is counted apart
    expect((await race(3, { principal: 'dave' })).created).toHaveLength(3);
    expect(await stores[1]!.purge(T0 + 10_000_000, 0)).toBe(12);
    const short = await race(30, { ttlMs: 1000 });
    expect(short.created).toHaveLength(5);
    expect(short.refused).toEqual({ open: 25, stored: 0 });
    expect(await stores[2]!.expireOverdue(T0 + 2000)).toHaveLength(5);
    const afterExpiry = await race(30);
    expect(afterExpiry.created).toHaveLength(5);
    expect(await held()).toEqual({ open: 5, stored: 10 });
    expect(await held('dave')).toEqual({ open: 3, stored: 3 });
  });

  it('answers a create racing its idempotent twin with one task under the limit as a replay, never a refusal', async () => {
    // found by an adversarial review: the twin whose shard had no quota left took the exact path, looked for the key
    // before the other committed, waited for its shard lock, then found the totals at the limit and refused
    const limits = { maxOpenTasksForPrincipal: 3, maxStoredTasksForPrincipal: 1_000 };
    await race(2, limits);
    const outcomes: string[] = [];
    for (let round = 0; round < 12; round++) {
      const key = `order-${round}`;
      const twin = () => newTask({ ...limits, idempotencyKey: key });
      // in one turn of one instance, and at once on two
      const [a, b] =
        round % 2 === 0
          ? [stores[0]!.create(twin()), stores[0]!.create(twin())]
          : [stores[0]!.create(twin()), stores[1]!.create(twin())];
      const settled = await Promise.allSettled([a, b]);
      const answers = settled.map((result) =>
        result.status === 'fulfilled' ? (result.value.created ? 'created' : 'replay') : String(result.reason),
      );
      outcomes.push(answers.sort().join(' + '));
      const tasks = settled.flatMap((result) => (result.status === 'fulfilled' ? [result.value.task.taskId] : []));
      expect(new Set(tasks).size).toBe(1);
      // the next round starts one under the limit again
      const created = settled.find((result) => result.status === 'fulfilled' && result.value.created);
      if (created?.status === 'fulfilled') await finish(created.value.task);
    }
    expect(outcomes).toEqual(Array.from({ length: 12 }, () => 'created + replay'));
    expect(await held()).toMatchObject({ open: 2 });
  });

  it('counts the tasks a database held before migration 8 against the limits', async () => {
    // a database of the release before the counts (schema v7): its tasks are counted when it migrates
    const before = await race(4);
    await finish(before.created[0]!);
    for (const store of stores.splice(0)) await store.close();
    await admin.query('DROP TABLE closeout_principal_tasks');
    for (const fn of [
      'closeout_count_inserted_tasks',
      'closeout_count_task_status',
      'closeout_count_deleted_tasks',
      'closeout_uncount_truncated_tasks',
      'closeout_recount_tasks',
    ]) {
      await admin.query(`DROP FUNCTION ${fn} CASCADE`);
    }
    await admin.query('ALTER TABLE closeout_tasks DROP COLUMN count_shard');
    await admin.query('ALTER TABLE closeout_tasks DROP COLUMN closed_counted');
    // migration 12's listing indexes, made again with the migrations the database goes back through
    await admin.query(
      'DROP INDEX closeout_tasks_listing_status, closeout_tasks_listing_tool, closeout_tasks_listing_owner, closeout_tasks_listing_task_id',
    );
    await admin.query('DELETE FROM closeout_schema_version WHERE version >= 8');

    stores = await Promise.all([1, 2].map(() => PostgresTaskStore.open(database.connectionString, { listen: false })));
    expect(await held()).toEqual({ open: 3, stored: 4 });
    const after = await race(20, { maxStoredTasksForPrincipal: 5 });
    expect(after.created).toHaveLength(1);
    expect(after.refused).toEqual({ open: 0, stored: 19 });
    await Promise.all(after.created.map((task) => finish(task)));
    expect(await stores[0]!.purge(T0 + 10_000_000, 0)).toBe(2);
    expect(await held()).toEqual({ open: 3, stored: 3 });
    expect((await race(20)).created).toHaveLength(2);
    expect(await held()).toEqual({ open: 5, stored: 5 });
  });

  it('counts nothing for tasks an operator TRUNCATEd: the principal creates up to its limit again', async () => {
    expect((await race(8)).created).toHaveLength(5);
    await admin.query('TRUNCATE closeout_tasks CASCADE');
    expect(await held()).toEqual({ open: 0, stored: 0 });
    const after = await race(8);
    expect(after.created).toHaveLength(5);
    expect(after.refused).toEqual({ open: 3, stored: 0 });
    // and the counts go on matching the tasks: finished, purged, refilled
    await Promise.all(after.created.map((task) => finish(task)));
    expect(await stores[0]!.purge(T0 + 10_000_000, 0)).toBe(5);
    expect((await race(8)).created).toHaveLength(5);
    expect(await held()).toEqual({ open: 5, stored: 5 });
  });

  it('recounts the tasks when an operator TRUNCATEs the count table itself', async () => {
    const before = await race(4);
    await finish(before.created[0]!);
    await admin.query('TRUNCATE closeout_principal_tasks');
    expect(await held()).toEqual({ open: 3, stored: 4 });
    const after = await race(20, { maxStoredTasksForPrincipal: 5 });
    expect(after.created).toHaveLength(1);
    expect(after.refused).toEqual({ open: 0, stored: 19 });
    await finish(after.created[0]!);
    expect((await race(8, { maxStoredTasksForPrincipal: 100 })).created).toHaveLength(2);
    expect(await held()).toEqual({ open: 5, stored: 7 });
  });
});
