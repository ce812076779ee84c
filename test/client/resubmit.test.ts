// Resubmission is explicit and happens once (RELIABILITY.md, "What arrived is kept"): two resubmit() of one record at
// the same moment, from one TaskClient or from two on one ledger, send one tools/call (the ledger decides in one
// transaction); and a call repeated with the same idempotency key and arguments after its answer was lost recovers the
// call by sending it again with that key (a Closeout server then hands back the task the lost call created), once.
import { describe, expect, it } from 'vitest';

import type { PollPolicy } from '../../src/client/index.js';
import { isTaskHandle, SqliteLedger } from '../../src/client/index.js';
import { argumentsDigest } from '../../src/client/submitting/argumentsDigest.js';
import { useClientHarness } from './fixtures/clientHarness.js';

const FAST: Partial<PollPolicy> = {
  floorMs: 5,
  capMs: 100,
  defaultIntervalMs: 20,
  backoffBaseMs: 10,
  backoffCapMs: 50,
};
const KEY_META = 'io.closeout/idempotencyKey';

const harness = useClientHarness('resubmit', FAST);

/** A call whose answer never arrived: sent by a process that died, settled unknown-outcome. */
async function lostCall(recordId: string, args: Record<string, string> = {}): Promise<void> {
  const ledger = new SqliteLedger(harness.ledgerPath);
  try {
    await ledger.recordIntent({
      recordId,
      endpoint: harness.fixture.url.href,
      toolName: 'unlimited',
      arguments: args,
      argumentsDigest: argumentsDigest(args),
      idempotencyKey: `key-${recordId}`,
      submittedAt: Date.now() - 60_000,
      leaseHolder: 'dead-process',
      leaseExpiresAt: Date.now() - 30_000,
    });
    await ledger.markSent(recordId, 'dead-process', Date.now() - 59_000);
    await ledger.settleAbandonedSubmissions(harness.fixture.url.href, Date.now(), 'found in the test');
  } finally {
    await ledger.dispose();
  }
}

const sentKeys = () =>
  harness.fixture.requests
    .filter((request) => request.method === 'tools/call')
    .map((request) => (request.params['_meta'] as Record<string, unknown>)[KEY_META]);

describe('resubmission', () => {
  it.each([
    ['one TaskClient', 1],
    ['two TaskClients on one ledger', 2],
  ])('of one record twice at the same moment goes through once (%s)', async (_name, count) => {
    await lostCall('lost');
    const first = await harness.connect();
    const second = count === 1 ? first : await harness.connect();
    const outcomes = await Promise.allSettled([
      first.resubmit('lost', { idempotencyKey: 'new' }),
      second.resubmit('lost', { idempotencyKey: 'new' }),
    ]);
    expect(outcomes.filter((outcome) => outcome.status === 'fulfilled')).toHaveLength(1);
    const refused = outcomes.find((outcome) => outcome.status === 'rejected');
    expect(refused?.reason).toMatchObject({
      code: 'invalid-state',
      message: expect.stringMatching(/already resubmitted/),
    });
    expect(harness.fixture.count('tools/call')).toBe(1);
    const all = await first.list();
    expect(all.filter((record) => record.resubmittedFrom === 'lost')).toHaveLength(1);
  });

  it('is refused for a task still open, naming it by its taskId', async () => {
    const client = await harness.connect();
    const handle = await client.callTool('cancellable', { n: 1 });
    if (!isTaskHandle(handle)) throw new Error('cancellable answered without a task');
    await expect(client.resubmit(handle.taskId)).rejects.toMatchObject({
      code: 'invalid-state',
      message: `task ${handle.taskId} is tracking: cancel or wait for it before resubmitting`,
    });
    await client.cancel(handle.taskId);
  });

  it('is refused for a record that is still open, inside the ledger too', async () => {
    const ledger = new SqliteLedger(harness.ledgerPath);
    try {
      await ledger.recordIntent({
        recordId: 'open',
        endpoint: 'http://127.0.0.1:1/mcp',
        toolName: 't',
        arguments: {},
        argumentsDigest: argumentsDigest({}),
        submittedAt: 1,
        leaseHolder: 'p',
        leaseExpiresAt: 2,
      });
      const next = await ledger.recordResubmission('open', {
        recordId: 'next',
        endpoint: 'http://127.0.0.1:1/mcp',
        toolName: 't',
        arguments: {},
        argumentsDigest: argumentsDigest({}),
        submittedAt: 3,
        leaseHolder: 'p',
        leaseExpiresAt: 4,
        resubmittedFrom: 'open',
      });
      expect(next).toMatchObject({ created: false, refused: 'still-open', record: { recordId: 'open' } });
      expect(await ledger.get('next')).toBeUndefined();
    } finally {
      await ledger.dispose();
    }
  });
});

describe('a call repeated with the same idempotency key after its answer was lost', () => {
  it('is sent again with that key, once, and the repeat after that joins the task', async () => {
    await lostCall('lost', { n: '1' });
    const client = await harness.connect();
    const answer = await client.callTool('unlimited', { n: '1' }, { idempotencyKey: 'key-lost' });
    expect(isTaskHandle(answer)).toBe(true);
    expect(sentKeys()).toEqual(['key-lost']);
    const again = await client.callTool('unlimited', { n: '1' }, { idempotencyKey: 'key-lost' });
    expect(isTaskHandle(again) && again.taskId).toBe(isTaskHandle(answer) && answer.taskId);
    expect(sentKeys()).toEqual(['key-lost']);
    expect(await client.get('lost')).toMatchObject({ localState: 'unknown-outcome', supersededBy: expect.any(String) });
  });

  it('with other arguments is a conflict, and nothing is sent', async () => {
    await lostCall('lost', { n: '1' });
    const client = await harness.connect();
    await expect(client.callTool('unlimited', { n: '2' }, { idempotencyKey: 'key-lost' })).rejects.toMatchObject({
      code: 'idempotency-conflict',
    });
    expect(harness.fixture.count('tools/call')).toBe(0);
  });

  it('from two TaskClients at the same moment is sent once', async () => {
    await lostCall('lost');
    const [first, second] = [await harness.connect(), await harness.connect()];
    const outcomes = await Promise.allSettled([
      first.callTool('unlimited', {}, { idempotencyKey: 'key-lost' }),
      second.callTool('unlimited', {}, { idempotencyKey: 'key-lost' }),
    ]);
    expect(outcomes.filter((outcome) => outcome.status === 'fulfilled').length).toBeGreaterThanOrEqual(1);
    expect(sentKeys()).toEqual(['key-lost']);
  });
});
