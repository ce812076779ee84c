// An answer that was given is kept until it is stored, and a key is asked once (docs/DESIGN.md rule 10):
// - while another process holds the ledger's write lock for many busy timeouts, the handler's answer waits in memory
//   and is stored once the lock is free; the person is not asked a second time;
// - an answer that can never be stored (not JSON: a BigInt) fails the key with the reason on the record instead of
//   being asked for again at every poll, and the key can still be answered by hand.

import { describe, expect, it } from 'vitest';

import type { PollPolicy, TaskClient, TaskInputHandlers } from '../../src/client/index.js';
import { SqliteLedger } from '../../src/client/index.js';
import { type HeldLock, holdWriteLock } from '../support/ledgerLock.js';
import { waitFor } from '../support/waitFor.js';
import { task, useClientHarness } from './fixtures/clientHarness.js';

const FAST: Partial<PollPolicy> = {
  floorMs: 5,
  capMs: 100,
  defaultIntervalMs: 20,
  backoffBaseMs: 10,
  backoffCapMs: 50,
};

const harness = useClientHarness('answer-storage', FAST);

async function connect(handlers: TaskInputHandlers): Promise<TaskClient> {
  // a short busy timeout stands for the default 5 s: the lock below outlasts it many times over
  const ledger = new SqliteLedger(harness.ledgerPath, { busyTimeoutMs: 100 });
  harness.defer(() => ledger.dispose());
  return harness.connect({ ledger, inputHandlers: handlers });
}

describe('an input answer the ledger cannot store at once', () => {
  it('is kept while another process holds the write lock, stored after, and never asked again', async () => {
    const asked: string[] = [];
    let lock: HeldLock | undefined;
    const client = await connect({
      elicitation: async (_request, context) => {
        asked.push(context.key);
        if (context.key === 'name' && !lock) {
          // the person answers just as a backup tool takes the ledger's write lock
          lock = await holdWriteLock(harness.ledgerPath);
          harness.defer(() => lock!.release());
          return { action: 'accept', content: { name: 'Luca' } };
        }
        const content: Record<string, string> = context.key === 'name' ? { name: 'again' } : {};
        return { action: 'accept', content };
      },
      roots: (_request, context) => {
        asked.push(context.key);
        return { roots: [] };
      },
    });
    const handle = await task(client, 'ask');
    await waitFor('the lock to be taken', () => lock, 15_000);
    const gets = harness.fixture.count('tasks/get');
    // many busy timeouts and several polls pass while the lock is held
    await waitFor(
      'polls while locked',
      () => (harness.fixture.count('tasks/get') >= gets + 5 ? true : undefined),
      15_000,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    await lock!.release();

    const result = await handle.result();
    expect(result.structuredContent).toMatchObject({ answers: { name: { content: { name: 'Luca' } } } });
    expect(asked.filter((key) => key === 'name')).toEqual(['name']);
  }, 60_000);

  it('fails the key with the reason on the record when the answer can never be stored, and asks once', async () => {
    const asked: string[] = [];
    const client = await connect({
      elicitation: (_request, context) => {
        asked.push(context.key);
        return { action: 'accept', content: { name: 10n as unknown as string } };
      },
    });
    const handle = await task(client, 'ask');
    const failed = await waitFor('the failure on the record', async () => {
      const record = await client.get(handle.taskId);
      return record?.lastError?.kind === 'input' ? record.lastError : undefined;
    });
    expect(failed.message).toMatch(/input name \(elicitation\/create\): the handler's answer cannot be stored.*BigInt/);
    const gets = harness.fixture.count('tasks/get');
    await waitFor('more polls', () => (harness.fixture.count('tasks/get') >= gets + 10 ? true : undefined), 15_000);
    expect(asked).toEqual(['name']);

    // a person can still answer it by hand
    const record = await client.get(handle.taskId);
    const request = record!.inputs.find((input) => input.key === 'name')!.request;
    expect(await client.answer(handle.taskId, 'name', { action: 'accept', content: { name: 'Luca' } })).toBe(true);
    expect(request.method).toBe('elicitation/create');
    await waitFor('the next round', () => (asked.includes('confirm') ? true : undefined), 15_000);
  });
});
