// Invariant (RELIABILITY.md, "Client handles, close and connections"): one record, one live handle. Whatever mix of
// attach(), resumeAll() and callTool(sameKey) asks for a record at the same moment, every caller gets the same
// TaskHandle, and that handle settles when the task ends; none is left behind un-updated.
import { describe, expect, it } from 'vitest';

import type { PollPolicy, TaskClient, TaskHandle, TaskOutcome } from '../../src/client/index.js';
import { isTaskHandle } from '../../src/client/index.js';
import { useClientHarness } from './fixtures/clientHarness.js';

const FAST: Partial<PollPolicy> = { floorMs: 5, capMs: 100, defaultIntervalMs: 20, backoffBaseMs: 10 };
const ARGS = { order: 7 };
const KEY = 'order-7';

const harness = useClientHarness('shared', FAST);

/** A task left open and detached in the ledger, for a second client to pick up. */
async function detachedTask(): Promise<string> {
  const first = await harness.connect();
  const answer = await first.callTool('cancellable', ARGS, { idempotencyKey: KEY });
  if (!isTaskHandle(answer)) throw new Error('cancellable answered without a task');
  await answer.detach();
  return answer.taskId;
}

/** The outcome, or 'pending' when it has not settled within `ms`. */
async function settledWithin(handle: TaskHandle, ms: number): Promise<TaskOutcome | 'pending'> {
  let timer: NodeJS.Timeout | undefined;
  const pending = new Promise<'pending'>((resolve) => (timer = setTimeout(() => resolve('pending'), ms)));
  try {
    return await Promise.race([handle.outcome(), pending]);
  } finally {
    clearTimeout(timer);
  }
}

async function expectOneLiveHandle(client: TaskClient, taskId: string, handles: TaskHandle[]): Promise<void> {
  for (const handle of handles) expect(handle).toBe(handles[0]);
  await client.cancel(taskId);
  for (const handle of handles) expect(await settledWithin(handle, 10_000)).toMatchObject({ kind: 'cancelled' });
}

function handlesOf(value: TaskHandle | { resumed: TaskHandle[] } | unknown): TaskHandle[] {
  if (value instanceof Object && 'resumed' in value) return (value as { resumed: TaskHandle[] }).resumed;
  if (isTaskHandle(value as TaskHandle)) return [value as TaskHandle];
  throw new Error(`not a handle: ${JSON.stringify(value)}`);
}

describe('one record, one live handle', () => {
  it('gives two attach() at once the same handle', async () => {
    const taskId = await detachedTask();
    const client = await harness.connect();
    const handles = await Promise.all([client.attach(taskId), client.attach(taskId)]);
    await expectOneLiveHandle(client, taskId, handles);
  });

  it('gives two resumeAll() at once the same handle', async () => {
    const taskId = await detachedTask();
    const client = await harness.connect();
    const reports = await Promise.all([client.resumeAll(), client.resumeAll()]);
    const handles = reports.flatMap(handlesOf);
    expect(handles).toHaveLength(2);
    await expectOneLiveHandle(client, taskId, handles);
  });

  it('gives attach() and resumeAll() at once the same handle', async () => {
    const taskId = await detachedTask();
    const client = await harness.connect();
    const [attached, report] = await Promise.all([client.attach(taskId), client.resumeAll()]);
    await expectOneLiveHandle(client, taskId, [attached, ...handlesOf(report)]);
  });

  it('gives attach() and callTool() with the same idempotency key at once the same handle', async () => {
    const taskId = await detachedTask();
    const client = await harness.connect();
    const [attached, called] = await Promise.all([
      client.attach(taskId),
      client.callTool('cancellable', ARGS, { idempotencyKey: KEY }),
    ]);
    await expectOneLiveHandle(client, taskId, [attached, ...handlesOf(called)]);
    expect(harness.fixture.runs.get('cancellable')).toBe(1);
  });
});
