// A stalled ledger is not a dead holder, on the client too (docs/DESIGN.md, "Rules learned in the field", 11): a worker
// whose tools/call is in flight while another process holds the SQLite ledger's write lock past the worker's lease
// keeps its submission when a fresh process calls with the same idempotency key during that stall. The fresh process
// has not seen the ledger healthy for a lease, so it may not take the lapsed lease for a dead holder's: it neither
// settles the submission `unknown-outcome` (nor any other of that server's) nor sends the call again. Real processes:
// two built client workers and a lock holder; the server is an in-process fixture that holds the first answer back.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

import { afterAll, afterEach, describe, expect, it } from 'vitest';

import { SqliteLedger } from '../../src/client/index.js';
import { startTasksFixture } from '../client/fixtures/tasksFixtureServer.js';
import { type ClientWorker, startClientWorker } from '../support/clientWorker.js';
import { holdWriteLock } from '../support/ledgerLock.js';
import { waitFor } from '../support/waitFor.js';

const dir = mkdtempSync(join(tmpdir(), 'closeout-client-ledger-stall-'));
const workers: ClientWorker[] = [];
/** The live worker's lease: the stall outlasts it. */
const LEASE_MS = 1000;
/** How long the other process holds the write lock: past the lease, within the ledger's 5 s busy timeout. */
const STALL_MS = 3500;

afterEach(() => {
  for (const worker of workers.splice(0)) worker.child.kill('SIGKILL');
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function history(ledgerPath: string): Promise<string[]> {
  const ledger = new SqliteLedger(ledgerPath);
  try {
    const [record] = await ledger.list();
    return record ? (await ledger.history(record.recordId)).map((entry) => entry.localState) : [];
  } finally {
    await ledger.dispose();
  }
}

describe('a fresh process calling with a known key during a ledger stall', { timeout: 120_000 }, () => {
  it('leaves a live worker’s submission in flight to it', async () => {
    let answerCall!: () => void;
    const held = new Promise<void>((resolve) => (answerCall = resolve));
    let calls = 0;
    const fixture = await startTasksFixture({
      // the first tools/call is answered only when the test says: the live worker's submission stays in flight
      beforeAnswer: (request) => (request.method === 'tools/call' && ++calls === 1 ? held : undefined),
    });
    try {
      const ledger = join(dir, 'ledger.db');
      const call = {
        mode: 'call',
        url: fixture.url.href,
        ledger,
        askedLog: join(dir, 'asked.log'),
        tool: 'unlimited',
        args: { n: 1 },
        idempotencyKey: 'nightly',
      };
      const live = startClientWorker({ ...call, leaseMs: LEASE_MS });
      workers.push(live);
      await live.next('sending');
      await waitFor('the live worker’s tools/call to reach the server', () => (calls === 1 ? true : undefined));

      // the ledger stalls past the live worker's lease; a fresh process calls with the same key meanwhile, and is
      // still at it when the stall ends
      const lock = await holdWriteLock(ledger);
      await sleep(LEASE_MS + 500);
      const fresh = startClientWorker({ ...call, leaseMs: LEASE_MS });
      workers.push(fresh);
      await sleep(STALL_MS - LEASE_MS - 500);
      await lock.release();

      await fresh.exited;
      // before, it settled the live worker's submission `unknown-outcome` and sent the call again with the key
      expect(await history(ledger)).not.toContain('unknown-outcome');
      expect(calls).toBe(1);
      expect(fresh.events.find((event) => event.event === 'error')).toMatchObject({
        code: 'leased-elsewhere',
        message: expect.stringMatching(/being submitted by/),
      });

      // the live worker's answer arrives: its task, followed by it to the end
      answerCall();
      const handle = await live.next('handle');
      expect(await live.next('outcome')).toMatchObject({ taskId: handle['taskId'], kind: 'completed' });
      expect(await history(ledger)).not.toContain('unknown-outcome');
      expect(calls).toBe(1);
    } finally {
      answerCall();
      await fixture.close();
    }
  });
});
