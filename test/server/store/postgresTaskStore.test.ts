import { randomBytes, randomUUID } from 'node:crypto';

import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';

import { openTaskStore } from '../../../src/server/store/openTaskStore.js';
import { SQL } from '../../../src/server/store/postgres/sql.js';
import { PostgresTaskStore } from '../../../src/server/store/postgresTaskStore.js';
import type { NewTask, StoredTask, TaskSignal } from '../../../src/server/store/taskStore.js';
import { OpenTaskLimitError } from '../../../src/server/store/taskStore.js';
import { describeTaskStoreContract } from '../../../src/testing/index.js';
import { everythingShown, failingConnections } from '../../support/passwordLeaks.js';
import { freePort, type StartedPostgres, startPostgres } from '../../support/postgres.js';

let postgres: StartedPostgres;

beforeAll(async () => {
  postgres = await startPostgres();
});

afterAll(async () => {
  await postgres?.stop();
});

describeTaskStoreContract('PostgresTaskStore', async () => {
  const database = await postgres.createDatabase();
  const store = await PostgresTaskStore.open(database.connectionString);
  return {
    store,
    openSecond: () => PostgresTaskStore.open(database.connectionString),
    cleanup: async () => {
      await store.close();
      await database.drop();
    },
  };
});

const T0 = 1_700_000_000_000;

function newTask(overrides: Partial<NewTask> = {}): NewTask {
  return {
    taskId: `task-${randomUUID()}`,
    principal: 'alice',
    toolName: 'slow_echo',
    arguments: { text: 'hello' },
    createdAt: T0,
    ttlMs: 600_000,
    pollIntervalMs: 500,
    resumable: true,
    leaseHolder: 'instance-a',
    leaseExpiresAt: T0 + 30_000,
    ...overrides,
  };
}

describe('PostgresTaskStore across instances', () => {
  let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
  let admin: pg.Client;
  const stores: PostgresTaskStore[] = [];

  async function openStore(options: Parameters<typeof PostgresTaskStore.open>[1] = {}): Promise<PostgresTaskStore> {
    const store = await PostgresTaskStore.open(database.connectionString, options);
    stores.push(store);
    return store;
  }

  beforeEach(async () => {
    database = await postgres.createDatabase();
    admin = new pg.Client({ connectionString: database.connectionString });
    await admin.connect();
  });

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    await admin.end();
    await database.drop();
  });

  it('migrates once when several instances open a fresh database at the same moment', async () => {
    // invariant: migrations are serialised by an advisory lock and versioned, so concurrent starts neither fail nor
    // apply a migration twice
    await Promise.all(Array.from({ length: 6 }, () => openStore({ listen: false })));
    const versions = await admin.query<{ version: number }>(
      'SELECT version FROM closeout_schema_version ORDER BY version',
    );
    expect(versions.rows).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13].map((version) => ({ version })));
    await openStore({ listen: false });
    expect((await admin.query('SELECT version FROM closeout_schema_version')).rowCount).toBe(13);
  });

  it('migrates a version 5 database with its tasks to the current version, where steps are stored and fenced', async () => {
    // invariant: shipped migrations are append-only; a database of the release before durable steps (schema v5, the
    // same statements as this build's first five) keeps its tasks and gains the steps table
    const old = await openStore({ listen: false });
    const { task } = await old.create(newTask());
    await old.close();
    stores.splice(stores.indexOf(old), 1);
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
    await admin.query('DROP TABLE closeout_task_steps');
    await admin.query('ALTER TABLE closeout_tasks DROP COLUMN trace_context');
    // migration 12's listing indexes, made again with the migrations the database goes back through
    await admin.query(
      'DROP INDEX closeout_tasks_listing_status, closeout_tasks_listing_tool, closeout_tasks_listing_owner, closeout_tasks_listing_task_id',
    );
    await admin.query('DELETE FROM closeout_schema_version WHERE version >= 6');

    const store = await openStore({ listen: false });
    const versions = await admin.query<{ version: number }>(
      'SELECT MAX(version) AS version FROM closeout_schema_version',
    );
    expect(versions.rows[0]?.version).toBe(13);
    expect(await store.get(task.taskId)).toEqual(task);
    const lease = { taskId: task.taskId, fence: task.fence };
    expect((await store.recordStep(lease, 'start-job', { jobId: 'j-1' }, T0 + 1)).held).toBe(true);
    expect(await store.recordStep({ ...lease, fence: 0 }, 'stale', 1, T0 + 2)).toEqual({
      held: false,
      step: undefined,
    });
    expect(await store.readSteps(task.taskId)).toEqual({
      steps: [{ name: 'start-job', result: { jobId: 'j-1' }, committedAt: T0 + 1 }],
      checkpoint: undefined,
    });
  });

  it('keeps only the indexes a statement of the store reads, and every read of tasks still uses one at 100k rows', async () => {
    // invariant: an index costs every create and finish a write (bench/RESULTS.md, sections 37 and 38); since schema 8
    // counts a principal's tasks in closeout_principal_tasks, nothing reads the open-owner index, and without it no
    // statement that filters tasks scans the table, on a database holding 100,000 finished tasks of one principal and
    // some open ones. The four listing indexes are the operators' listing's (test/server/store/listing.test.ts plans
    // each of its query shapes on them)
    await openStore({ listen: false });
    const { rows: indexes } = await admin.query<{ indexname: string }>(
      `SELECT indexname FROM pg_indexes WHERE tablename = 'closeout_tasks' ORDER BY indexname`,
    );
    expect(indexes.map((r) => r.indexname)).toEqual([
      'closeout_tasks_closed_expiry',
      'closeout_tasks_closed_unlimited',
      'closeout_tasks_idempotency',
      'closeout_tasks_listing_owner',
      'closeout_tasks_listing_status',
      'closeout_tasks_listing_task_id',
      'closeout_tasks_listing_tool',
      'closeout_tasks_open_expiry',
      'closeout_tasks_open_lease',
      'closeout_tasks_open_lease_owner',
      'closeout_tasks_pkey',
    ]);
    await admin.query(
      `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
         expires_at, poll_interval_ms, resumable, result, idempotency_key, lease_owner, lease_expires_at, count_shard)
       SELECT 'filler-' || g, 'one', 'bench', '{}', CASE WHEN g % 1000 = 0 THEN 'working' ELSE 'completed' END,
         $1::bigint, $1::bigint, CASE WHEN g % 7 = 0 THEN NULL ELSE 3600000 END,
         CASE WHEN g % 7 = 0 THEN NULL ELSE $1::bigint + 3600000 END, 1000, false, '{}', 'key-' || g,
         CASE WHEN g % 1000 = 0 THEN 'instance-' || (g % 3) END, CASE WHEN g % 1000 = 0 THEN $1::bigint END, g % 128
       FROM generate_series(1, 100000) g`,
      [T0],
    );
    await admin.query('VACUUM ANALYZE closeout_tasks');
    const reads = [
      'get',
      'getMany',
      'byIdempotencyKey',
      'createBatch',
      'finishBatch',
      'finish',
      'setStatusMessage',
      'lockHeld',
      'lockOpen',
      'cancel',
      'renew',
      'claim',
      'leaseHolders',
      'expire',
      'purge',
      'versions',
    ] as const;
    for (const name of reads) {
      // the plan made without parameter values: what a statement prepared once per connection runs with
      const { rows } = await admin.query<{ 'QUERY PLAN': string }>(`EXPLAIN (GENERIC_PLAN) ${SQL[name]}`);
      const plan = rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan, `${name}:\n${plan}`).not.toMatch(/Seq Scan on closeout_tasks/);
      // a batch of finishes finds its tasks by id alone: an open-tasks index also holds an entry for every task
      // finished since the last vacuum, which such a scan reads, thousands of them in a busy minute
      if (name === 'finishBatch') expect(plan, plan).not.toMatch(/closeout_tasks_open_/);
    }
  });

  it('turns two concurrent creates with one idempotency key on two instances into one task', async () => {
    // invariant: the unique (owner, idempotency_key) index decides the race; the loser reads the winner's task
    const a = await openStore({ listen: false });
    const b = await openStore({ listen: false });
    const rounds = 25;
    for (let round = 0; round < rounds; round++) {
      const key = `order-${round}`;
      const [fromA, fromB] = await Promise.all([
        a.create(newTask({ idempotencyKey: key, leaseHolder: 'instance-a' })),
        b.create(newTask({ idempotencyKey: key, leaseHolder: 'instance-b' })),
      ]);
      expect([fromA.created, fromB.created].sort()).toEqual([false, true]);
      expect(fromA.task).toEqual(fromB.task);
    }
    const { rows } = await admin.query<{ n: string }>('SELECT COUNT(*) AS n FROM closeout_tasks');
    expect(Number(rows[0]?.n)).toBe(rounds);
  });

  it('holds the per-owner open-task limit when two instances create at once', async () => {
    // invariant: the count and the insert share one per-owner lock, so racing instances cannot both take the last slot
    const a = await openStore({ listen: false });
    const b = await openStore({ listen: false });
    const racing = await Promise.allSettled(
      Array.from({ length: 10 }, (_, i) =>
        (i % 2 === 0 ? a : b).create(newTask({ principal: 'carol', maxOpenTasksForPrincipal: 4 })),
      ),
    );
    expect(racing.filter((r) => r.status === 'fulfilled')).toHaveLength(4);
    for (const r of racing) if (r.status === 'rejected') expect(r.reason).toBeInstanceOf(OpenTaskLimitError);
    const { rows } = await admin.query<{ n: string }>(`SELECT COUNT(*) AS n FROM closeout_tasks WHERE owner = 'carol'`);
    expect(Number(rows[0]?.n)).toBe(4);
  });

  it('never lets two instances claim the same orphan', async () => {
    // invariant: FOR UPDATE SKIP LOCKED splits orphans between concurrent claimers; each is claimed exactly once
    const seeder = await openStore({ listen: false });
    const orphanIds: string[] = [];
    for (let i = 0; i < 60; i++) {
      const { task } = await seeder.create(newTask({ createdAt: T0 + i, leaseExpiresAt: T0 + 1000 }));
      orphanIds.push(task.taskId);
    }
    const claimers = await Promise.all(['b', 'c', 'd'].map(() => openStore({ listen: false })));
    const claimedBy = new Map<string, string[]>();
    await Promise.all(
      claimers.map(async (store, index) => {
        const owner = `instance-${index}`;
        for (;;) {
          const batch = await store.claimOrphans(owner, T0 + 60_000, T0 + 120_000, 7);
          if (batch.length === 0) return;
          for (const task of batch) claimedBy.set(task.taskId, [...(claimedBy.get(task.taskId) ?? []), owner]);
        }
      }),
    );
    expect([...claimedBy.keys()].sort()).toEqual([...orphanIds].sort());
    for (const [taskId, owners] of claimedBy) expect(owners, taskId).toHaveLength(1);
    const { rows } = await admin.query<{ fence: number; attempt: number }>(
      'SELECT DISTINCT fence, attempt FROM closeout_tasks',
    );
    expect(rows).toEqual([{ fence: 2, attempt: 2 }]);
  });

  it('delivers an input or cancel signal from one instance to the subscriber of another within a second', async () => {
    // invariant: NOTIFY is sent in the writing transaction and reaches every listening instance well under a second
    const writer = await openStore();
    const runner = await openStore();
    const signals: TaskSignal[] = [];
    // status signals (for push) are pinned on their own below
    runner.subscribe((signal) => void (signal.kind !== 'status' && signals.push(signal)));
    const { task } = await writer.create(newTask());
    await runner.requestInput({ taskId: task.taskId, fence: 1 }, 'k', { method: 'roots/list' }, T0 + 1);

    expect(await writer.answerInputs(task.taskId, { k: { roots: [] } }, T0 + 2)).toEqual(['k']);
    await vi.waitFor(() => expect(signals).toEqual([{ taskId: task.taskId, kind: 'input' }]), {
      timeout: 1000,
      interval: 5,
    });
    expect(await writer.requestCancel(task.taskId, T0 + 3)).toBe(true);
    await vi.waitFor(() => expect(signals.at(-1)).toEqual({ taskId: task.taskId, kind: 'cancel' }), {
      timeout: 1000,
      interval: 5,
    });
  });

  it('signals every committed change of what tasks/get answers to every instance, and no refused write', async () => {
    // invariant (push): status message, input_required, terminal write and expiry each NOTIFY `status` in
    // their own statement; a write refused by its fence or by "not yet terminal" signals nothing
    const writer = await openStore();
    const watcher = await openStore();
    const signals: TaskSignal[] = [];
    watcher.subscribe((signal) => void (signal.kind === 'status' && signals.push(signal)));
    await watcher.listening();
    const { task } = await writer.create(newTask());
    const { task: expiring } = await writer.create(newTask({ ttlMs: 10 }));
    const lease = { taskId: task.taskId, fence: 1 };
    expect(await writer.setStatusMessage({ ...lease, fence: 2 }, 'stale fence', T0 + 1)).toBe(false);
    expect(await writer.setStatusMessage(lease, 'half way', T0 + 1)).toBe(true);
    expect((await writer.requestInput(lease, 'k', { method: 'roots/list' }, T0 + 2)).held).toBe(true);
    expect(await writer.finish(lease, { status: 'completed', result: { content: [] } }, T0 + 3)).toBe(true);
    expect(await writer.finish(lease, { status: 'cancelled' }, T0 + 4)).toBe(false);
    expect(await writer.expireOverdue(T0 + 100)).toEqual([expiring.taskId]);
    const expected = [task.taskId, task.taskId, task.taskId, expiring.taskId].map((taskId) => ({
      taskId,
      kind: 'status',
    }));
    await vi.waitFor(() => expect(signals).toEqual(expected), { timeout: 5000, interval: 10 });
  });

  it('listens again after the database drops the LISTEN connection', async () => {
    // invariant: a dropped LISTEN connection reconnects on its own, and signals flow again
    const errors: Error[] = [];
    const runner = await openStore({ onError: (error) => errors.push(error) });
    const writer = await openStore();
    const signals: TaskSignal[] = [];
    // status signals (for push) are pinned on their own below
    runner.subscribe((signal) => void (signal.kind !== 'status' && signals.push(signal)));

    const terminated = await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = current_database() AND query ILIKE 'LISTEN%' AND pid <> pg_backend_pid()`,
    );
    expect(terminated.rowCount).toBe(2); // the runner's and the writer's listeners
    await vi.waitFor(() => expect(errors.map((e) => e.message).join('\n')).toMatch(/LISTEN connection lost/), {
      timeout: 5000,
      interval: 10,
    });
    await runner.listening();

    const { task } = await writer.create(newTask());
    expect(await writer.requestCancel(task.taskId, T0 + 1)).toBe(true);
    await vi.waitFor(() => expect(signals).toEqual([{ taskId: task.taskId, kind: 'cancel' }]), {
      timeout: 1000,
      interval: 5,
    });
  });

  it('rolls back the whole write when the database fails halfway, surfacing an Error and sending no signal', async () => {
    // invariant: never a half-written row: a failure after the first statement of a write leaves the task as it was
    const store = await openStore();
    const signals: TaskSignal[] = [];
    store.subscribe((signal) => void (signal.kind !== 'status' && signals.push(signal)));
    const { task } = await store.create(newTask());
    await store.requestInput({ taskId: task.taskId, fence: 1 }, 'k', { method: 'roots/list' }, T0 + 1);
    const before = await store.get(task.taskId);

    // a real database error on the second statement of answerInputs and of requestInput: the task row refuses an
    // update stamped with this time
    const poison = T0 + 666;
    await admin.query(`
      CREATE FUNCTION closeout_test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.last_updated_at = ${poison} THEN RAISE EXCEPTION 'refused by test trigger'; END IF;
        RETURN NEW;
      END $$;
      CREATE TRIGGER closeout_test_refuse BEFORE UPDATE ON closeout_tasks
        FOR EACH ROW EXECUTE FUNCTION closeout_test_refuse();`);

    await expect(store.answerInputs(task.taskId, { k: { roots: [] } }, poison)).rejects.toThrow(
      /PostgreSQL task store: answerInputs failed: refused by test trigger/,
    );
    await expect(
      store.requestInput({ taskId: task.taskId, fence: 1 }, 'k2', { method: 'roots/list' }, poison),
    ).rejects.toThrow(/requestInput failed/);
    expect(await store.get(task.taskId)).toEqual(before);

    // the failed answer sent no signal: the next good one is the first to arrive
    expect(await store.requestCancel(task.taskId, T0 + 2)).toBe(true);
    await vi.waitFor(() => expect(signals).toHaveLength(1), { timeout: 5000, interval: 5 });
    expect(signals).toEqual([{ taskId: task.taskId, kind: 'cancel' }]);
  });

  it('recovers on its own after the database closed every connection', async () => {
    // invariant: a dropped connection fails at most the calls in flight (with an Error); later calls reconnect
    const store = await openStore({ listen: false });
    const { task } = await store.create(newTask());
    await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    let read: StoredTask | undefined;
    await vi.waitFor(
      async () => {
        try {
          read = await store.get(task.taskId);
        } catch (error) {
          expect(error).toBeInstanceOf(Error);
          expect((error as Error).message).toMatch(/^PostgreSQL task store: get failed: /);
          throw error;
        }
      },
      { timeout: 5000, interval: 20 },
    );
    expect(read).toEqual(task);
  });

  it('survives the database dropping a connection in the middle of a transaction, failing only that write', async () => {
    // invariant: a connection that dies while a write holds it rejects that write with an Error; it never becomes an
    // unhandled 'error' event that kills the process (found by test/e2e/serveLogs.test.ts: closeout serve crashed)
    const uncaught: unknown[] = [];
    const onUncaught = (error: unknown) => uncaught.push(error);
    process.on('uncaughtException', onUncaught);
    try {
      const store = await openStore({ listen: false });
      const { task } = await store.create(newTask());
      await store.requestInput({ taskId: task.taskId, fence: 1 }, 'k', { method: 'roots/list' }, T0 + 1);
      // the second statement of answerInputs sleeps, so the transaction is open when its connection is cut
      const slow = T0 + 777;
      await admin.query(`
        CREATE FUNCTION closeout_test_stall() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF NEW.last_updated_at = ${slow} THEN PERFORM pg_sleep(30); END IF;
          RETURN NEW;
        END $$;
        CREATE TRIGGER closeout_test_stall BEFORE UPDATE ON closeout_tasks
          FOR EACH ROW EXECUTE FUNCTION closeout_test_stall();`);
      const answering = store.answerInputs(task.taskId, { k: { roots: [] } }, slow);
      answering.catch(() => undefined);
      await vi.waitFor(
        async () => {
          const { rows } = await admin.query(
            `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`,
          );
          expect(rows).toHaveLength(1);
        },
        { timeout: 5000, interval: 20 },
      );
      await admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'PgSleep'`,
      );
      await expect(answering).rejects.toThrow(/^PostgreSQL task store: answerInputs failed: /);
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(uncaught).toEqual([]);
      // the write left nothing behind, and the store carries on with a fresh connection
      expect((await store.get(task.taskId))?.inputs[0]?.response).toBeUndefined();
      expect(await store.answerInputs(task.taskId, { k: { roots: [] } }, T0 + 2)).toEqual(['k']);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });

  it('rejects with a clear Error when the database cannot be reached', async () => {
    // invariant: storage errors surface as thrown Errors that say what failed (the runtime maps them to -32603)
    const port = await freePort();
    await expect(
      PostgresTaskStore.open(`postgres://postgres:x@127.0.0.1:${port}/nowhere`, { connectionTimeoutMs: 2000 }),
    ).rejects.toThrow(/^PostgreSQL task store: migrate failed: /);
  });

  it('refuses a database a newer build migrated, saying so, and leaves it as it is', async () => {
    // invariant: a store never writes to a schema it does not know (docs/DESIGN.md, "Storage foundation": one migration
    // runner for the task store and the ledger)
    await openStore({ listen: false });
    const { rows } = await admin.query<{ version: number }>(
      'SELECT MAX(version) AS version FROM closeout_schema_version',
    );
    const newer = rows[0]!.version + 1;
    await admin.query('INSERT INTO closeout_schema_version (version) VALUES ($1)', [newer]);
    await expect(PostgresTaskStore.open(database.connectionString, { listen: false })).rejects.toThrow(
      /^PostgreSQL task store: migrate failed: .*schema version \d+ is newer than this build/,
    );
    const after = await admin.query<{ version: number }>('SELECT MAX(version) AS version FROM closeout_schema_version');
    expect(after.rows[0]!.version).toBe(newer);
  });

  it('keeps the connection string password out of every error it makes', async () => {
    // invariant: the password never reaches a log or an error message, on the server as on the client ledger
    const password = new URL(database.connectionString).password;
    expect(password.length).toBeGreaterThan(8);
    for (const [target, shown] of await failingConnections(database.connectionString)) {
      const failure = await PostgresTaskStore.open(target, { connectionTimeoutMs: 3000, listen: false }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toBeInstanceOf(Error);
      expect((failure as Error).message).toMatch(/^PostgreSQL task store: migrate failed: /);
      expect(everythingShown(failure)).not.toContain(shown);
    }
  });

  it('is what openTaskStore opens for a postgres:// location, migrated and ready', async () => {
    // invariant: `closeout serve --store postgres://...` gets a PostgreSQL store on a schema it migrated itself
    const store = await openTaskStore(database.connectionString.replace(/^postgres:/, 'postgresql:'));
    try {
      expect(store).toBeInstanceOf(PostgresTaskStore);
      const { task } = await store.create(newTask());
      const { rows } = await admin.query<{ task_id: string }>('SELECT task_id FROM closeout_tasks');
      expect(rows).toEqual([{ task_id: task.taskId }]);
    } finally {
      await store.close();
    }
  });

  it('works on a pool it was given and leaves that pool open on close', async () => {
    // invariant: a caller's pool belongs to the caller
    const pool = new pg.Pool({ connectionString: database.connectionString, max: 3 });
    // as the caller's own pool should: dropping the database after the test ends connections the pool is closing
    pool.on('error', () => {});
    try {
      const store = await PostgresTaskStore.open(pool);
      const { task } = await store.create(newTask());
      await store.close();
      const { rows } = await pool.query<{ task_id: string }>('SELECT task_id FROM closeout_tasks');
      expect(rows).toEqual([{ task_id: task.taskId }]);
    } finally {
      await pool.end();
    }
  });
});

describe('PostgresTaskStore batches', () => {
  // the creates (and the finishes) asked for in one turn of the event loop go to the database as one statement, or
  // two from 16 calls on: one round trip and one commit for each, each call answered as it would have been alone
  let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
  let pool: pg.Pool;
  let store: PostgresTaskStore;
  let statements: string[];

  beforeEach(async () => {
    database = await postgres.createDatabase();
    pool = new pg.Pool({ connectionString: database.connectionString, max: 16 });
    // dropping the database ends the pool's idle connections
    pool.on('error', () => {});
    store = await PostgresTaskStore.open(pool, { listen: false });
    // every statement the store sends on its pool (the lease loop has a connection of its own)
    statements = [];
    const query = pool.query.bind(pool) as (...args: unknown[]) => unknown;
    (pool as { query: unknown }).query = (...args: unknown[]) => {
      statements.push(typeof args[0] === 'string' ? args[0] : String((args[0] as { text?: unknown }).text));
      return query(...args);
    };
  });

  afterEach(async () => {
    await store.close();
    await pool.end();
    await database.drop();
  });

  const limits = { maxOpenTasksForPrincipal: 1000, maxStoredTasksForPrincipal: 100_000 };
  const completed = { status: 'completed' as const, result: { content: [] } };

  it.each([
    { calls: 15, statements: 1 },
    { calls: 16, statements: 2 },
  ])('sends $calls creates made at once as $statements statement(s), and $calls finishes as as many', async (each) => {
    const tasks = Array.from({ length: each.calls }, () => newTask(limits));
    const created = await Promise.all(tasks.map((task) => store.create(task)));
    expect(created.map((c) => [c.created, c.task.taskId, c.task.status])).toEqual(
      tasks.map((t) => [true, t.taskId, 'working']),
    );
    expect(statements).toHaveLength(each.statements);

    const finished = await Promise.all(
      tasks.map((t) => store.finish({ taskId: t.taskId, fence: 1 }, completed, T0 + 1)),
    );
    expect(finished).toEqual(tasks.map(() => true));
    expect(statements).toHaveLength(2 * each.statements);
    for (const t of tasks) expect((await store.get(t.taskId))?.status).toBe('completed');
  });

  it('keeps a turn of 16 creates in one statement when two of them share an idempotency key', async () => {
    // in two statements at once, the later twin's insert would wait for the other statement's commit
    const tasks = Array.from({ length: 16 }, (_, i) => newTask({ ...limits, idempotencyKey: `key-${i}` }));
    tasks[12] = { ...tasks[12]!, idempotencyKey: 'key-3' };
    const created = await Promise.all(tasks.map((task) => store.create(task)));
    expect(statements.filter((s) => s.includes('json_to_recordset'))).toHaveLength(1);
    // one twin creates, the other is answered with its task (which one: the creates past a new principal's quota
    // take the exact path, concurrently with the later twin's)
    expect(created.filter((_, i) => i !== 3 && i !== 12).every((c) => c.created)).toBe(true);
    expect([created[3]!.created, created[12]!.created].sort()).toEqual([false, true]);
    expect(created[12]!.task.taskId).toBe(created[3]!.task.taskId);
  });

  it('keeps a turn of 16 creates in one statement when two of them share a task id', async () => {
    const tasks = Array.from({ length: 16 }, () => newTask(limits));
    tasks[12] = { ...tasks[12]!, taskId: tasks[3]!.taskId };
    const settled = await Promise.allSettled(tasks.map((task) => store.create(task)));
    expect(statements.filter((s) => s.includes('json_to_recordset'))).toHaveLength(1);
    // one twin creates, the other fails as a collision (which one: as above)
    const rejected = settled.flatMap((s, i) => (s.status === 'rejected' ? [i] : []));
    expect(rejected.length === 1 && [3, 12].includes(rejected[0]!)).toBe(true);
    expect(String((settled[rejected[0]!] as PromiseRejectedResult).reason)).toMatch(/task id collision/);
  });

  it("answers the first half of a turn's creates while the second half's statement waits for a lock", async () => {
    // one statement for the turn held every create until its slowest row could be written; two statements answer
    // each half when it commits (bench/RESULTS.md, section 34). bob's count rows, every shard, held by another
    // transaction: the half of bob's creates waits for them, the half of alice's does not
    await pool.query(
      `INSERT INTO closeout_principal_tasks (owner, shard) SELECT 'bob', g FROM generate_series(0, 127) g`,
    );
    const holder = await pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT 1 FROM closeout_principal_tasks WHERE owner = 'bob' FOR UPDATE`);
      const alices = Array.from({ length: 8 }, () => newTask({ ...limits, principal: 'alice' }));
      const bobs = Array.from({ length: 8 }, () => newTask({ ...limits, principal: 'bob' }));
      // in one turn, alice's first: the first half
      const alicesCreated = Promise.all(alices.map((task) => store.create(task)));
      let bobsSettled = false;
      const bobsCreated = Promise.all(bobs.map((task) => store.create(task))).finally(() => (bobsSettled = true));
      const waited = new Promise<never>((_, reject) => {
        setTimeout(() => reject(new Error("alice's creates still wait 10 s later")), 10_000).unref();
      });
      const alicesAnswered = await Promise.race([alicesCreated, waited]);
      expect(alicesAnswered.map((c) => [c.created, c.task.taskId])).toEqual(alices.map((t) => [true, t.taskId]));
      expect(bobsSettled).toBe(false);
      await holder.query('COMMIT');
      expect((await bobsCreated).map((c) => [c.created, c.task.taskId])).toEqual(bobs.map((t) => [true, t.taskId]));
    } finally {
      await holder.query('ROLLBACK').catch(() => {});
      holder.release();
    }
  });

  it('writes each shard row a batch of finishes counts in once, however many of its tasks the batch closes', async () => {
    // the status trigger wrote a principal's shard row once per task it closed; the batch counts once per row
    // (bench/RESULTS.md, section 19). Every task drawn into shard 5, so one batch closes 8 tasks of one row
    const random = vi.spyOn(Math, 'random').mockReturnValue(5.5 / 128);
    const tasks = Array.from({ length: 8 }, () => newTask(limits));
    try {
      // one at a time: each on the shard it drew (a batch places its creates on shards of its own)
      for (const task of tasks) await store.create(task);
    } finally {
      random.mockRestore();
    }
    await pool.query(`CREATE TABLE shard_writes (owner TEXT, shard SMALLINT, open_tasks BIGINT);
      CREATE FUNCTION log_shard_write() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO shard_writes VALUES (NEW.owner, NEW.shard, NEW.open_tasks); RETURN NULL; END $$;
      CREATE TRIGGER log_shard_write AFTER UPDATE ON closeout_principal_tasks
        FOR EACH ROW EXECUTE FUNCTION log_shard_write();`);
    statements.length = 0;
    const finished = await Promise.all(
      tasks.map((t) => store.finish({ taskId: t.taskId, fence: 1 }, completed, T0 + 1)),
    );
    expect(finished).toEqual(tasks.map(() => true));
    expect(statements).toHaveLength(1);
    const { rows } = await pool.query('SELECT owner, shard, open_tasks FROM shard_writes');
    expect(rows).toEqual([{ owner: 'alice', shard: 5, open_tasks: '0' }]);
  });

  it('places the creates of one principal in one batch on a few shard rows while its shards have room', async () => {
    // every shard row a batch touches is written by the statement and by its insert trigger; 8 creates on 8 rows
    // wrote 16 row versions (bench/RESULTS.md, section 19). A group shares a row while each shard has room for it
    const logWrites = () =>
      pool.query(`CREATE TABLE IF NOT EXISTS shard_writes (owner TEXT, shard SMALLINT, open_tasks BIGINT);
        CREATE OR REPLACE FUNCTION log_shard_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN INSERT INTO shard_writes VALUES (NEW.owner, NEW.shard, NEW.open_tasks); RETURN NULL; END $$;
        CREATE OR REPLACE TRIGGER log_shard_write AFTER UPDATE ON closeout_principal_tasks
          FOR EACH ROW EXECUTE FUNCTION log_shard_write();
        TRUNCATE shard_writes;`);
    const batchOf8 = async (overrides: Partial<NewTask>) => {
      // the principal's first create deals its quotas out (the exact path), alone
      await store.create(newTask(overrides));
      await logWrites();
      const created = await Promise.all(Array.from({ length: 8 }, () => store.create(newTask(overrides))));
      expect(created.map((c) => c.created)).toEqual(Array.from({ length: 8 }, () => true));
      const { rows } = await pool.query<{ shard: number; writes: number }>(
        `SELECT shard, COUNT(*)::int AS writes FROM shard_writes WHERE owner = $1 GROUP BY shard`,
        [overrides.principal],
      );
      return rows;
    };
    // the default open limit dealt over 128 shards: 7 each, room for groups of 3
    const limited = await batchOf8({ principal: 'carol', ...limits });
    expect(limited).toHaveLength(3);
    expect(limited.map((r) => r.writes)).toEqual([2, 2, 2]);
    // without limits no shard can run out: groups of 4
    const unlimited = await batchOf8({ principal: 'dave' });
    expect(unlimited).toHaveLength(2);
    // 200 open tasks dealt over 128 shards: 1 each, so the creates spread one to a shard
    const tight = await batchOf8({ principal: 'erin', maxOpenTasksForPrincipal: 200 });
    expect(tight).toHaveLength(8);
  });

  it('counts a finish that leaves its row unmarked, as an instance of a release before schema 10 does', async () => {
    const tasks = Array.from({ length: 3 }, () => newTask(limits));
    await Promise.all(tasks.map((task) => store.create(task)));
    // the finish statement of such a release: no closed_counted, so the status trigger counts it
    await pool.query(`UPDATE closeout_tasks SET status = 'completed', result = '{}' WHERE task_id = $1`, [
      tasks[0]!.taskId,
    ]);
    expect(
      await Promise.all(tasks.slice(1).map((t) => store.finish({ taskId: t.taskId, fence: 1 }, completed, T0 + 1))),
    ).toEqual([true, true]);
    const { rows } = await pool.query<{ open: string; stored: string }>(
      `SELECT SUM(open_tasks) AS open, SUM(stored_tasks) AS stored FROM closeout_principal_tasks WHERE owner = 'alice'`,
    );
    expect(rows[0]).toEqual({ open: '0', stored: '3' });
  });

  it('answers each create of a batch with the task a read of its row gives, every field set or unset', async () => {
    // invariant: a create's answer is the stored task, whether the batch statement read it back or not
    const tasks = [
      newTask(limits),
      newTask({
        ...limits,
        arguments: { text: 'é 𝄞 "quoted" \\ back', nested: { n: -0, big: 2 ** 53, list: [1.5, null, true] } },
        statusMessage: 'starting ✓',
        idempotencyKey: 'key 🔑',
        ttlMs: null,
        pollIntervalMs: 1,
        resumable: false,
        inputCapabilities: { elicitation: {}, sampling: {} },
        traceContext: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' },
        leaseExpiresAt: 2 ** 53 - 1,
      }),
      newTask({ ...limits, principal: 'bob', toolName: "o'neil", createdAt: 0, ttlMs: 1 }),
    ];
    // each principal's first create deals its quotas out (the exact path, which reads its row back)
    for (const principal of ['alice', 'bob']) await store.create(newTask({ ...limits, principal }));
    statements.length = 0;
    const created = await Promise.all(tasks.map((task) => store.create(task)));
    expect(statements).toEqual([expect.stringContaining('json_to_recordset')]);
    expect(created.map((c) => c.created)).toEqual([true, true, true]);
    for (const { task } of created) expect(task).toEqual(await store.get(task.taskId));
    expect(created.map((c) => c.task.arguments)).toEqual(tasks.map((t) => JSON.parse(JSON.stringify(t.arguments))));
  });

  it('admits only what the open limit allows when a whole batch is for one principal', async () => {
    const tasks = Array.from({ length: 16 }, () => newTask({ maxOpenTasksForPrincipal: 5 }));
    const settled = await Promise.allSettled(tasks.map((task) => store.create(task)));
    expect(settled.filter((s) => s.status === 'fulfilled')).toHaveLength(5);
    const refused = settled.filter((s) => s.status === 'rejected');
    expect(refused).toHaveLength(11);
    for (const r of refused) expect((r as PromiseRejectedResult).reason).toBeInstanceOf(OpenTaskLimitError);
    const { rows } = await pool.query<{ n: string }>('SELECT COUNT(*) AS n FROM closeout_tasks');
    expect(Number(rows[0]!.n)).toBe(5);
  });

  it('answers an idempotent replay in the same batch with the task its twin created', async () => {
    const [a, b] = [newTask({ ...limits, idempotencyKey: 'k' }), newTask({ ...limits, idempotencyKey: 'k' })];
    const [first, second] = await Promise.all([store.create(a), store.create(b)]);
    expect([first.created, second.created]).toEqual([true, false]);
    expect(second.task.taskId).toBe(first.task.taskId);
  });

  it('fails only the create whose value PostgreSQL refuses, and stores the others', async () => {
    // a NUL character is refused by a TEXT column (SQLSTATE 22021): the batch statement fails, each create then runs
    // alone
    const bad = newTask({ ...limits, statusMessage: 'nul \u0000 here' });
    const good = Array.from({ length: 3 }, () => newTask(limits));
    const settled = await Promise.allSettled([bad, ...good].map((task) => store.create(task)));
    expect(settled[0]!.status).toBe('rejected');
    expect(String((settled[0] as PromiseRejectedResult).reason)).toMatch(/create failed/);
    expect(settled.slice(1).map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
    const { rows } = await pool.query<{ task_id: string }>('SELECT task_id FROM closeout_tasks ORDER BY task_id');
    expect(rows.map((r) => r.task_id)).toEqual(good.map((t) => t.taskId).sort());
  });

  it('fails only the create whose principal is too long for an index, and stores the others', async () => {
    // a principal of 4,000 characters that do not compress is past what a btree entry holds: PostgreSQL refuses the
    // row with SQLSTATE 54000 (program_limit_exceeded), for that value alone, as it did before creates were batched
    const bad = newTask({ ...limits, principal: randomBytes(3000).toString('base64') });
    const good = Array.from({ length: 3 }, () => newTask(limits));
    const settled = await Promise.allSettled([bad, ...good].map((task) => store.create(task)));
    expect(settled[0]!.status).toBe('rejected');
    expect(String((settled[0] as PromiseRejectedResult).reason)).toMatch(/create failed: index row size/);
    expect(settled.slice(1).map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'fulfilled']);
    const { rows } = await pool.query<{ task_id: string }>('SELECT task_id FROM closeout_tasks ORDER BY task_id');
    expect(rows.map((r) => r.task_id)).toEqual(good.map((t) => t.taskId).sort());
  });

  it('stores the results of finishes made at once whose results add up to more than one statement can carry', async () => {
    // 130 results of 4 MiB (the default maxResultBytes) in one turn: 520 MiB, past what one statement's array of them
    // can be (a JavaScript string holds at most 512 MiB), while each alone is stored as it always was
    const tasks = Array.from({ length: 130 }, () => newTask(limits));
    for (let i = 0; i < tasks.length; i += 16) await Promise.all(tasks.slice(i, i + 16).map((t) => store.create(t)));
    const text = 'x'.repeat(4 * 1024 * 1024 - 64);
    const big = { status: 'completed' as const, result: { content: [{ type: 'text', text }] } };
    const settled = await Promise.allSettled(
      tasks.map((t) => store.finish({ taskId: t.taskId, fence: 1 }, big, T0 + 1)),
    );
    expect(
      settled.map((s) => (s.status === 'fulfilled' ? s.value : String(s.reason))).filter((v) => v !== true),
    ).toEqual([]);
    const { rows } = await pool.query<{ n: string }>(
      `SELECT COUNT(*) AS n FROM closeout_tasks WHERE status = 'completed' AND length(result) > 4000000`,
    );
    expect(Number(rows[0]!.n)).toBe(130);
  }, 300_000);

  it('finishes a task once when two finishes of it share a batch, and not with a stale fence', async () => {
    const [a, b] = [newTask(limits), newTask(limits)];
    await Promise.all([store.create(a), store.create(b)]);
    const failed = { status: 'failed' as const, error: { code: -32603, message: 'second' } };
    const results = await Promise.all([
      store.finish({ taskId: a.taskId, fence: 1 }, completed, T0 + 1),
      store.finish({ taskId: a.taskId, fence: 1 }, failed, T0 + 2),
      store.finish({ taskId: b.taskId, fence: 2 }, completed, T0 + 1),
    ]);
    expect(results).toEqual([true, false, false]);
    expect((await store.get(a.taskId))?.status).toBe('completed');
    expect((await store.get(b.taskId))?.status).toBe('working');
  });

  it('keeps creating and finishing after a newer release adds a column to the tasks table', async () => {
    // the statements every create and finish sends are prepared once per connection; one whose result is `*` would
    // fail with "cached plan must not change result type" once a migration adds a column
    const one = new pg.Pool({ connectionString: database.connectionString, max: 1 });
    one.on('error', () => {});
    const single = await PostgresTaskStore.open(one, { listen: false });
    const round = async () => {
      const alone = newTask(limits);
      await single.create(alone);
      await single.finish({ taskId: alone.taskId, fence: 1 }, completed, T0 + 1);
      const batch = Array.from({ length: 4 }, () => newTask(limits));
      await Promise.all(batch.map((task) => single.create(task)));
      expect(
        await Promise.all(batch.map((t) => single.finish({ taskId: t.taskId, fence: 1 }, completed, T0 + 1))),
      ).toEqual([true, true, true, true]);
    };
    try {
      await round();
      await pool.query('ALTER TABLE closeout_tasks ADD COLUMN added_by_a_newer_release TEXT');
      await round();
    } finally {
      await single.close();
      await one.end();
    }
  });

  it('finishes batches through the primary key when their statement was prepared while the table was empty', async () => {
    // a statement prepared once per connection keeps the plan it got when PostgreSQL had no statistics; a plan that
    // scanned the tasks table then scans all of it for every batch once the table has grown (until an ANALYZE)
    await pool.query('ALTER TABLE closeout_tasks SET (autovacuum_enabled = false)');
    const one = new pg.Pool({ connectionString: database.connectionString, max: 1 });
    one.on('error', () => {});
    const single = await PostgresTaskStore.open(one, { listen: false });
    const rounds = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const batch = Array.from({ length: 4 }, () => newTask(limits));
        await Promise.all(batch.map((task) => single.create(task)));
        await Promise.all(batch.map((t) => single.finish({ taskId: t.taskId, fence: 1 }, completed, T0 + 1)));
      }
    };
    try {
      await rounds(10);
      await pool.query(
        `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at, ttl_ms,
           expires_at, poll_interval_ms, resumable, result)
         SELECT 'filler-' || g, 'filler', 'job', '{}', 'completed', 1, 1, NULL, NULL, 1000, false, '{}'
         FROM generate_series(1, 20000) g`,
      );
      await rounds(10);
    } finally {
      await single.close();
      await one.end();
    }
    // a backend's counters reach pg_stat_user_tables when it ends (the pools above have ended): wait for the index
    // scans of the twenty rounds to show, which come with its table scans
    const counters = async () =>
      (
        await pool.query<{ seq: string; idx: string }>(
          `SELECT seq_tup_read AS seq, idx_scan AS idx FROM pg_stat_user_tables WHERE relname = 'closeout_tasks'`,
        )
      ).rows[0]!;
    await vi.waitFor(async () => expect(Number((await counters()).idx)).toBeGreaterThanOrEqual(160), {
      timeout: 10_000,
    });
    // ten batches, each scanning the 20,000 rows, would have read 200,000 or more
    const read = async () => Number((await counters()).seq);
    expect(await read()).toBeLessThan(20_000);
  });

  it('sends and answers the calls made just before close()', async () => {
    const task = newTask(limits);
    const created = store.create(task);
    await store.close();
    expect((await created).created).toBe(true);
    const { rows } = await pool.query<{ task_id: string }>('SELECT task_id FROM closeout_tasks');
    expect(rows).toEqual([{ task_id: task.taskId }]);
  });
});

describe('PostgresTaskStore batches and the lease loop', () => {
  // a batch of finishes locks several task rows in one statement, as the lease renewal does (one UPDATE over every
  // lease of the instance, on its own connection): the two must never wait for each other in a circle, or PostgreSQL
  // ends one of them, and a renewal that fails reads as an unreachable store (docs/DESIGN.md, "Rules learned in the
  // field", 3 and 8)
  let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
  let pool: pg.Pool;
  let store: PostgresTaskStore;
  const holders: pg.Client[] = [];

  beforeEach(async () => {
    database = await postgres.createDatabase();
    // the lease connection looks for a deadlock after 200 ms, the finishes' connections only after 60 s: when the two
    // wait for each other, PostgreSQL ends the renewal (each side may be the one it ends; this makes it certain)
    const admin = new pg.Client({ connectionString: database.connectionString });
    await admin.connect();
    await admin.query(`ALTER DATABASE "${database.name}" SET deadlock_timeout = '200ms'`);
    await admin.end();
    pool = new pg.Pool({ connectionString: database.connectionString, max: 8 });
    pool.on('error', () => {});
    pool.on('connect', (client) => void client.query(`SET deadlock_timeout = '60s'`).catch(() => {}));
    store = await PostgresTaskStore.open(pool, { listen: false });
  });

  afterEach(async () => {
    for (const holder of holders.splice(0)) await holder.end().catch(() => {});
    await store.close();
    await pool.end();
    await database.drop();
  });

  /** A connection of its own that holds one task's row lock until `release()`. */
  async function holdRow(taskId: string): Promise<{ pid: number; release: () => Promise<void> }> {
    const holder = new pg.Client({ connectionString: database.connectionString });
    holders.push(holder);
    await holder.connect();
    const pid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM closeout_tasks WHERE task_id = $1 FOR UPDATE', [taskId]);
    return { pid, release: async () => void (await holder.query('COMMIT')) };
  }

  /** A connection of its own that holds one shard row of a principal's counts until `release()`. */
  async function holdShard(owner: string, shard: number): Promise<{ pid: number; release: () => Promise<void> }> {
    const holder = new pg.Client({ connectionString: database.connectionString });
    holders.push(holder);
    await holder.connect();
    const pid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
    await holder.query('BEGIN');
    await holder.query('SELECT 1 FROM closeout_principal_tasks WHERE owner = $1 AND shard = $2 FOR UPDATE', [
      owner,
      shard,
    ]);
    return { pid, release: async () => void (await holder.query('COMMIT')) };
  }

  /** The backends that wait for a lock, and who they wait for; `lease`: the store's lease connection. */
  async function waiting(): Promise<Array<{ pid: number; lease: boolean; blockers: number[] }>> {
    const { rows } = await pool.query<{ pid: number; application_name: string; blockers: number[] }>(
      `SELECT pid, application_name, pg_blocking_pids(pid) AS blockers FROM pg_stat_activity
       WHERE datname = current_database() AND wait_event_type = 'Lock'`,
    );
    return rows.map((r) => ({ pid: r.pid, lease: r.application_name === 'closeout leases', blockers: r.blockers }));
  }

  /** A principal's open and stored tasks as its shard rows count them. */
  async function countsOf(owner: string): Promise<{ open: number; stored: number }> {
    const { rows } = await pool.query<{ open: string; stored: string }>(
      `SELECT SUM(open_tasks) AS open, SUM(stored_tasks) AS stored FROM closeout_principal_tasks WHERE owner = $1`,
      [owner],
    );
    return { open: Number(rows[0]!.open), stored: Number(rows[0]!.stored) };
  }

  async function until(what: string, condition: () => Promise<boolean>): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (!(await condition())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  it('renews the leases while a batch finishes two of their tasks, the two reaching the rows in opposite orders', async () => {
    // task ids in this order: a statement over both by primary key meets a first
    const [a, b] = [newTask({ taskId: `task-a-${randomUUID()}` }), newTask({ taskId: `task-b-${randomUUID()}` })];
    await Promise.all([store.create(a), store.create(b)]);
    // with other instances' tasks around (and statistics that say so), both statements go by primary key: the
    // renewal in the order of its leases, the finishes by task id
    await pool.query(`INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at,
        last_updated_at, poll_interval_ms, resumable, lease_owner, lease_expires_at)
      SELECT 'other-' || g, 'bob', 'echo', '{}', 'working', 1, 1, 500, true, 'instance-b', 1
      FROM generate_series(1, 5000) g`);
    await pool.query('ANALYZE closeout_tasks');
    const heldA = await holdRow(a.taskId);
    const heldB = await holdRow(b.taskId);
    // the renewal takes b first (its order), then waits for a; the finishes come after it
    const renewal = store.renewLeases(
      'instance-a',
      [b, a].map((t) => ({ taskId: t.taskId, fence: 1 })),
      T0 + 60_000,
    );
    const renewed = renewal.then(
      (leases) => ({ leases }),
      (error: unknown) => ({ error }),
    );
    await until('the renewal to wait for b', async () =>
      (await waiting()).some((w) => w.lease && w.blockers.includes(heldB.pid)),
    );
    const completed = { status: 'completed' as const, result: { content: [] } };
    const finishes = Promise.allSettled(
      [a, b].map((t) => store.finish({ taskId: t.taskId, fence: 1 }, completed, T0 + 1)),
    );
    await until('a finish to wait', async () => (await waiting()).some((w) => !w.lease));
    await heldB.release();
    await until('the renewal to hold b and wait for a', async () =>
      (await waiting()).some((w) => w.lease && w.blockers.length > 0 && !w.blockers.includes(heldB.pid)),
    );
    // before the fix, the batch took a and waited for b, the renewal holding b waited for a: PostgreSQL ended the
    // renewal ("deadlock detected")
    await heldA.release();

    const outcome = await renewed;
    expect('error' in outcome ? String(outcome.error) : 'renewed').toBe('renewed');
    // a finished before the renewal reached it; b was renewed, then finished
    expect('leases' in outcome && outcome.leases.map((l) => l.taskId)).toEqual([b.taskId]);
    expect((await finishes).map((f) => (f.status === 'fulfilled' ? f.value : String(f.reason)))).toEqual([true, true]);
    for (const t of [a, b]) expect((await store.get(t.taskId))?.status).toBe('completed');
  });

  it('stamps a renewal held up behind a row lock for longer than a lease from when it ran, not from when it was sent', async () => {
    // RELIABILITY.md, "Stalled stores": a renewal computed at send time and queued behind another transaction's row
    // lock for longer than a lease landed already lapsed, and a taker that skips locked rows could take the task
    await store.syncClock();
    const leaseMs = 1_000;
    const task = newTask({ createdAt: store.now(), leaseExpiresAt: store.now() + leaseMs });
    await store.create(task);
    const held = await holdRow(task.taskId);
    const renewal = store.renewLeases('instance-a', [{ taskId: task.taskId, fence: 1 }], store.now() + leaseMs);
    await until('the renewal to wait for the row', async () =>
      (await waiting()).some((w) => w.lease && w.blockers.includes(held.pid)),
    );
    // held for three leases
    await new Promise((resolve) => setTimeout(resolve, 3 * leaseMs));
    await held.release();
    expect((await renewal).map((l) => l.taskId)).toEqual([task.taskId]);
    const { rows } = await pool.query<{ ahead: number }>(
      `SELECT (lease_expires_at - (extract(epoch FROM clock_timestamp()) * 1000))::float8 AS ahead
       FROM closeout_tasks WHERE task_id = $1`,
      [task.taskId],
    );
    // a lease from when the renewal ran: most of a lease still ahead (before, two leases behind)
    expect(rows[0]!.ahead).toBeGreaterThan(leaseMs / 2);
    expect(rows[0]!.ahead).toBeLessThanOrEqual(leaseMs + 50);
  });

  it('expires overdue tasks while a batch finishes others of the same principal, the two reaching the counts in opposite orders', async () => {
    // the principal's counts in shards 1, 2 and 3: the batch finishes a task of each, locking their shard rows in
    // order; the expiry sweep (another instance's: its deadlock check comes after 200 ms) ends a task of shard 3 and
    // one of shard 1
    const row = (taskId: string, shard: number, expiresAt: number | null) =>
      pool.query(
        `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at,
           ttl_ms, expires_at, poll_interval_ms, resumable, lease_owner, lease_expires_at, count_shard)
         VALUES ($1, 'carol', 'echo', '{}', 'working', 1, 1, $2::bigint - 1, $2, 500, true, 'instance-a', $3, $4)`,
        [taskId, expiresAt, T0 + 60_000, shard],
      );
    const finishing = [1, 2, 3].map((shard) => `finish-${shard}-${randomUUID()}`);
    for (const [i, taskId] of finishing.entries()) await row(taskId, i + 1, null);
    const [expiring3, expiring1] = [`expire-3-${randomUUID()}`, `expire-1-${randomUUID()}`];
    await row(expiring3, 3, T0);
    await row(expiring1, 1, T0);
    const sweeper = await PostgresTaskStore.open(database.connectionString, { listen: false });
    try {
      // the batch takes shard 1, then waits for shard 2
      const held = await holdShard('carol', 2);
      const completed = { status: 'completed' as const, result: { content: [] } };
      const finishes = Promise.allSettled(
        finishing.map((taskId) => store.finish({ taskId, fence: 1 }, completed, T0 + 1)),
      );
      let batchPid = 0;
      await until('the batch to wait for shard 2', async () => {
        batchPid = (await waiting()).find((w) => w.blockers.includes(held.pid))?.pid ?? 0;
        return batchPid !== 0;
      });
      // the sweep waits for the batch: before the fix, holding shard 3 (its first task's) and waiting for shard 1
      const expired = sweeper.expireOverdue(T0 + 1, 100).then(
        (ids) => ({ ids }),
        (error: unknown) => ({ error }),
      );
      await until('the sweep to wait for the batch', async () =>
        (await waiting()).some((w) => w.blockers.includes(batchPid)),
      );
      // the batch goes on to shard 3
      await held.release();

      const outcome = await expired;
      expect('error' in outcome ? String(outcome.error) : 'expired').toBe('expired');
      expect('ids' in outcome && [...outcome.ids].sort()).toEqual([expiring1, expiring3].sort());
      expect((await finishes).map((f) => (f.status === 'fulfilled' ? f.value : String(f.reason)))).toEqual([
        true,
        true,
        true,
      ]);
      expect(await countsOf('carol')).toEqual({ open: 0, stored: 5 });
    } finally {
      await sweeper.close();
    }
  });

  it('takes the shard rows a batch of finishes counts in (owner, shard) order, whatever the order of its tasks', async () => {
    // every statement that locks several shard rows takes them in one order (docs/DESIGN.md, "Lock order"): here the
    // batch's tasks run by id against their shards' order, and shard 2 is held. The batch must hold shard 1 and wait
    // for 2, leaving 3 free; taking them in the order of its tasks it would hold 3 while waiting, and a sweep or a
    // create holding 2 and waiting for 3 would wait in a circle with it
    const finishing = [3, 2, 1].map((shard, i) => ({ taskId: `finish-${i}-${randomUUID()}`, shard }));
    for (const { taskId, shard } of finishing) {
      await pool.query(
        `INSERT INTO closeout_tasks (task_id, owner, tool_name, arguments, status, created_at, last_updated_at,
           poll_interval_ms, resumable, lease_owner, lease_expires_at, count_shard)
         VALUES ($1, 'dave', 'echo', '{}', 'working', 1, 1, 500, true, 'instance-a', $2, $3)`,
        [taskId, T0 + 60_000, shard],
      );
    }
    const held = await holdShard('dave', 2);
    const completed = { status: 'completed' as const, result: { content: [] } };
    const finishes = Promise.allSettled(
      finishing.map(({ taskId }) => store.finish({ taskId, fence: 1 }, completed, T0 + 1)),
    );
    await until('the batch to wait for shard 2', async () =>
      (await waiting()).some((w) => w.blockers.includes(held.pid)),
    );
    const tryLock = async (shard: number) => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SELECT 1 FROM closeout_principal_tasks WHERE owner = $1 AND shard = $2 FOR UPDATE NOWAIT', [
          'dave',
          shard,
        ]);
        return 'free';
      } catch (error) {
        return (error as { code?: string }).code === '55P03' ? 'locked' : String(error);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    };
    expect({ 1: await tryLock(1), 3: await tryLock(3) }).toEqual({ 1: 'locked', 3: 'free' });
    await held.release();

    expect((await finishes).map((f) => (f.status === 'fulfilled' ? f.value : String(f.reason)))).toEqual([
      true,
      true,
      true,
    ]);
    expect(await countsOf('dave')).toEqual({ open: 0, stored: 3 });
  });
});

describe('PostgresTaskStore batches and signals', () => {
  let database: Awaited<ReturnType<StartedPostgres['createDatabase']>>;
  const stores: PostgresTaskStore[] = [];

  beforeEach(async () => {
    database = await postgres.createDatabase();
  });

  afterEach(async () => {
    for (const store of stores.splice(0)) await store.close();
    await database.drop();
  });

  it('answers the creates made just before close() that take the exact path or find their replay, on its own pool', async () => {
    const store = await PostgresTaskStore.open(database.connectionString, { listen: false });
    stores.push(store);
    const first = newTask({ idempotencyKey: 'k' });
    await store.create(first);
    // a principal's first create finds its shard without a quota: it goes on to the exact path after its batch
    const limited = store.create(newTask({ principal: 'carol', maxOpenTasksForPrincipal: 10 }));
    // the same key again: refused by the unique index in its batch, it then reads the task created first
    const replay = store.create(newTask({ idempotencyKey: 'k' }));
    await store.close();
    const settled = await Promise.allSettled([limited, replay]);
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value.created : String(s.reason)))).toEqual([true, false]);
    expect(settled[1]!.status === 'fulfilled' && settled[1].value.task.taskId).toBe(first.taskId);
  });

  it('signals status once for each task a batch of finishes ended, and not for one it did not', async () => {
    const store = await PostgresTaskStore.open(database.connectionString, { listen: false });
    stores.push(store);
    const watcher = await PostgresTaskStore.open(database.connectionString);
    stores.push(watcher);
    const signals: TaskSignal[] = [];
    watcher.subscribe((signal) => signals.push(signal));
    await watcher.listening();
    const tasks = Array.from({ length: 6 }, () => newTask());
    await Promise.all(tasks.map((task) => store.create(task)));
    const completed = { status: 'completed' as const, result: { content: [] } };
    // the last one with a fence it does not hold
    const finished = await Promise.all(
      tasks.map((t, i) => store.finish({ taskId: t.taskId, fence: i === 5 ? 2 : 1 }, completed, T0 + 1)),
    );
    expect(finished).toEqual([true, true, true, true, true, false]);
    const deadline = Date.now() + 20_000;
    while (signals.length < 5 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
    // a moment more for a signal that should not come
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(signals.map((s) => `${s.kind}:${s.taskId}`).sort()).toEqual(
      tasks
        .slice(0, 5)
        .map((t) => `status:${t.taskId}`)
        .sort(),
    );
  });
});

describe('a store made with new', () => {
  it('migrates on its first call, as open() does, and serves a task server', async () => {
    const database = await postgres.createDatabase();
    const store = new PostgresTaskStore(database.connectionString);
    try {
      // several first calls at once share one migration
      const [created, none] = await Promise.all([store.create(newTask({ taskId: 'made-with-new' })), store.get('x')]);
      expect(created.created).toBe(true);
      expect(none).toBeUndefined();
      expect(await store.get('made-with-new')).toMatchObject({ taskId: 'made-with-new', status: 'working' });
    } finally {
      await store.close();
      await database.drop();
    }
  });
});
