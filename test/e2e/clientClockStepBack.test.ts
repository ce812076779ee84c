// A client process whose host's wall clock stepped back an hour while it followed a task on a SQLite ledger (an NTP
// correction; libfaketime on that process, its monotonic clock untouched), then SIGKILLed: the next process takes the
// task over a lease later, as RELIABILITY.md ("Liveness of a lease holder") says, not an hour later. The lease the
// dead process claimed on the clock ahead must not outlive its renewals after the step (docs/DESIGN.md, "The task's
// life on the client", 7: a lease runs out when its holder stops renewing it).
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/index.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { type ClientWorker, startClientWorker } from '../support/clientWorker.js';
import { fakeClock } from '../support/faketime.js';
import { type ServeProcess, startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

const BUILT_CLIENT = fileURLToPath(new URL('../../dist/client/index.js', import.meta.url));
const LEASE_MS = 1_000;

let dir: string;
let server: ServeProcess;
let config: { url: string; ledger: string; askedLog: string; leaseMs: number };
const workers: ClientWorker[] = [];

beforeAll(() => {
  if (!existsSync(BUILT_CLIENT)) throw new Error('dist/client is missing: run `npm run build` (npm test does it)');
});

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-clock-step-'));
  server = await startServe(['--store', join(dir, 'server.db'), '--lease-ms', '2000']);
  config = { url: server.url, ledger: join(dir, 'ledger.db'), askedLog: join(dir, 'asked.log'), leaseMs: LEASE_MS };
});

afterEach(async () => {
  for (const worker of workers.splice(0)) worker.child.kill('SIGKILL');
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function leaseOf(recordId: string) {
  const ledger = new SqliteLedger(config.ledger);
  try {
    return (await ledger.get(recordId))?.leaseExpiresAt;
  } finally {
    await ledger.dispose();
  }
}

describe('a client process whose wall clock stepped back, then SIGKILLed', () => {
  it('leaves its task to the next process a lease after its last renewal', async () => {
    const clock = fakeClock('+1h');
    const first = startClientWorker(
      { ...config, mode: 'call', tool: 'batch_job', args: { items: 40, stepMs: 250 } },
      clock.env,
    );
    workers.push(first);
    const { taskId, recordId } = (await first.next('handle')) as unknown as { taskId: string; recordId: string };
    // claimed on the clock an hour ahead
    expect(await leaseOf(recordId)).toBeGreaterThan(Date.now() + 3_000_000);
    clock.set('+0');
    // its renewals on the stepped clock (every leaseMs / 3) say when its lease ends
    await waitFor(
      `the lease of ${recordId} to end at the holder's renewal after the step, not an hour ahead`,
      async () => (((await leaseOf(recordId)) ?? Infinity) <= Date.now() + LEASE_MS ? true : undefined),
      20_000,
      100,
    );
    first.child.kill('SIGKILL');
    await first.exited;

    // resume retries for 15 s while the task is leased elsewhere
    const second = startClientWorker({ ...config, mode: 'resume' });
    workers.push(second);
    const resumed = await second.next('resumed', 40_000);
    expect(resumed).toMatchObject({ taskIds: [taskId], leasedElsewhere: [] });
    expect(await second.next('outcome', 60_000)).toMatchObject({ taskId, kind: 'completed' });
    // the tool ran once, on its first attempt
    const store = openDatabase(join(dir, 'server.db'), { readonly: true });
    try {
      expect(store.prepare(`SELECT task_id, attempt FROM tasks`).all()).toEqual([{ task_id: taskId, attempt: 1 }]);
    } finally {
      store.close();
    }
  }, 150_000);
});
