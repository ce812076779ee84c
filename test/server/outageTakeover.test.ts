// After a database outage, no instance runs a task beside another's live run (docs/DESIGN.md, "Rules learned in the
// field", 3, 11 and 13; RELIABILITY.md, "What they found" 7). While PostgreSQL is down nobody can renew a lease, so
// every lease that ran out meanwhile says nothing about its holder. Two instances on one database, the first running
// resumable tasks, the second with nothing of its own and a lease loop that ticks often: PostgreSQL stopped for longer
// than the lease, then started again. Before the takeover gate, the second instance's first tick after the return
// claimed the first's tasks and ran them a second time while the first, alive, still ran them. Now the first stops
// its runs itself before their leases could be taken (it cannot tell the outage from being cut off alone), hands them
// back once the database answers, and each task runs once more, as attempt 2, on either instance, after the first run
// stopped. A task of an instance that is gone is still taken over, a lease after the database is back.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import type { AbortCause, TaskAbortedError } from '../../src/server/taskTool.js';
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
  /** performance.now(), in this one process that runs both instances. */
  startedAt: number;
  abortedAt: number | undefined;
  cause: AbortCause | undefined;
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
    const run: Run = {
      instance: name,
      taskId: ctx.taskId ?? '',
      attempt: ctx.attempt,
      startedAt: performance.now(),
      abortedAt: undefined,
      cause: undefined,
    };
    runs.push(run);
    await new Promise<void>((resolve, reject) => {
      gates.set(`${name}:${ctx.taskId}`, resolve);
      ctx.signal.addEventListener('abort', () => {
        run.abortedAt = performance.now();
        run.cause = (ctx.signal.reason as TaskAbortedError).cause;
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
  it('runs no task beside a live run: the holder stops its runs, and each runs once more after the outage', async () => {
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

    for (const taskId of taskIds) {
      const [first, second, ...more] = runs.filter((run) => run.taskId === taskId);
      const story = JSON.stringify(runs.filter((run) => run.taskId === taskId));
      // the holder stopped its run itself, before the lease could be taken, and the task ran again only after that
      expect(first, story).toMatchObject({ instance: 'instance-a', attempt: 1, cause: 'lease-unrenewed' });
      expect(second, story).toMatchObject({ attempt: 2, cause: undefined });
      expect(second!.startedAt, story).toBeGreaterThan(first!.abortedAt!);
      expect(more, story).toEqual([]);
    }
    // a lease after the database came back, the dead instance's task was taken over all the same (by either instance)
    expect(runs.filter((run) => run.taskId === orphan.taskId).map((run) => run.attempt)).toEqual([2]);
    for (const run of runs.filter((r) => r.attempt === 2 && r.taskId !== orphan.taskId)) {
      gates.get(`${run.instance}:${run.taskId}`)!();
    }
    for (const taskId of taskIds) {
      const task = await waitFor(`task ${taskId} to complete`, async () => {
        const stored = await a.getTask(taskId, 'alice');
        return stored.status === 'completed' ? stored : undefined;
      });
      expect(task.result).toMatchObject({ content: [{ text: expect.stringMatching(/, attempt 2$/) }] });
    }
  }, 120_000);
});
