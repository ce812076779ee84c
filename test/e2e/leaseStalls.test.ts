// A stalled store is not a dead holder (docs/DESIGN.md, "Rules learned in the field", 11): when nobody could renew a
// lease (another process held the SQLite file's write lock for longer than the lease), the lease runs out with its
// holder alive. Neither an idle instance that lived through the stall nor one started right after it may take the
// live holder's tasks: each runs once, in the instance that created it, and completes.
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

async function serve(store: string, runLog: string, leaseMs: number): Promise<ServeProcess> {
  const p = await startServe(['--store', store, '--lease-ms', String(leaseMs)], 20_000, { CLOSEOUT_RUN_LOG: runLog });
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

describe('a SQLite write lock held past the lease', { timeout: 120_000 }, () => {
  it('an idle instance that lived through the stall takes no task of the live holder', async () => {
    const store = join(dir, `store-${++stores}.db`);
    const runLog = join(dir, `runs-${stores}.jsonl`);
    const holder = await serve(store, runLog, 2000);
    await serve(store, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    const lock = await holdWriteLock(store);
    await sleep(4000);
    await lock.release();

    await expectRanOnceIn(holder, runLog, tasks);
  });

  it('an instance started during the stall takes no task of the live holder', async () => {
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

    await expectRanOnceIn(holder, runLog, tasks);
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

  it('frozen (statements answer late): an idle instance takes no task of the live holder', async () => {
    const { connectionString } = await postgres.createDatabase();
    const runLog = join(dir, `runs-pg-frozen.jsonl`);
    const holder = await serve(connectionString, runLog, 2000);
    await serve(connectionString, runLog, 2000);
    const tasks = await twoTasks(holder, runLog);

    await postgres.freeze(4500);

    await expectRanOnceIn(holder, runLog, tasks);
  });

  it('stopped: an instance started right after it is back takes no task of the live holder', async () => {
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

    await expectRanOnceIn(holder, runLog, tasks);
  });
});
