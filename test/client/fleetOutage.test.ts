// After an outage of the fleet's PostgreSQL ledger, no worker takes over another live worker's records
// (docs/DESIGN.md, "Rules learned in the field", 3, as the server's instances do, test/server/outageTakeover.test.ts).
// While the ledger is down nobody can renew a lease, so every lease that ran out meanwhile says nothing about its
// holder. Two workers on one ledger, the first following open tasks, the second taking over every 50 ms: the ledger's
// PostgreSQL stopped for longer than the client lease, then started again. Before, the second worker's first take-over
// after the return claimed the first's records, whose handles then ended "leased-elsewhere" in the first worker.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import type { TaskClient, TaskHandle } from '../../src/client/index.js';
import { connectHttpTaskClient, isTaskHandle } from '../../src/client/index.js';
import { serveTaskServer, type ServingTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { type StartedPostgres, startPostgres } from '../support/postgres.js';

const LEASE_MS = 1500;
const OUTAGE_MS = 4000;
const TASKS = 3;

let postgres: StartedPostgres;
let serving: ServingTaskServer;
let store: SqliteTaskStore;
const dir = mkdtempSync(join(tmpdir(), 'closeout-fleet-outage-'));
const clients: TaskClient[] = [];
let openGates: () => void = () => undefined;

beforeAll(async () => {
  postgres = await startPostgres();
  store = new SqliteTaskStore(join(dir, 'tasks.db'));
  const tasks = new TaskServer({ store });
  const gates: Array<() => void> = [];
  openGates = () => {
    for (const open of gates.splice(0)) open();
  };
  tasks.registerTool('gated', { task: { support: 'required', pollIntervalMs: 200 } }, async () => {
    await new Promise<void>((resolve) => gates.push(resolve));
    return { content: [{ type: 'text', text: 'done' }] };
  });
  serving = await serveTaskServer(tasks, { port: 0, host: '127.0.0.1' });
}, 120_000);

afterAll(async () => {
  openGates();
  for (const client of clients.splice(0)) await client.close().catch(() => {});
  await serving?.close();
  await store?.close();
  await postgres?.stop();
  rmSync(dir, { recursive: true, force: true });
}, 60_000);

async function worker(ledger: string, takeOverEveryMs: number): Promise<TaskClient> {
  const client = await connectHttpTaskClient(serving.url, {
    ledger,
    leaseMs: LEASE_MS,
    takeOverEveryMs,
    pollPolicy: { floorMs: 50, capMs: 500, tickMs: 0 },
  });
  clients.push(client);
  return client;
}

/** TASKS open tasks of worker `a`, waiting on the gate, and how each will end. */
async function gatedTasks(a: TaskClient): Promise<{ handles: TaskHandle[]; outcomes: Promise<unknown>[] }> {
  const handles: TaskHandle[] = [];
  for (let n = 0; n < TASKS; n++) {
    const handle = await a.callTool('gated', { n });
    if (!isTaskHandle(handle)) throw new Error('gated answered without a task');
    handles.push(handle);
  }
  const outcomes = handles.map((handle) =>
    handle.outcome().then(
      (o) => o,
      (error: unknown) => error,
    ),
  );
  return { handles, outcomes };
}

/** Every record still `a`'s, and, the gate opened, every task completed there. */
async function expectKeptAndCompleted(a: TaskClient, handles: TaskHandle[], outcomes: Promise<unknown>[]) {
  const records = await Promise.all(handles.map((handle) => a.ledger.get(handle.recordId)));
  expect(records.map((record) => record?.leaseHolder)).toEqual(handles.map(() => a.leaseHolder));
  openGates();
  const settled = await Promise.all(outcomes);
  expect(settled.map((o) => (o instanceof Error ? o.message : (o as { kind: string }).kind))).toEqual(
    handles.map(() => 'completed'),
  );
}

describe('an outage of the fleet ledger longer than the lease, with two live workers', () => {
  it('leaves every record with the worker following it: none taken over, every handle closes out there', async () => {
    const database = await postgres.createDatabase();
    const a = await worker(database.connectionString, 60_000);
    // the second worker: nothing of its own, a take-over every 50 ms
    await worker(database.connectionString, 50);
    const { handles, outcomes } = await gatedTasks(a);

    await postgres.outage(OUTAGE_MS);
    // three client leases after the return: every live holder has renewed, every claim that would be made was made
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS + 2000));

    await expectKeptAndCompleted(a, handles, outcomes);
  }, 120_000);

  it('a worker calling resumeAll() as the ledger comes back takes none of them', async () => {
    const database = await postgres.createDatabase();
    const a = await worker(database.connectionString, 60_000);
    const b = await worker(database.connectionString, 60_000);
    const { handles, outcomes } = await gatedTasks(a);

    await postgres.outage(OUTAGE_MS);
    // the records' leases ran out while nobody could renew them: that says nothing about their holder
    const report = await b.resumeAll();
    expect(report.resumed).toEqual([]);
    expect(report.leasedElsewhere.map((record) => record.recordId).sort()).toEqual(
      handles.map((handle) => handle.recordId).sort(),
    );
    // and the take-over it arms for when it can tell a dead holder from a stalled ledger finds them renewed
    await new Promise((resolve) => setTimeout(resolve, 3 * LEASE_MS + 2000));
    await expectKeptAndCompleted(a, handles, outcomes);
  }, 120_000);
});
