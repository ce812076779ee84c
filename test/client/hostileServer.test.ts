// Invariant: whatever a Tasks server answers — enormous inputRequests, a pollIntervalMs of 0 or of a year, a negative
// ttlMs, an answer that trickles in and never ends — the client records a clear error on that record, never crashes,
// never polls one task faster than its floor, never asks a person what a bad answer asked, and every other task is
// closed out as usual. (The unknown resultType, mismatched taskId, missing fields and status going backwards or
// changing after terminal are in taskClient.test.ts, "against a misbehaving server".)

import { describe, expect, it } from 'vitest';

import type { PollPolicy } from '../../src/client/index.js';
import { task, textOf, useClientHarness } from './fixtures/clientHarness.js';
import { startTasksFixture } from './fixtures/tasksFixtureServer.js';

const FAST: Partial<PollPolicy> = {
  floorMs: 5,
  capMs: 300,
  defaultIntervalMs: 20,
  jitterRatio: 0.1,
  backoffBaseMs: 10,
  backoffCapMs: 100,
};

const harness = useClientHarness('hostile', FAST);

/** The times tasks/get reached the fixture for one task. */
function getTimes(taskId: string): number[] {
  return harness.fixture.requests
    .filter((request) => request.method === 'tasks/get' && request.params['taskId'] === taskId)
    .map((request) => request.at);
}

describe('TaskClient against a hostile server', () => {
  it.each([
    ['many-inputs', /5000 inputRequests/],
    ['huge-input', /inputRequests of \d+ bytes/],
  ])(
    'refuses %s as bad output, asks nobody, and closes the task out when the server behaves again',
    async (tool, message) => {
      const asked: string[] = [];
      const client = await harness.connect({
        inputHandlers: {
          elicitation: (_request, context) => {
            asked.push(context.key);
            return { action: 'accept', content: {} };
          },
        },
      });
      const other = await task(client, 'unlimited');
      const handle = await task(client, tool);
      expect(textOf(await handle.result())).toBe(`${tool} done`);
      expect(asked).toEqual([]);
      const record = await client.get(handle.taskId);
      expect(record).toMatchObject({ localState: 'terminal', status: 'completed', inputs: [] });
      expect(record?.lastError).toMatchObject({ kind: 'server-output', message: expect.stringMatching(message) });
      expect(harness.fixture.count('tasks/update')).toBe(0);
      await other.result();
      expect((await client.get(other.taskId))?.lastError).toBeUndefined();
    },
  );

  it('never polls faster than its floor when the server says pollIntervalMs 0', async () => {
    const floorMs = 100;
    const client = await harness.connect({ pollPolicy: { ...FAST, floorMs } });
    const handle = await task(client, 'poll-zero');
    expect(textOf(await handle.result())).toBe('poll-zero done');
    const times = getTimes(handle.taskId);
    expect(times).toHaveLength(6);
    for (let i = 1; i < times.length; i++) {
      // a timer may fire a millisecond before its due time on the fixture's clock, never more
      expect(times[i]! - times[i - 1]!).toBeGreaterThanOrEqual(floorMs - 2);
    }
  });

  it('polls at its cap, not a year later, when the server says pollIntervalMs of a year', async () => {
    const client = await harness.connect({ pollPolicy: { ...FAST, capMs: 200 } });
    const started = Date.now();
    const handle = await task(client, 'poll-year');
    expect(textOf(await handle.result())).toBe('poll-year done');
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(getTimes(handle.taskId)).toHaveLength(2);
  });

  it('records a negative ttlMs on tools/call as bad output: unknown-outcome, not re-sent', async () => {
    const client = await harness.connect();
    await expect(client.callTool('create-ttl-negative')).rejects.toMatchObject({
      code: 'bad-server-output',
      message: expect.stringMatching(/ttlMs/),
    });
    const [record] = await client.list({ toolName: 'create-ttl-negative' });
    expect(record).toMatchObject({ localState: 'unknown-outcome', lastError: { kind: 'server-output' } });
    expect(harness.fixture.count('tools/call')).toBe(1);
  });

  it('records a negative ttlMs on tasks/get as bad output and neither expires nor loses the task', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'get-ttl-negative');
    expect(textOf(await handle.result())).toBe('get-ttl-negative done');
    const record = await client.get(handle.taskId);
    expect(record).toMatchObject({ localState: 'terminal', ttlMs: 60_000 });
    expect(record?.lastError).toMatchObject({ kind: 'server-output', message: expect.stringMatching(/ttlMs/) });
  });

  it('drops a tasks/get answer whose JSON body never ends at maxAnswerBytes, records why, and closes the task out', async () => {
    const client = await harness.connect({ maxAnswerBytes: 1024 * 1024, requestTimeoutMs: 60_000 });
    const handle = await task(client, 'slow');
    harness.fixture.faults.push({ method: 'tasks/get', flood: 'json' });
    const started = Date.now();
    expect(textOf(await handle.result())).toMatch(/slow done/);
    // the client hung up after about a mebibyte (and what the sockets buffer), not at the request timeout
    expect(harness.fixture.floodBytes()).toBeLessThan(32 * 1024 * 1024);
    expect(Date.now() - started).toBeLessThan(30_000);
    const record = await client.get(handle.taskId);
    expect(record?.lastError).toMatchObject({ kind: 'transport', message: expect.stringMatching(/1048576 bytes/) });
  });

  it('drops a tasks/get answer whose SSE event never ends at maxAnswerBytes, records the size, and closes the task out', async () => {
    // the SDK's transport takes a broken answer stream for a dropped connection and would wait for the request's
    // timeout: the request is ended at the cap instead, and what is recorded names it
    const client = await harness.connect({ maxAnswerBytes: 1024 * 1024, requestTimeoutMs: 60_000 });
    const handle = await task(client, 'slow');
    harness.fixture.faults.push({ method: 'tasks/get', flood: 'event' });
    const started = Date.now();
    expect(textOf(await handle.result())).toMatch(/slow done/);
    expect(harness.fixture.floodBytes()).toBeLessThan(32 * 1024 * 1024);
    expect(Date.now() - started).toBeLessThan(30_000);
    expect((await client.get(handle.taskId))?.lastError).toMatchObject({
      kind: 'transport',
      message: expect.stringMatching(
        /^tasks\/get: an event of the server's stream passed 1048576 bytes, the client's maxAnswerBytes/,
      ),
    });
  });

  it('records a tools/call whose SSE answer never ends as unknown-outcome for its size, not its timeout', async () => {
    const client = await harness.connect({ maxAnswerBytes: 1024 * 1024, requestTimeoutMs: 60_000 });
    harness.fixture.faults.push({ method: 'tools/call', flood: 'event' });
    const started = Date.now();
    await expect(client.callTool('slow')).rejects.toMatchObject({
      code: 'unknown-outcome',
      message: expect.stringMatching(/1048576 bytes, the client's maxAnswerBytes/),
    });
    expect(Date.now() - started).toBeLessThan(30_000);
    const [record] = await client.list({ toolName: 'slow' });
    expect(record).toMatchObject({
      localState: 'unknown-outcome',
      lastError: {
        kind: 'transport',
        message: expect.stringMatching(/^tools\/call: an event of the server's stream passed 1048576 bytes/),
      },
    });
    expect(harness.fixture.count('tools/call')).toBe(1);
  });

  it('drops a push stream whose event never ends at maxAnswerBytes, and follows its tasks by polling', async () => {
    const fixture = await startTasksFixture({ listen: 'endless-event' });
    harness.defer(() => fixture.close());
    const client = await harness.connect({ maxAnswerBytes: 1024 * 1024 }, fixture.url);
    const handle = await task(client, 'unlimited');
    expect(textOf(await handle.result())).toBe('unlimited done');
    // the stream was opened (and dropped) at least once, and the client read little of what it was sent
    expect(fixture.count('subscriptions/listen')).toBeGreaterThanOrEqual(1);
    expect(fixture.floodBytes()).toBeLessThan(32 * 1024 * 1024);
  });

  it('gives up on a tasks/get answer that trickles in, records it, and closes the task out on the next poll', async () => {
    const client = await harness.connect({ requestTimeoutMs: 400 });
    const other = await task(client, 'unlimited');
    const handle = await task(client, 'slow');
    harness.fixture.faults.push({ method: 'tasks/get', slowLorisMs: 10_000 });
    const started = Date.now();
    expect(textOf(await handle.result())).toMatch(/slow done/);
    await other.result();
    // waited for the request timeout, not for the ten seconds of trickle
    expect(Date.now() - started).toBeLessThan(5_000);
    const withTimeout = (await client.list({})).filter((r) => /timed out/i.test(r.lastError?.message ?? ''));
    expect(withTimeout).toHaveLength(1);
    expect(withTimeout[0]?.lastError).toMatchObject({ kind: 'transport' });
  });

  it('turns a tools/call answer that trickles in into unknown-outcome after its timeout, without re-sending', async () => {
    const client = await harness.connect({ requestTimeoutMs: 400 });
    harness.fixture.faults.push({ method: 'tools/call', slowLorisMs: 10_000 });
    const started = Date.now();
    await expect(client.callTool('slow')).rejects.toMatchObject({ code: 'unknown-outcome' });
    expect(Date.now() - started).toBeLessThan(5_000);
    const [record] = await client.list({ toolName: 'slow' });
    expect(record).toMatchObject({ localState: 'unknown-outcome', lastError: { kind: 'transport' } });
    expect(harness.fixture.count('tools/call')).toBe(1);
    // the client stays usable
    const handle = await task(client, 'unlimited');
    await handle.result();
  });
});
