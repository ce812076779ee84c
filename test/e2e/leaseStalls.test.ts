// A stalled store is not a dead holder (docs/DESIGN.md, "Rules learned in the field", 11 and 13): when nobody could
// renew a lease (another process held the SQLite file's write lock, PostgreSQL froze or stopped, for longer than the
// lease), the lease runs out with its holder alive. Neither an idle instance that lived through the stall nor one
// started right after it may run a task beside the live holder: the holder either goes on (its renewal landed in
// time) or stopped its own run before the lease could be taken, and only then may the task run again (once, as
// attempt 2) or be failed as interrupted (not resumable). A stall shorter than that changes nothing: each task runs
// once, in the instance that created it, and completes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { holdWriteLock } from '../support/ledgerLock.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { rpc } from '../support/rpc.js';
import { runsOf, settled } from '../support/runLog.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-lease-stalls-'));
const live: ServeProcess[] = [];
let stores = 0;

afterEach(async () => {
  await Promise.all(live.splice(0).map((p) => p.kill()));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** `closeout serve` on `store`, with `leaseMs`, or at the default lease when it is left out. */
async function serve(store: string, runLog: string, leaseMs?: number): Promise<ServeProcess> {
  const lease = leaseMs === undefined ? [] : ['--lease-ms', String(leaseMs)];
  const p = await startServe(['--store', store, ...lease, '--log-format', 'json'], 20_000, {
    CLOSEOUT_RUN_LOG: runLog,
  });
  live.push(p);
  return p;
}

async function create(url: string, name: string, args: Record<string, unknown>): Promise<string> {
  const r = await rpc(url, 'tools/call', { name, arguments: args });
  expect(r.result?.['resultType']).toBe('task');
  return r.result!['taskId'] as string;
}

/** Two tasks of `holder`: a resumable batch (re-run on takeover) and a non-resumable report (failed on takeover). */
async function twoTasks(holder: ServeProcess, runLog: string): Promise<string[]> {
  const batch = await create(holder.url, 'batch_job', { items: 24, stepMs: 250 });
  const report = await create(holder.url, 'export_report', { pages: 24, pageMs: 250 });
  await waitFor('both handlers to start', () =>
    runsOf(runLog, batch).length && runsOf(runLog, report).length ? true : undefined,
  );
  return [batch, report];
}

async function expectRanOnceIn(holder: ServeProcess, runLog: string, taskIds: string[]): Promise<void> {
  for (const taskId of taskIds) {
    const task = await settled(holder.url, taskId, 40_000);
    expect(task, `task ${taskId}`).toMatchObject({ status: 'completed' });
    expect(runsOf(runLog, taskId), `runs of ${taskId}`).toEqual([
      expect.objectContaining({ attempt: 1, pid: holder.child.pid }),
    ]);
  }
}

/** When `holder` stopped its run of `taskId` because it could not renew the lease in time (its activity log). */
function stoppedAt(holder: ServeProcess, taskId: string): number | undefined {
  for (const line of holder.stderr().split('\n')) {
    if (!line.startsWith('{')) continue;
    const entry = JSON.parse(line) as { at: string; event: string; taskId?: string };
    if (entry.event === 'task.lease-unrenewed' && entry.taskId === taskId) return Date.parse(entry.at);
  }
  return undefined;
}

/**
 * The batch (resumable) and the report (not resumable) of `holder` after a stall past the lease: never two runs at
 * once. Either the holder's run went on and completed, or the holder stopped it (lease-unrenewed) before the task ran
 * again, once, as attempt 2, wherever (completed), or was failed as interrupted (the report).
 */
async function expectOneRunAtATime(holder: ServeProcess, runLog: string, [batch, report]: string[]): Promise<void> {
  for (const taskId of [batch!, report!]) {
    const task = await settled(holder.url, taskId, 40_000);
    const runs = runsOf(runLog, taskId);
    const stopped = stoppedAt(holder, taskId);
    const story = `task ${taskId}: ${JSON.stringify({ status: task['status'], runs, stopped })}`;
    expect(runs[0], story).toMatchObject({ attempt: 1, pid: holder.child.pid });
    if (stopped === undefined) {
      expect(task, story).toMatchObject({ status: 'completed' });
      expect(runs, story).toHaveLength(1);
    } else if (taskId === batch) {
      expect(task, story).toMatchObject({ status: 'completed', result: { structuredContent: { attempt: 2 } } });
      expect(runs, story).toHaveLength(2);
      expect(runs[1], story).toMatchObject({ attempt: 2 });
      expect(runs[1]!.at, story).toBeGreaterThanOrEqual(stopped);
    } else {
      expect(task, story).toMatchObject({
        status: 'failed',
        error: { message: expect.stringContaining('interrupted') },
      });
      expect(runs, story).toHaveLength(1);
    }
  }
}

describe('a SQLite write lock held past the lease', { timeout: 120_000 }, () => {
  it('an idle instance that lived through the stall runs no task beside the live holder', async () => {
    const store = join(dir, `store-${++stores}.db`);
    const runLog = join(dir, `runs-${stores}.jsonl`);
    const holder = await serve(store, runLog, 2000);
    await serve(store, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    const lock = await holdWriteLock(store);
    await sleep(4000);
    await lock.release();

    await expectOneRunAtATime(holder, runLog, tasks);
  });

  it('an instance started during the stall runs no task beside the live holder', async () => {
    const store = join(dir, `store-${++stores}.db`);
    const runLog = join(dir, `runs-${stores}.jsonl`);
    const holder = await serve(store, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    const lock = await holdWriteLock(store);
    await sleep(2000);
    // its start waits on the lock, and its first look at the leases comes right after the stall
    const starting = serve(store, runLog, 2000);
    await sleep(2500);
    await lock.release();
    await starting;

    await expectOneRunAtATime(holder, runLog, tasks);
  });
});

describe('PostgreSQL stalled past the lease', { timeout: 180_000 }, () => {
  let postgres: StartedPostgres;
  beforeAll(async () => {
    postgres = await startPostgres();
  }, 120_000);
  afterAll(async () => {
    await Promise.all(live.splice(0).map((p) => p.kill()));
    await postgres?.stop();
  }, 60_000);

  it('frozen (statements answer late): an idle instance runs no task beside the live holder', async () => {
    const { connectionString } = await postgres.createDatabase();
    const runLog = join(dir, `runs-pg-frozen.jsonl`);
    const holder = await serve(connectionString, runLog, 2000);
    await serve(connectionString, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    await postgres.freeze(4500);

    await expectOneRunAtATime(holder, runLog, tasks);
  });

  it('frozen for a quarter of the lease: the holder goes on, and each task runs once', async () => {
    // a renewal that lands before four fifths of a lease after the last one was sent changes nothing
    const { connectionString } = await postgres.createDatabase();
    const runLog = join(dir, `runs-pg-frozen-short.jsonl`);
    const holder = await serve(connectionString, runLog, 2000);
    await serve(connectionString, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    await postgres.freeze(500);

    await expectRanOnceIn(holder, runLog, tasks);
    for (const taskId of tasks) expect(stoppedAt(holder, taskId)).toBeUndefined();
  });

  it('at the default lease, a 12 s freeze of PostgreSQL changes nothing: each task runs once in its holder and completes', async () => {
    // no --lease-ms: what a stall of this length costs a deployment that kept the defaults
    const { connectionString } = await postgres.createDatabase();
    const runLog = join(dir, `runs-pg-frozen-default.jsonl`);
    const holder = await serve(connectionString, runLog);
    await serve(connectionString, runLog);
    // each about 20 s of work, so that every run spans the freeze
    const tasks = [
      await create(holder.url, 'batch_job', { items: 80, stepMs: 250 }),
      await create(holder.url, 'batch_job', { items: 80, stepMs: 250 }),
      await create(holder.url, 'export_report', { pages: 80, pageMs: 250 }),
      await create(holder.url, 'export_report', { pages: 80, pageMs: 250 }),
    ];
    await waitFor('every handler to start', () =>
      tasks.every((taskId) => runsOf(runLog, taskId).length) ? true : undefined,
    );

    await postgres.freeze(12_000);

    // every task's story at once, so that a failure shows them all
    const stories = await Promise.all(
      tasks.map(async (taskId) => ({
        status: (await settled(holder.url, taskId, 60_000))['status'],
        runs: runsOf(runLog, taskId).map(({ attempt, pid }) => ({ attempt, pid })),
        stopped: stoppedAt(holder, taskId) !== undefined,
      })),
    );
    const once = { status: 'completed', runs: [{ attempt: 1, pid: holder.child.pid }], stopped: false };
    expect(stories).toEqual(tasks.map(() => once));
  });

  it('stopped: an instance started right after it is back runs no task beside the live holder', async () => {
    const { connectionString } = await postgres.createDatabase();
    const runLog = join(dir, `runs-pg-outage.jsonl`);
    const holder = await serve(connectionString, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    const outage = postgres.outage(5000);
    // its process starts while the database is down and first reaches it as it comes back
    await sleep(4600);
    const starting = serve(connectionString, runLog, 2000);
    await outage;
    await starting;

    await expectOneRunAtATime(holder, runLog, tasks);
  });
});
