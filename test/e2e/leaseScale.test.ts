// Thousands of long tasks on one PostgreSQL database and no fault at all: every task completes on its first attempt,
// its handler started once. RELIABILITY.md, "What they found" 6: an instance whose lease loop did one read per running
// task over the request pool let its own leases run out during a burst of creates, then took its own tasks over
// (non-resumable ones failed "interrupted", resumable ones started again), and with two instances tasks moved between
// live instances and ran in both. Renewing is one statement on a connection of its own, so its cost does not grow with
// what the instance holds (docs/DESIGN.md, "Rules learned in the field", 8 and 9).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { abortableSleep } from '../../src/demo/abortableSleep.js';
import { PostgresTaskStore } from '../../src/server/store/postgresTaskStore.js';
import type { StoredTask } from '../../src/server/store/taskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { waitFor } from '../support/waitFor.js';

/** Sized so that the old lease loop (one read per running task) let leases lapse on a 2-core machine. */
const TASKS = Number(process.env['SCALE_TASKS'] ?? 2000);
/** Each task runs two steps of this long: it outlives the burst and many lease periods. */
const STEP_MS = 6000;
const LEASE_MS = 3000;
const IN_FLIGHT = 16;

let postgres: StartedPostgres;

beforeAll(async () => {
  postgres = await startPostgres();
}, 120_000);

afterAll(async () => {
  await postgres?.stop();
}, 60_000);

/** Runs `work(i)` for i in [0, count) with at most `inFlight` at once. */
async function inParallel(count: number, inFlight: number, work: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: inFlight }, async () => {
      while (next < count) await work(next++);
    }),
  );
}

async function runScale(instanceCount: number): Promise<void> {
  const database = await postgres.createDatabase();
  const starts = new Map<string, number>();
  let ended = 0;
  const errors: Error[] = [];
  const instances: TaskServer[] = [];
  const stores: PostgresTaskStore[] = [];
  try {
    for (let i = 0; i < instanceCount; i++) {
      const store = await PostgresTaskStore.open(database.connectionString);
      stores.push(store);
      const tasks = new TaskServer({ store, leaseMs: LEASE_MS, onError: (e) => errors.push(e) });
      for (const resumable of [true, false]) {
        tasks.registerTool(resumable ? 'long_resumable' : 'long_once', { task: { resumable } }, async (_args, ctx) => {
          starts.set(ctx.taskId!, (starts.get(ctx.taskId!) ?? 0) + 1);
          try {
            await abortableSleep(STEP_MS, ctx.signal);
            await ctx.status('half way');
            await abortableSleep(STEP_MS, ctx.signal);
            return { content: [], structuredContent: { attempt: ctx.attempt } };
          } finally {
            ended++;
          }
        });
      }
      await tasks.start();
      instances.push(tasks);
    }

    const taskIds: string[] = [];
    const burstStarted = Date.now();
    await inParallel(TASKS, IN_FLIGHT, async (i) => {
      const tasks = instances[i % instances.length]!;
      const tool = tasks.tool(i % 2 === 0 ? 'long_resumable' : 'long_once')!;
      taskIds.push((await tasks.createTask(tool, {}, `caller-${i % 32}`, undefined)).taskId);
    });
    const burstMs = Date.now() - burstStarted;
    await waitFor('every handler to end', () => (ended >= TASKS ? true : undefined), 120_000, 200);

    // the terminal writes land right after the handlers end; a task still open after that lapsed and waits for a rerun
    const finals = new Map<string, StoredTask>();
    const settleBy = Date.now() + 20_000;
    while (finals.size < taskIds.length && Date.now() < settleBy) {
      const open = taskIds.filter((taskId) => !finals.has(taskId));
      await inParallel(open.length, 8, async (i) => {
        // a read the loaded pool could not serve in time is tried again in the next round, until settleBy
        const task = await stores[0]!.get(open[i]!).catch(() => undefined);
        if (task && task.status !== 'working' && task.status !== 'input_required') finals.set(task.taskId, task);
      });
    }
    const notCompleted = taskIds
      .map((taskId) => finals.get(taskId) ?? { status: 'still open', attempt: undefined, error: undefined })
      .filter((task) => task.status !== 'completed' || task.attempt !== 1)
      .map((task) => ({ status: task.status, attempt: task.attempt, error: task.error?.message }));
    const summary = `${instanceCount} instance(s), ${TASKS} tasks, burst of ${burstMs} ms`;
    expect(notCompleted.slice(0, 3), `${notCompleted.length} tasks did not complete at once: ${summary}`).toEqual([]);
    expect([...starts.values()].filter((n) => n > 1).length, `tasks started twice: ${summary}`).toBe(0);
    expect(starts.size).toBe(TASKS);
  } finally {
    for (const tasks of instances) await tasks.close();
    for (const store of stores) await store.close();
    await database.drop();
  }
}

describe('thousands of long tasks on PostgreSQL, no fault', () => {
  it(`one instance: ${TASKS} tasks, none lapsed, re-ran or failed`, async () => {
    await runScale(1);
  }, 180_000);

  it(`two instances: ${TASKS} tasks, none moved between them or ran twice`, async () => {
    await runScale(2);
  }, 180_000);
});
