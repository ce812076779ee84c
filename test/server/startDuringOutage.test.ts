// An instance that starts while its database goes away comes up with the database instead of failing (docs/DESIGN.md,
// "Rules learned in the field", 3). The store was opened (migrated) while PostgreSQL answered; PostgreSQL then stopped
// before the server's start read the lease holders. The long soak found `closeout serve` exiting there ("leaseHolders
// failed: the database system is shutting down"): start() rejected on the first statement of its lease loop, where
// every later tick sits an outage out. Now start() reports the store unreachable and resolves, and once PostgreSQL is
// back the lease loop's ticks do what the start could not: a task created then runs and completes.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { waitFor } from '../support/waitFor.js';

let postgres: StartedPostgres;
const open: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  postgres = await startPostgres();
}, 120_000);

afterAll(async () => {
  for (const each of open.splice(0).reverse()) await each.close().catch(() => {});
  await postgres?.stop();
}, 60_000);

describe('a TaskServer started while PostgreSQL is down', () => {
  it('starts, says the store is unreachable, and runs tasks once the database is back', async () => {
    const database = await postgres.createDatabase();
    const store = await PostgresTaskStore.open(database.connectionString, {
      statementTimeoutMs: 1000,
      connectionTimeoutMs: 1000,
    });
    open.push(store);
    const errors: string[] = [];
    const tasks = new TaskServer({
      store,
      leaseMs: 3000,
      sweepIntervalMs: 250,
      instanceId: 'starter',
      onError: (error) => errors.push(error.message),
    });
    open.push(tasks);
    tasks.registerTool('job', { task: { support: 'required' } }, () =>
      Promise.resolve({ content: [{ type: 'text', text: 'done' }] }),
    );

    const outage = postgres.outage(3000);
    // the database refuses connections now (the pool's idle ones were cut by the stop)
    await waitFor('PostgreSQL to be down', () =>
      store.get('no-task').then(
        () => undefined,
        () => true,
      ),
    );
    await expect(tasks.start()).resolves.toBeUndefined();
    expect(errors.join('\n')).toMatch(/PostgreSQL task store: \w+ failed/);

    await outage;
    const created = await waitFor('a task created once the database is back', () =>
      tasks.createTask(tasks.tool('job')!, {}, 'alice', undefined).catch(() => undefined),
    );
    const done = await waitFor('the task to complete', async () => {
      const task = await store.get(created.taskId);
      return task?.status === 'completed' ? task : undefined;
    });
    expect(done.result).toEqual({ content: [{ type: 'text', text: 'done' }] });
  }, 60_000);
});
