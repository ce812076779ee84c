// One live run per task per instance (docs/DESIGN.md, "Rules learned in the field", 9). An instance whose
// own lease ran out unrenewed (a renewal or a create slower than the lease) must not take its own task over as an
// orphan: the old lease loop claimed it again, started a second handler beside the first (or failed a non-resumable
// task as "interrupted" while it ran), and the first run's end then deleted the second run's entry. A run whose task
// another instance took (the fence moved) is aborted at the next renewal. A run whose lease could not be renewed in
// time is stopped before the lease could be taken (rule 13), and run again as a new attempt once the store answers.
import { afterEach, describe, expect, it } from 'vitest';

import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import type { StoredTask, TaskStore } from '../../src/server/store/taskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import type { TaskActivity } from '../../src/server/taskServerOptions.js';
import type { AbortCause } from '../../src/server/taskTool.js';
import type { TaskAbortedError } from '../../src/server/taskTool.js';
import { newTask } from '../support/newTask.js';
import { waitFor } from '../support/waitFor.js';

const LEASE_MS = 1_000;

let clock = 0;
const open: Array<{ close(): Promise<void> }> = [];

afterEach(async () => {
  for (const closable of open.splice(0).reverse()) await closable.close();
});

interface Run {
  instance: string;
  attempt: number;
  aborted: AbortCause | undefined;
  finish: () => void;
}

/** The real SQLite store, with `after` run once a call of `method` has come back (a slow round trip). */
function slowAfter(
  store: TaskStore,
  method: 'create' | 'renewLeases',
  after: (args: unknown[]) => Promise<void>,
): TaskStore {
  let armed = true;
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === method) {
        return async (...args: unknown[]) => {
          const answer: unknown = await (target[method] as (...a: unknown[]) => Promise<unknown>)(...args);
          if (armed && (method !== 'renewLeases' || (args[1] as unknown[]).length > 0)) {
            armed = false;
            await after(args);
          }
          return answer;
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** An instance whose lease loop ticks every 30 ms of real time, on the test's clock. */
function instance(
  name: string,
  store: TaskStore,
  runs: Run[],
  resumable: boolean,
  activities: TaskActivity[] = [],
): TaskServer {
  const tasks = new TaskServer({
    store,
    leaseMs: LEASE_MS,
    sweepIntervalMs: 30,
    instanceId: name,
    now: () => clock,
    onError: () => {},
    onActivity: (activity) => activities.push(activity),
  });
  tasks.registerTool('job', { task: { support: 'optional', resumable } }, async (_args, ctx) => {
    const run: Run = { instance: name, attempt: ctx.attempt, aborted: undefined, finish: () => {} };
    runs.push(run);
    await new Promise<void>((resolve, reject) => {
      run.finish = resolve;
      ctx.signal.addEventListener('abort', () => {
        run.aborted = (ctx.signal.reason as TaskAbortedError).cause;
        reject(ctx.signal.reason as Error);
      });
    });
    return { content: [{ type: 'text', text: `done by ${name}` }] };
  });
  open.push(tasks);
  return tasks;
}

function sqlite(): SqliteTaskStore {
  const store = new SqliteTaskStore(':memory:');
  open.push(store);
  return store;
}

const ticks = (n: number) => new Promise((resolve) => setTimeout(resolve, n * 30 + 50));

/** The task once it is no longer working (completed, failed, cancelled). */
function ended(store: TaskStore, taskId: string): Promise<StoredTask> {
  return waitFor(`task ${taskId} to end`, async () => {
    const task = await store.get(taskId);
    return task && task.status !== 'working' ? task : undefined;
  });
}

/** The real SQLite store, whose next claim with leases to take is made as if `lateMs` later (a late or stale clock). */
function lateClaim(store: TaskStore, lateMs: number): TaskStore {
  let armed = true;
  return new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'claimOrphans') {
        return async (holder: string, now: number, until: number, limit: number, dead?: string[]) => {
          const late = armed ? lateMs : 0;
          const claimed = await target.claimOrphans(holder, now + late, until + late, limit, dead);
          if (claimed.length > 0) armed = false;
          return claimed;
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}

/** The real SQLite store, whose lease renewals wait (sent, not yet run) while `held` is set: a store cut off. */
function renewalsHeld(store: TaskStore): { store: TaskStore; hold: () => void; release: () => void } {
  let held: Promise<void> | undefined;
  let release = () => {};
  const proxy = new Proxy(store, {
    get(target, property, receiver) {
      if (property === 'renewLeases') {
        return async (...args: Parameters<TaskStore['renewLeases']>) => {
          await held;
          return target.renewLeases(...args);
        };
      }
      const value: unknown = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
  return {
    store: proxy,
    hold: () => (held = new Promise((resolve) => (release = resolve))),
    release: () => {
      held = undefined;
      release();
    },
  };
}

describe('the lease loop from the start', () => {
  it('renews the leases its start took while its first housekeeping is slow', async () => {
    // the chaos soak: an instance started right after a database outage took tasks over in its first sweep, then sat in
    // its first expiry and purge for seconds; the renewal timer only began after them, so the leases it had just
    // taken ran out and another instance took the tasks back (they moved back and forth, four attempts)
    const store = sqlite();
    const now = Date.now();
    await store.create(
      newTask(now, { taskId: 'left-behind', resumable: true, leaseHolder: 'instance-gone', leaseExpiresAt: now - 1 }),
    );
    let releaseHousekeeping: () => void = () => {};
    const slowHousekeeping = new Proxy(store, {
      get(target, property, receiver) {
        if (property === 'expireOverdue') {
          return async (...args: Parameters<TaskStore['expireOverdue']>) => {
            await new Promise<void>((resolve) => (releaseHousekeeping = resolve));
            return target.expireOverdue(...args);
          };
        }
        const value: unknown = Reflect.get(target, property, receiver);
        return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
      },
    });
    const tasks = new TaskServer({ store: slowHousekeeping, leaseMs: 600, sweepIntervalMs: 100, onError: () => {} });
    tasks.registerTool('job', { task: { support: 'required', resumable: true } }, async (_args, ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      return { content: [] };
    });
    open.push(tasks);
    const starting = tasks.start();
    const claimed = await waitFor('the start to take the task over', async () => {
      const task = await store.get('left-behind');
      return task?.leaseHolder === tasks.instanceId ? task : undefined;
    });
    // three leases into the slow housekeeping, the lease taken at the start is still held, renewed meanwhile
    await new Promise((resolve) => setTimeout(resolve, 1800));
    const held = await store.get('left-behind');
    releaseHousekeeping();
    await starting;
    expect(held).toMatchObject({ leaseHolder: tasks.instanceId, fence: claimed.fence });
    expect(held!.leaseExpiresAt!).toBeGreaterThan(claimed.leaseExpiresAt! + 600);
  });
});

describe('the lease loop keeps one live run per task', () => {
  it('counts no new attempt when it claims its own task while the run goes on', async () => {
    // however an instance comes to claim its own task while the run lives (the chaos soak saw it after a database
    // outage), the run goes on under the new fence; the store counted a second attempt all the same, so the task
    // completed with attempt 1's result while its attempt said 2
    clock = Date.now();
    const store = sqlite();
    const runs: Run[] = [];
    const a = instance('instance-a', lateClaim(store, 2 * LEASE_MS), runs, true);
    await a.start();
    const { taskId } = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    await waitFor('the handler to start', () => (runs.length > 0 ? true : undefined));
    await waitFor('the instance to claim its own task', async () =>
      ((await store.get(taskId))?.fence ?? 0) > 1 ? true : undefined,
    );
    runs[0]!.finish();
    const done = await ended(store, taskId);
    expect(done.status).toBe('completed');
    expect(runs.map((r) => ({ attempt: r.attempt, aborted: r.aborted }))).toEqual([{ attempt: 1, aborted: undefined }]);
    expect(done.attempt).toBe(1);
  });

  it('does not take over its own task when a renewal comes back after the lease ran out', async () => {
    clock = Date.now();
    const store = sqlite();
    const runs: Run[] = [];
    const a = instance(
      'instance-a',
      slowAfter(store, 'renewLeases', async () => void (clock += 2 * LEASE_MS)),
      runs,
      true,
    );
    await a.start();
    const { taskId } = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    await waitFor('the handler to start', () => (runs.length > 0 ? true : undefined));
    // the slow renewal happens on the first tick with a lease to renew; give the loop many more ticks
    await ticks(10);
    expect(runs.map((r) => ({ attempt: r.attempt, aborted: r.aborted }))).toEqual([{ attempt: 1, aborted: undefined }]);
    runs[0]!.finish();
    const done = await ended(store, taskId);
    expect(done.status).toBe('completed');
    expect(done.result).toMatchObject({ content: [{ text: 'done by instance-a' }] });
    expect(done.attempt).toBe(1);
  });

  it('runs a non-resumable task it created once, when its own sweep claimed it while the create came back', async () => {
    clock = Date.now();
    const store = sqlite();
    const runs: Run[] = [];
    const slowCreate = slowAfter(store, 'create', async (args) => {
      const { taskId } = args[0] as { taskId: string };
      clock += 2 * LEASE_MS;
      // this instance's own lease loop finds the task's first lease run out and claims it
      await waitFor('the own sweep to claim the task', async () =>
        (await store.get(taskId))?.fence === 2 ? true : undefined,
      );
    });
    const a = instance('instance-a', slowCreate, runs, false);
    await a.start();
    const { taskId } = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    await waitFor('the handler to start, or the task to end without it', async () =>
      runs.length > 0 || (await store.get(taskId))?.status !== 'working' ? true : undefined,
    );
    await ticks(5);
    expect((await store.get(taskId))?.error).toBeUndefined();
    expect(runs.map((r) => r.aborted)).toEqual([undefined]);
    runs[0]!.finish();
    const done = await ended(store, taskId);
    expect(done.status).toBe('completed');
  });

  it('aborts a run at once when another instance took its task, and its end leaves the new holder alone', async () => {
    clock = Date.now();
    const store = sqlite();
    const runs: Run[] = [];
    const a = instance('instance-a', store, runs, true);
    await a.start();
    const { taskId } = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    await waitFor('the handler to start', () => (runs.length > 0 ? true : undefined));
    // instance b claims the task as if a had gone silent, while a is alive
    const [claimed] = await store.claimOrphans('instance-b', clock + 10 * LEASE_MS, clock + 20 * LEASE_MS, 10);
    expect(claimed?.taskId).toBe(taskId);
    await waitFor('instance a to abort its run', () => (runs[0]!.aborted ? true : undefined), 5_000);
    expect(runs[0]!.aborted).toBe('lease-lost');
    await ticks(3);
    expect(await store.get(taskId)).toMatchObject({ status: 'working', leaseHolder: 'instance-b', fence: 2 });
    expect(a.runningCount()).toBe(0);
  });

  it('closes within the cancel grace period when a handler ignores its signal, and hands its task back', async () => {
    // close() used to wait for ever on such a handler, and the lease was never handed back (RELIABILITY.md, "What
    // arrived is kept": the server's close() is bounded)
    clock = Date.now();
    const store = sqlite();
    const tasks = new TaskServer({
      store,
      leaseMs: LEASE_MS,
      sweepIntervalMs: 30,
      cancelGraceMs: 300,
      instanceId: 'instance-a',
      now: () => clock,
      onError: () => {},
    });
    let release: (() => void) | undefined;
    tasks.registerTool('stubborn', { task: { resumable: true } }, async () => {
      await new Promise<void>((resolve) => (release = resolve));
      return { content: [] };
    });
    open.push(tasks);
    await tasks.start();
    const { taskId } = await tasks.createTask(tasks.tool('stubborn')!, {}, 'alice', undefined);
    await waitFor('the handler to start', () => release);
    let hung: NodeJS.Timeout | undefined;
    const closed = await Promise.race([
      tasks.close().then(() => 'closed'),
      new Promise((resolve) => (hung = setTimeout(() => resolve('still waiting after 10 s'), 10_000))),
    ]);
    clearTimeout(hung);
    expect(closed).toBe('closed');
    // handed back: another instance takes it over at once, not after the lease
    const [claimed] = await store.claimOrphans('instance-b', clock, clock + LEASE_MS, 10);
    expect(claimed?.taskId).toBe(taskId);
    release!();
  });
});

/** Instance a, on a store whose renewals the test holds, running one task of `job`. */
async function runningBehindCut(resumable: boolean) {
  clock = Date.now();
  const store = sqlite();
  const cut = renewalsHeld(store);
  const runs: Run[] = [];
  const activities: TaskActivity[] = [];
  const a = instance('instance-a', cut.store, runs, resumable, activities);
  await a.start();
  const { taskId } = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
  await waitFor('the handler to start', () => (runs.length > 0 ? true : undefined));
  return { store, cut, runs, activities, a, taskId };
}

describe('a run whose lease cannot be renewed in time', () => {
  it('is stopped before its lease could be taken, and run again as a new attempt once the store answers', async () => {
    const { store, cut, runs, activities, a, taskId } = await runningBehindCut(true);
    const cutAt = performance.now();
    cut.hold();
    await waitFor('the run to stop', () => runs[0]!.aborted, 5_000);
    const stoppedAfter = performance.now() - cutAt;
    expect(runs[0]!.aborted).toBe('lease-unrenewed');
    // four fifths of a lease after the last renewal that landed (sent at most one tick before the cut)
    expect(stoppedAfter).toBeGreaterThan(LEASE_MS * 0.8 - 60);
    expect(stoppedAfter).toBeLessThan(LEASE_MS);
    expect(activities).toContainEqual({ type: 'lease-unrenewed', taskId, tool: 'job', attempt: 1 });
    expect(a.runningCount()).toBe(0);

    // the store answers again: the stopped run's lease is handed back and taken at once, here, as attempt 2
    cut.release();
    await waitFor('the task to run again', () => (runs.length > 1 ? true : undefined), 5_000);
    expect(runs.map((r) => ({ instance: r.instance, attempt: r.attempt }))).toEqual([
      { instance: 'instance-a', attempt: 1 },
      { instance: 'instance-a', attempt: 2 },
    ]);
    runs[1]!.finish();
    const done = await ended(store, taskId);
    expect(done.status).toBe('completed');
    expect(done.attempt).toBe(2);
  });

  it('goes on untouched when a renewal lands before that moment', async () => {
    const { store, cut, runs, activities, taskId } = await runningBehindCut(false);
    // held for half a lease: the renewal in flight lands late, but long before the run would be stopped
    cut.hold();
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS / 2));
    cut.release();
    await new Promise((resolve) => setTimeout(resolve, LEASE_MS));
    expect(runs.map((r) => ({ attempt: r.attempt, aborted: r.aborted }))).toEqual([{ attempt: 1, aborted: undefined }]);
    expect(activities.filter((activity) => activity.type === 'lease-unrenewed')).toEqual([]);
    runs[0]!.finish();
    const done = await ended(store, taskId);
    expect(done.status).toBe('completed');
    expect(done.attempt).toBe(1);
  });

  it('writes no outcome when its handler returns after it was stopped', async () => {
    clock = Date.now();
    const store = sqlite();
    const cut = renewalsHeld(store);
    const a = new TaskServer({
      store: cut.store,
      leaseMs: LEASE_MS,
      sweepIntervalMs: 30,
      instanceId: 'instance-a',
      now: () => clock,
      onError: () => {},
    });
    let returned = false;
    // a handler that hears its signal and returns a result anyway, as if it had finished
    a.registerTool('job', { task: { support: 'optional', resumable: false } }, async (_args, ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      returned = true;
      return { content: [{ type: 'text', text: 'stopped early' }] };
    });
    open.push(a);
    await a.start();
    const { taskId } = await a.createTask(a.tool('job')!, {}, 'alice', undefined);
    cut.hold();
    await waitFor('the handler to return', () => (returned ? true : undefined), 5_000);
    cut.release();
    // handed back and failed as interrupted (not resumable): never completed with what the stopped run returned
    const done = await ended(store, taskId);
    expect(done).toMatchObject({ status: 'failed', attempt: 2 });
    expect(done.error?.message).toMatch(/interrupted/);
  });
});
