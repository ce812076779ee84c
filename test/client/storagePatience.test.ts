// An answer that arrived is never dropped (docs/DESIGN.md rule 10), and the end of the wait says
// what is true: while another process holds the ledger's write lock, a CreateTaskResult's commit is retried for
// `storagePatienceMs`, an `unrecorded` event names the taskId at once, and when the patience runs out the call fails
// naming the task the server created, leaving the record as it was (not closed, not taken for unknown-outcome) for
// a later call with its key or a resume. test/e2e/answerArrived.test.ts covers the lock released in time.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import type { TaskClientEvent } from '../../src/client/index.js';
import { connectHttpTaskClient, SqliteLedger, TaskClientError } from '../../src/client/index.js';
import { type HeldLock, holdWriteLock } from '../support/ledgerLock.js';
import { type FixtureServer, startTasksFixture } from './fixtures/tasksFixtureServer.js';

const PATIENCE_MS = 1500;
const cleanups: Array<() => Promise<void> | void> = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('a taskId the ledger cannot record within storagePatienceMs', () => {
  it('fails the call naming the task, after the patience, and leaves the record as it was', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'closeout-storage-patience-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const ledgerPath = join(dir, 'ledger.db');
    let lock: HeldLock | undefined;
    const fixture: FixtureServer = await startTasksFixture({
      // another process takes the ledger's write lock once the call is on the server, before its answer leaves
      beforeAnswer: async (request) => {
        if (request.method === 'tools/call') lock = await holdWriteLock(ledgerPath);
      },
    });
    cleanups.push(() => fixture.close());
    cleanups.push(() => lock?.release());
    // a short busy timeout stands for the default: the lock outlasts it many times over
    const ledger = new SqliteLedger(ledgerPath, { busyTimeoutMs: 100 });
    cleanups.push(() => ledger.dispose());
    const events: TaskClientEvent[] = [];
    const client = await connectHttpTaskClient(fixture.url, {
      ledger,
      storagePatienceMs: PATIENCE_MS,
      onEvent: (event) => events.push(event),
    });
    cleanups.push(() => client.close());

    const started = Date.now();
    const error = await client.callTool('slow', { n: 1 }, { idempotencyKey: 'patience-1' }).then(
      () => undefined,
      (e: unknown) => e,
    );
    const elapsed = Date.now() - started;
    const [taskId] = [...fixture.tasks.keys()];
    expect(taskId).toBeDefined();
    expect(error).toBeInstanceOf(TaskClientError);
    expect((error as TaskClientError).code).toBe('storage');
    expect((error as Error).message).toContain(`the server created task ${taskId}`);
    expect(elapsed).toBeGreaterThanOrEqual(PATIENCE_MS);
    // the taskId was out of this process's memory at once, on the event stream
    expect(events.find((event) => event.type === 'unrecorded')).toMatchObject({ type: 'unrecorded', taskId });
    expect(fixture.count('tools/call')).toBe(1);

    await lock!.release();
    lock = undefined;
    // nothing false was written: the record is still the submission in flight, not closed, not unknown-outcome
    const [record] = await ledger.list();
    expect(record).toMatchObject({ localState: 'submitting', taskId: undefined });

    // what the error says to do: call again with its key once the ledger is free. The record's lease is this process's
    // own, renewed by its own loop; it used to be taken for a submission in flight elsewhere ("leased-elsewhere") on
    // every call, for ever (the fleet soak's worker retried so until its deadline)
    const again = await client.callTool('slow', { n: 1 }, { idempotencyKey: 'patience-1' });
    expect(again).toMatchObject({ taskId });
    // the task the server created is the one followed: nothing sent twice
    expect(fixture.count('tools/call')).toBe(1);
    expect(await ledger.get(record!.recordId)).toMatchObject({ localState: 'tracking', taskId });
  }, 60_000);
});
