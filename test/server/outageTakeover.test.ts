// After a database outage, no instance takes over another's live tasks (docs/DESIGN.md, "Rules learned in the field",
// 3; RELIABILITY.md, "What they found" 7). While PostgreSQL is down nobody can renew a lease, so every lease that ran
// out meanwhile says nothing about its holder. Two instances on one database, the first running resumable tasks, the
// second with nothing of its own and a lease loop that ticks often: PostgreSQL stopped for longer than the lease, then
// started again. Before, the second instance's first tick after the return claimed the first's tasks (their leases had
// run out during the outage) and ran them a second time while the first, alive, still ran them; the first then lost
// them to the fence. A task of an instance that is gone is still taken over, a lease after the database is back.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { newTask } from '../support/newTask.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { waitFor } from '../support/waitFor.js';

const LEASE_MS = 1500;
/** Longer than the lease: every lease runs out while the database is down. */
const OUTAGE_MS = 4000;
const TASKS = 4;

interface Run {
  instance: string;
  taskId: string;
  attempt: number;
  aborted: boolean;
}

let postgres: StartedPostgres;
const open: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  postgres = await startPostgres();
}, 120_000);

afterAll(async () => {
  for (const each of open.splice(0).reverse()) await each.close().catch(() => {});
  await postgres?.stop();
}, 60_000);

async function instance(
  connectionString: string,
  name: string,
  sweepIntervalMs: number,
  runs: Run[],
  gates: Map<string, () => void>,
): Promise<TaskServer> {
  const store = await PostgresTaskStore.open(connectionString, {
    statementTimeoutMs: 1000,
    connectionTimeoutMs: 1000,
  });
  open.push(store);
  const tasks = new TaskServer({ store, leaseMs: LEASE_MS, sweepIntervalMs, instanceId: name, onError: () => {} });
  tasks.registerTool('job', { task: { support: 'required', resumable: true } }, async (_args, ctx) => {
    const run: Run = { instance: name, taskId: ctx.taskId ?? '', attempt: ctx.attempt, aborted: false };
    runs.push(run);
    await new Promise<void>((resolve, reject) => {
      gates.set(`${name}:${ctx.taskId}`, resolve);
      ctx.signal.addEventListener('abort', () => {
        run.aborted = true;
        reject(ctx.signal.reason as Error);
      });
    });
    return { content: [{ type: 'text', text: `done by ${name}, attempt ${ctx.attempt}` }] };
  });
  await tasks.start();
  open.push(tasks);
  return tasks;
}

describe('a database outage longer than the lease, with two live instances', () => {
  it('leaves every task with the instance running it: none re-run elsewhere, none aborted', async () => {
    const database = await postgres.createDatabase();
    const runs: Run[] = [];
    const gates = new Map<string, () => void>();
    // a ticks at 60% of its lease, b every 50 ms: after the outage b's tick nearly always comes first
    const a = await instance(database.connectionString, 'instance-a', LEASE_MS * 0.6, runs, gates);
    await instance(database.connectionString, 'instance-b', 50, runs, gates);
    const taskIds: string[] = [];
    for (let i = 0; i < TASKS; i++) {
      taskIds.push((await a.createTask(a.tool('job')!, {}, 'alice', undefined)).taskId);
    }
    await waitFor('every handler to start on a', () => (runs.length === TASKS ? true : undefined));
    // and one task of an instance that is gone for good: its lease runs out during the outage, and nobody renews it
    const now = a.store.now?.() ?? Date.now();
    const { task: orphan } = await a.store.create(
      newTask(now, {
        taskId: 'orphan-of-a-dead-instance',
        resumable: true,
        leaseHolder: 'instance-gone',
        leaseExpiresAt: now + 1000,
      }),
    );

    await postgres.outage(OUTAGE_MS);
    // the database is back: two leases for both instances' loops to settle who holds what
    await waitFor(
      'PostgreSQL to answer again',
      async () => {
        const admin = new pg.Client({ connectionString: database.connectionString });
        try {
          await admin.connect();
          await admin.query('SELECT 1');
          return true;
        } catch {
          return undefined;
        } finally {
          await admin.end().catch(() => {});
        }
      },
      60_000,
    );
    // three leases: every live holder has renewed by then, and every claim that would be made has been
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS));

    expect(runs.filter((run) => run.instance !== 'instance-a' && run.taskId !== orphan.taskId)).toEqual([]);
    expect(runs.filter((run) => run.aborted)).toEqual([]);
    // a lease after the database came back, the dead instance's task was taken over all the same (by either instance)
    expect(runs.filter((run) => run.taskId === orphan.taskId).map((run) => run.attempt)).toEqual([2]);
    for (const taskId of taskIds) gates.get(`instance-a:${taskId}`)!();
    for (const taskId of taskIds) {
      const task = await waitFor(`task ${taskId} to complete`, async () => {
        const stored = await a.getTask(taskId, 'alice');
        return stored.status === 'completed' ? stored : undefined;
      });
      expect(task.result).toMatchObject({ content: [{ text: 'done by instance-a, attempt 1' }] });
    }
  }, 120_000);
});
