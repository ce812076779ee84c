// A handler starts only while its instance holds the task's lease. The lease's expiry is computed before the write
// that takes it (create, or claiming an orphan); when that write is slow to come back, the lease may have run out
// and another instance may have claimed the task and started it. Found by the chaos soak (test/e2e/soak.ts): a
// resumable task ran twice, in two live instances, after a tools/call that took longer than the lease.
import { afterEach, describe, expect, it } from 'vitest';

import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import type { TaskStore } from '../../src/server/store/taskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';

const LEASE_MS = 1_000;

let clock = 0;
const runs: Array<{ instance: string; attempt: number }> = [];
const open: Array<{ close(): Promise<void> }> = [];

afterEach(async () => {
  for (const closable of open.splice(0).reverse()) await closable.close();
  runs.length = 0;
});

/** The real SQLite store, whose create commits and then takes `afterCommit` to come back (a slow round trip). */
function slowToAnswer(store: TaskStore, afterCommit: () => Promise<void>): TaskStore {
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'create') {
        return async (...args: Parameters<TaskStore['create']>) => {
          const created = await target.create(...args);
          await afterCommit();
          return created;
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

function instance(name: string, store: TaskStore): TaskServer {
  const tasks = new TaskServer({
    store,
    leaseMs: LEASE_MS,
    // the sweeps run when the test says (start()), not on a timer
    sweepIntervalMs: 60_000,
    instanceId: name,
    now: () => clock,
  });
  tasks.registerTool('job', { task: { support: 'optional', resumable: true } }, async (_args, ctx) => {
    runs.push({ instance: name, attempt: ctx.attempt });
    await new Promise((_resolve, reject) => ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason)));
    return { content: [] };
  });
  open.push(tasks);
  return tasks;
}

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

/**
 * An instance that has seen the store answer promptly for a whole lease (real time: its takeover gate, see
 * src/shared/lease/takeoverGate.ts), so that its next sweep may take lapsed leases over; `sweep` runs one lease tick now.
 */
async function warmInstance(name: string, store: TaskStore): Promise<{ sweep: () => Promise<void> }> {
  const tasks = instance(name, store);
  await tasks.start();
  const sweep = () => (tasks as unknown as { loop: { sweep(deadHolders: string[]): Promise<void> } }).loop.sweep([]);
  for (let i = 0; i < 6; i++) {
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 4));
    await sweep();
  }
  return { sweep };
}

describe('a store write slower than the lease', () => {
  it('does not start a handler another instance claimed while the create was on its way back', async () => {
    clock = Date.now();
    const store = new SqliteTaskStore(':memory:');
    open.push(store);
    const b = await warmInstance('instance-b', store);
    const a = instance(
      'instance-a',
      slowToAnswer(store, async () => {
        clock += 2 * LEASE_MS;
        await b.sweep(); // b's sweep finds the task's lease run out and takes it over
      }),
    );
    await a.start();
    const created = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    await settle();
    expect(runs).toEqual([{ instance: 'instance-b', attempt: 2 }]);
    expect((await store.get(created.taskId))?.leaseHolder).toBe('instance-b');
  });

  it('renews a lease that ran out unclaimed before starting the handler, so nobody takes it over', async () => {
    clock = Date.now();
    const store = new SqliteTaskStore(':memory:');
    open.push(store);
    const a = instance(
      'instance-a',
      slowToAnswer(store, async () => {
        clock += 2 * LEASE_MS;
      }),
    );
    await a.start();
    const created = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    await settle();
    expect(runs).toEqual([{ instance: 'instance-a', attempt: 1 }]);
    expect((await store.get(created.taskId))?.leaseExpiresAt).toBeGreaterThan(clock);
    await (await warmInstance('instance-b', store)).sweep();
    await settle();
    expect(runs).toEqual([{ instance: 'instance-a', attempt: 1 }]);
  });
});
