// Invariants (docs/REQUIREMENTS.md S1..S17 against a Tasks server that is not ours, over real HTTP): the extension is
// declared on task requests only; a plain result is returned as is; a handle's taskId is in the ledger before the
// caller sees it; every task is closed out (completed, failed, cancelled, expired by -32602 or by TTL) with no poll
// after the end; input keys reach a handler once; transport failures are recorded and backed off, never a task failure;
// bad server output is recorded on its own record and hurts no other task; resume and resubmission are explicit.

import type { CallToolResult } from '@modelcontextprotocol/client';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { describe, expect, it } from 'vitest';

import type { PollPolicy, TaskHandle, TaskInputHandlers } from '../../src/client/index.js';
import { isTaskHandle, SqliteLedger, TaskClient, TaskClientError } from '../../src/client/index.js';
import { argumentsDigest } from '../../src/client/submitting/argumentsDigest.js';
import { deadHolderId } from '../support/deadHolder.js';
import { waitFor } from '../support/waitFor.js';
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
const TASKS = 'io.modelcontextprotocol/tasks';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';

const harness = useClientHarness('client', FAST);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** How a handle ended: 'settled' with an outcome, else the TaskClientError's code. */
const outcomeCode = (handle: TaskHandle) =>
  handle.outcome().then(
    () => 'settled',
    (error: unknown) => (error as TaskClientError).code,
  );

/**
 * An `ask` task whose first question (`name`) a process `first` asked, and whose answer reached the ledger before that
 * process died, its tasks/update not: the record is left free. `asked()`: how often `first` asked.
 */
async function answeredNeverSent(): Promise<{ handle: TaskHandle; asked: () => number }> {
  let asked = 0;
  const first = await harness.connect({
    leaseHolder: 'first',
    inputHandlers: {
      elicitation: () => {
        asked += 1;
        return new Promise(() => undefined); // the process dies while the person looks at the prompt
      },
    },
  });
  const handle = await task(first, 'ask');
  while (asked === 0) await sleep(10);
  await first.close();
  const ledger = new SqliteLedger(harness.ledgerPath);
  await ledger.claim(handle.recordId, 'first', Date.now() + 60_000, Date.now());
  const request = (await ledger.get(handle.recordId))!.inputs[0]!.request;
  await ledger.recordInputAnswer(handle.recordId, 'first', 'name', request, { action: 'accept', content: {} }, 1);
  await ledger.release(handle.recordId, 'first');
  await ledger.dispose();
  return { handle, asked: () => asked };
}

/** Another process takes a record from the client whose holder is `second`, as if its lease had run out. */
async function takeFromSecond(recordId: string): Promise<SqliteLedger> {
  const thief = new SqliteLedger(harness.ledgerPath);
  harness.defer(() => thief.dispose());
  await thief.releaseAllOf('second');
  expect(await thief.claim(recordId, 'thief', Date.now() + 60_000, Date.now())).toBe(true);
  return thief;
}

/** The SQLite ledger, counting the reads of leases polls make before they ask the server: one record's, or many's. */
class LeaseReadCounter extends SqliteLedger {
  leaseReads = 0;
  batchedReads = 0;
  override async isTrackedBy(recordId: string, holder: string): Promise<boolean> {
    this.leaseReads++;
    return super.isTrackedBy(recordId, holder);
  }
  override async trackedAmong(recordIds: readonly string[], holder: string): Promise<ReadonlySet<string>> {
    this.batchedReads++;
    return super.trackedAmong(recordIds, holder);
  }
}

describe('TaskClient against a raw Tasks fixture', () => {
  it('returns a plain result as is and declares the extension on that request only', async () => {
    const client = await harness.connect();
    const answer = await client.callTool('echo', { a: 1 }, { correlationId: 'c-1' });
    expect(isTaskHandle(answer)).toBe(false);
    expect(textOf(answer as CallToolResult)).toBe('{"a":1}');

    const discover = harness.fixture.requests.find((request) => request.method === 'server/discover');
    const call = harness.fixture.requests.find((request) => request.method === 'tools/call');
    expect(JSON.stringify(discover?.params)).not.toContain(TASKS);
    expect((call?.params['_meta'] as Record<string, { extensions: object }>)[CAPS]?.extensions).toEqual({
      [TASKS]: {},
    });
    expect(call?.headers.mcpName).toBe('echo');
    const [record] = await client.list({ correlationId: 'c-1' });
    expect(record).toMatchObject({ localState: 'terminal', terminalReason: 'immediate result', taskId: undefined });
  });

  it('returns the result directly from a server without Tasks support', async () => {
    const plain = await startTasksFixture({ noTasks: true });
    try {
      const client = await harness.connect({}, plain.url);
      const answer = await client.callTool('slow', { n: 1 });
      expect(isTaskHandle(answer)).toBe(false);
    } finally {
      await plain.close();
    }
  });

  it('commits the taskId before handing out the handle, follows changing intervals and stops at the end', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'slow', { city: 'Oslo' }, { correlationId: 'order-7' });
    const saved = await client.get(handle.taskId);
    expect(saved).toMatchObject({ taskId: handle.taskId, localState: 'tracking', correlationId: 'order-7' });

    const result = await handle.result();
    expect(textOf(result)).toBe('slow done: {"city":"Oslo"}');
    const gets = harness.fixture.count('tasks/get');
    expect(gets).toBe(4);
    await sleep(150);
    expect(harness.fixture.count('tasks/get')).toBe(gets); // no tail polls (S7)

    for (const request of harness.fixture.requests.filter((r) => r.method === 'tasks/get')) {
      expect(request.headers.mcpName).toBe(handle.taskId);
      expect(JSON.stringify(request.params['_meta'])).toContain(TASKS);
    }
    const record = await client.get(handle.taskId);
    expect(record).toMatchObject({ localState: 'terminal', status: 'completed', pollIntervalMs: 5 });
    expect(record?.lastPollAt).toBeGreaterThan(0);
    const history = await client.history(handle.taskId);
    expect(history.map((entry) => entry.status ?? null)).toEqual([null, 'working', 'completed']);
  });

  it('tells onChange listeners of each observed change until they unsubscribe', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'slow', { city: 'Bergen' });
    const seen: string[] = [];
    const unsubscribed: string[] = [];
    handle.onChange((record) => seen.push(`${record.localState}/${record.status}`));
    const stop = handle.onChange((record) => unsubscribed.push(`${record.localState}/${record.status}`));
    stop();
    await handle.result();
    expect(seen.at(-1)).toBe('terminal/completed');
    expect(unsubscribed).toEqual([]);
  });

  it('closes out a task whose ttlMs is null', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'unlimited');
    await handle.result();
    expect((await client.get(handle.taskId))?.ttlMs).toBeNull();
  });

  it('fetches the result of a task that was already completed when created', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'born-done');
    expect(handle.status).toBe('completed');
    expect(handle.localState).toBe('tracking'); // the result is not in a CreateTaskResult: one tasks/get fetches it
    expect(textOf(await handle.result())).toBe('born-done done');
    expect(harness.fixture.count('tasks/get')).toBe(1);
  });

  it('hands each input key to a handler once, across rounds and partial answers', async () => {
    const asked: string[] = [];
    const handlers: TaskInputHandlers = {
      elicitation: async (request, context) => {
        asked.push(context.key);
        await sleep(60); // a person thinking while polls continue
        const content: Record<string, string> = context.key === 'name' ? { name: 'Luca' } : {};
        return { action: 'accept', content };
      },
      roots: (_request, context) => {
        asked.push(context.key);
        return { roots: [{ uri: 'file:///work', name: 'work' }] };
      },
    };
    const client = await harness.connect({ inputHandlers: handlers });
    const handle = await task(client, 'ask');
    const result = await handle.result();
    expect(result.structuredContent).toEqual({
      answers: {
        name: { action: 'accept', content: { name: 'Luca' } },
        confirm: { action: 'accept', content: {} },
        roots: { roots: [{ uri: 'file:///work', name: 'work' }] },
      },
    });
    expect(asked.sort()).toEqual(['confirm', 'name', 'roots']);
    const updates = harness.fixture.requests.filter((request) => request.method === 'tasks/update');
    expect(updates.every((request) => request.headers.mcpName === handle.taskId)).toBe(true);
    const record = await client.get(handle.taskId);
    expect(record?.inputs.map((input) => [input.key, input.sentAt !== undefined])).toEqual([
      ['name', true],
      ['confirm', true],
      ['roots', true],
    ]);
    // the call declared what the handlers can answer
    const call = harness.fixture.requests.find((request) => request.method === 'tools/call');
    expect((call?.params['_meta'] as Record<string, object>)[CAPS]).toMatchObject({ elicitation: {}, roots: {} });
  });

  it('marks a task purged early (-32602) as expired and stops polling', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'purged');
    const outcome = await handle.outcome();
    expect(outcome).toMatchObject({ kind: 'expired', reason: expect.stringMatching(/-32602.*Task has expired/) });
    await expect(handle.result()).rejects.toMatchObject({ code: 'expired' });
    const gets = harness.fixture.count('tasks/get');
    await sleep(100);
    expect(harness.fixture.count('tasks/get')).toBe(gets);
    expect((await client.get(handle.taskId))?.localState).toBe('expired');
  });

  it('marks a task still working after its ttlMs, by the client’s own clock, as expired (S13)', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'expiring');
    const outcome = await handle.outcome();
    expect(outcome).toMatchObject({
      kind: 'expired',
      reason: expect.stringMatching(/ttlMs \(150 ms\) passed by this client's own clock/),
    });
    // measured from when the client first saw the handle, and kept in the ledger
    expect((await client.get(handle.taskId))?.observedAgeMs).toBeGreaterThanOrEqual(150);
    expect(harness.fixture.runs.get('expiring')).toBe(1); // never resubmitted on its own
  });

  it('rejects result() of a failed task with its JSON-RPC error', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'failing');
    await expect(handle.result()).rejects.toMatchObject({ code: 'failed', error: { code: -32603, message: 'boom' } });
    expect(await client.get(handle.taskId)).toMatchObject({
      localState: 'terminal',
      status: 'failed',
      terminalReason: 'task failed: -32603 boom',
    });
  });

  it('cancels cooperatively and follows the task to its end', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'cancellable');
    await sleep(50);
    await handle.cancel();
    expect(await handle.outcome()).toMatchObject({ kind: 'cancelled' });
    const cancel = harness.fixture.requests.find((request) => request.method === 'tasks/cancel');
    expect(cancel?.headers.mcpName).toBe(handle.taskId);
    expect((await client.get(handle.taskId))?.cancelRequestedAt).toBeGreaterThan(0);
  });

  it('sends one tools/call per idempotency key and returns the same handle', async () => {
    const client = await harness.connect();
    const [a, b] = await Promise.all([
      client.callTool('slow', { x: 1 }, { idempotencyKey: 'job-1' }),
      client.callTool('slow', { x: 1 }, { idempotencyKey: 'job-1' }),
    ]);
    const c = await client.callTool('slow', { x: 1 }, { idempotencyKey: 'job-1' });
    expect(a).toBe(b);
    expect(c).toBe(a);
    expect(harness.fixture.count('tools/call')).toBe(1);
    const call = harness.fixture.requests.find((request) => request.method === 'tools/call');
    // the key on the wire is derived from job-1 with the ledger's secret: nobody without the ledger can guess it
    const wireKey = (call?.params['_meta'] as Record<string, unknown>)['io.closeout/idempotencyKey'];
    expect(wireKey).toBe((await client.get('job-1'))?.wireIdempotencyKey);
    expect(wireKey).toMatch(/^ck1\.[\w-]{43}$/);
    await expect(client.callTool('slow', { x: 2 }, { idempotencyKey: 'job-1' })).rejects.toMatchObject({
      code: 'idempotency-conflict',
    });
    await (a as TaskHandle).result();
    // a closed-out key gives back the same outcome, still without sending
    const again = await client.callTool('slow', { x: 1 }, { idempotencyKey: 'job-1' });
    expect(textOf(await (again as TaskHandle).result())).toBe('slow done: {"x":1}');
    expect(harness.fixture.count('tools/call')).toBe(1);
  });

  it('records transport failures, honours Retry-After and still closes the task out', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'slow');
    harness.fixture.faults.push({ method: 'tasks/get', status: 503, retryAfter: '1' });
    harness.fixture.faults.push({ method: 'tasks/get', destroy: true });
    harness.fixture.faults.push({ method: 'tasks/get', status: 500 });
    const result = await handle.result();
    expect(textOf(result)).toMatch(/slow done/);
    const record = await client.get(handle.taskId);
    expect(record?.lastError).toMatchObject({ kind: 'transport' });
    const gets = harness.fixture.requests.filter((request) => request.method === 'tasks/get');
    expect(gets.length).toBe(4 + 3);
    expect(record?.status).toBe('completed');
  });

  it('waits at least Retry-After after a 429', async () => {
    const client = await harness.connect();
    const handle = await task(client, 'unlimited');
    harness.fixture.faults.push({ method: 'tasks/get', status: 429, retryAfter: '1' });
    const started = Date.now();
    await handle.result();
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    expect((await client.get(handle.taskId))?.lastError).toMatchObject({ kind: 'transport', code: 429 });
  });

  it('records a JSON-RPC error from tools/call and rethrows it', async () => {
    const client = await harness.connect();
    await expect(client.callTool('invalid-tool')).rejects.toMatchObject({ code: -32602 });
    const [record] = await client.list({ toolName: 'invalid-tool' });
    expect(record).toMatchObject({ localState: 'terminal', error: { code: -32602 } });
  });
});

describe('TaskClient submissions without an answer', () => {
  it('turns an aborted wait into unknown-outcome: the task may exist, nothing is re-sent unless called again', async () => {
    const client = await harness.connect();
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('the user gave up')), 50);
    const error = await client
      .callTool('slow-answer', {}, { idempotencyKey: 'k-abort', signal: controller.signal })
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'unknown-outcome' });
    await sleep(500);
    expect(harness.fixture.tasks.size).toBe(1); // the server did create it
    expect(await client.get('k-abort')).toMatchObject({ localState: 'unknown-outcome', taskId: undefined });
    expect(harness.fixture.count('tools/call')).toBe(1);
    // calling again with the same key and arguments is deliberate: sent again with the key
    const again = await client.callTool('slow-answer', {}, { idempotencyKey: 'k-abort' });
    expect(isTaskHandle(again)).toBe(true);
    const keys = harness.fixture.requests
      .filter((request) => request.method === 'tools/call')
      .map((request) => (request.params['_meta'] as Record<string, unknown>)['io.closeout/idempotencyKey']);
    // the same key both times, as sent on the wire: derived from 'k-abort' with the ledger's secret
    expect(keys).toHaveLength(2);
    expect(keys[0]).toMatch(/^ck1\./);
    expect(keys[1]).toBe(keys[0]);
  });

  it('records a refused connection as unknown-outcome with the reason', async () => {
    const client = await harness.connect();
    await harness.fixture.close();
    const error = await client.callTool('slow').catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'unknown-outcome' });
    const [record] = await client.list({ toolName: 'slow' });
    expect(record).toMatchObject({ localState: 'unknown-outcome', lastError: { kind: 'transport' } });
    expect(record?.terminalReason).toMatch(/connection refused|fetch failed/);
  });
});

describe('TaskClient on an SDK client the application connected itself', () => {
  it('instruments the connected transport on first use and keeps its lease alive while following', async () => {
    const sdk = new Client({ name: 'app', version: '1.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await sdk.connect(new StreamableHTTPClientTransport(harness.fixture.url));
    const ledger = new SqliteLedger(harness.ledgerPath);
    const client = new TaskClient({
      client: sdk,
      ledger,
      endpoint: harness.fixture.url.href,
      leaseMs: 300,
      pollPolicy: FAST,
      ownsClient: true,
      ownsLedger: true,
    });
    harness.track(client);
    const handle = await task(client, 'cancellable');
    await sleep(1_000); // three lease lengths: renewal must have kept it
    const other = await harness.connect();
    expect((await other.resumeAll()).leasedElsewhere.map((record) => record.taskId)).toEqual([handle.taskId]);
    const record = await client.get(handle.taskId);
    expect(record?.leaseHolder).toBe(client.leaseHolder);
    expect(record?.nextPollAt).toBeGreaterThan(Date.now() - 1_000);
    await handle.cancel();
    expect(await handle.outcome()).toMatchObject({ kind: 'cancelled' });
  });
});

describe('TaskClient against a misbehaving server', () => {
  it('records an unknown resultType on tools/call as bad output, and other tasks carry on', async () => {
    const client = await harness.connect();
    const healthy = await task(client, 'slow');
    const bad = await client.callTool('bad-resulttype').catch((error: unknown) => error);
    expect(bad).toBeInstanceOf(TaskClientError);
    expect(bad).toMatchObject({ code: 'bad-server-output' });
    const [record] = await client.list({ toolName: 'bad-resulttype' });
    expect(record).toMatchObject({ localState: 'unknown-outcome', lastError: { kind: 'server-output' } });
    expect(record?.lastError?.message).toMatch(/banana/);
    expect(textOf(await healthy.result())).toMatch(/slow done/);
  });

  it('records a CreateTaskResult without taskId as bad output', async () => {
    const client = await harness.connect();
    await expect(client.callTool('bad-create')).rejects.toMatchObject({
      code: 'bad-server-output',
      message: expect.stringMatching(/taskId/),
    });
  });

  const badGets = [
    ['get-bad-resulttype', /banana/],
    ['get-mismatch', /answered with taskId someone-elses-task/],
    ['get-missing-fields', /not a valid task/],
  ] as const;

  it.each(badGets)('records %s on the record and still closes the task out', async (tool, message) => {
    const client = await harness.connect();
    const other = await task(client, 'unlimited');
    const handle = await task(client, tool);
    const result = await handle.result();
    expect(textOf(result)).toBe(`${tool} done`);
    const record = await client.get(handle.taskId);
    expect(record?.lastError?.kind).toBe('server-output');
    expect(record?.lastError?.message).toMatch(message);
    expect(record?.status).toBe('completed');
    await other.result();
    expect((await client.get(other.taskId))?.lastError).toBeUndefined();
  });

  it.each(badGets)('records %s when the poll fast path is already in use', async (tool, message) => {
    // another task polled to its end first: the SDK's poll taught the fast path, so this task's polls take it
    const client = await harness.connect();
    await (await task(client, 'unlimited')).result();
    const handle = await task(client, tool);
    expect(textOf(await handle.result())).toBe(`${tool} done`);
    expect((await client.get(handle.taskId))?.lastError).toMatchObject({ kind: 'server-output', message });
  });

  it('takes an answer whose lastUpdatedAt is earlier than the last one (a server clock stepped back)', async () => {
    // invariant (docs/DESIGN.md rule 2): no order is taken from the server's timestamps; the terminal answer closes out
    const client = await harness.connect();
    const handle = await task(client, 'backwards');
    expect(textOf(await handle.result())).toBe('backwards done');
    expect((await client.get(handle.taskId))?.lastError).toBeUndefined();
  });

  it.each([
    ['after-terminal', /went backwards: terminal completed -> working/],
    ['changes-terminal', /changed after terminal: completed -> failed/],
  ])('keeps a terminal record as it was when the server later says otherwise (%s)', async (tool, message) => {
    const client = await harness.connect();
    const handle = await task(client, tool);
    const result = await handle.result();
    const record = await client.refresh(handle.taskId);
    expect(record).toMatchObject({ localState: 'terminal', status: 'completed', result });
    expect(record.lastError?.message).toMatch(message);
  });
});

describe('TaskClient recovery', () => {
  it('sums the time each process saw a task open, so a restart never resets the TTL backstop', async () => {
    // invariant (docs/DESIGN.md rule 2): the age the backstop uses is the client's own, kept in the ledger across
    // processes
    const first = await harness.connect();
    const handle = await task(first, 'cancellable');
    const seen = async (client: TaskClient, atLeast: number) => {
      for (let i = 0; i < 200; i++) {
        const age = (await client.get(handle.taskId))?.observedAgeMs ?? 0;
        if (age >= atLeast) return age;
        await sleep(20);
      }
      throw new Error(`the task was never seen open for ${atLeast} ms`);
    };
    await seen(first, 200);
    await first.close();
    const reader = new SqliteLedger(harness.ledgerPath);
    const kept = (await reader.get(handle.recordId))?.observedAgeMs ?? 0;
    await reader.dispose();
    expect(kept).toBeGreaterThanOrEqual(200);

    const second = await harness.connect();
    await second.resumeAll();
    expect(await seen(second, kept + 100)).toBeGreaterThanOrEqual(kept + 100);
    await second.cancel(handle.taskId);
  });

  it('resumes an open task in a new client on the same ledger, querying it once first', async () => {
    const first = await harness.connect();
    const handle = await task(first, 'slow');
    await first.close();
    const getsBefore = harness.fixture.count('tasks/get');

    const second = await harness.connect();
    const report = await second.resumeAll();
    expect(report.resumed.map((resumed) => resumed.taskId)).toEqual([handle.taskId]);
    expect(textOf(await report.resumed[0]!.result())).toMatch(/slow done/);
    expect(harness.fixture.count('tasks/get')).toBeGreaterThan(getsBefore);
    expect(harness.fixture.runs.get('slow')).toBe(1);
  });

  it('re-queries a resumed task without reading its lease back, and reads it again from a third of a lease on', async () => {
    // the claim gave this process the lease for a whole lease (bench/RESULTS.md, section 22): the polls of the first
    // third need no read of it; later ones read it, so a lease lost anyway is still found at a poll
    const first = await harness.connect();
    const handle = await task(first, 'cancellable');
    await first.close();
    const ledger = new LeaseReadCounter(harness.ledgerPath);
    harness.defer(() => ledger.dispose());
    const second = await harness.connect({ ledger, leaseMs: 3_000 });
    const gets = () => harness.fixture.tasks.get(handle.taskId)!.gets;
    const before = gets();
    await second.resumeAll();
    const claimedAt = performance.now();
    // polled every 20 ms: several polls within the first 500 ms, none reading the lease
    await waitFor('three polls after the resume', () => (gets() >= before + 3 ? true : undefined));
    const readsInWindow = ledger.leaseReads;
    const pollsInWindow = gets() - before;
    const elapsed = performance.now() - claimedAt;
    await waitFor('a poll that reads the lease', () => (ledger.leaseReads > 0 ? true : undefined));
    const firstReadAfter = performance.now() - claimedAt;
    expect(elapsed).toBeLessThan(1_000); // the window is 1,000 ms: the reads above were all inside it
    expect({ readsInWindow, pollsInWindow: pollsInWindow >= 3 }).toEqual({ readsInWindow: 0, pollsInWindow: true });
    expect(firstReadAfter).toBeGreaterThanOrEqual(1_000);
    await second.cancel(handle.taskId);
  });

  it('leaves a resumed record another process took, at the first poll that reads the lease', async () => {
    // a lease lost within the window anyway (another host's clock far ahead) is found once the window ends, and no
    // write of this process lands on the record meanwhile: each is fenced by the holder
    const first = await harness.connect();
    const handle = await task(first, 'cancellable');
    await first.close();
    const second = await harness.connect({ leaseMs: 1_500, leaseHolder: 'second' });
    const { resumed } = await second.resumeAll();
    const outcome = outcomeCode(resumed[0]!);
    const thief = await takeFromSecond(handle.recordId);
    expect(await outcome).toBe('leased-elsewhere');
    expect(await thief.get(handle.recordId)).toMatchObject({ leaseHolder: 'thief', localState: 'tracking' });
  });

  it('reads the leases of the records that fall due together at once, and leaves one another process took', async () => {
    // past a claim's window, the polls of one wake-up share one read of their leases (bench/RESULTS.md, section 23)
    const first = await harness.connect();
    const handles: TaskHandle[] = [];
    for (let i = 0; i < 6; i += 1) handles.push(await task(first, 'cancellable'));
    await first.close();
    const ledger = new LeaseReadCounter(harness.ledgerPath);
    harness.defer(() => ledger.dispose());
    const second = await harness.connect({ ledger, leaseMs: 600, leaseHolder: 'second' });
    const { resumed } = await second.resumeAll();
    const gets = () => handles.reduce((n, handle) => n + harness.fixture.tasks.get(handle.taskId)!.gets, 0);
    const reads = () => ledger.leaseReads + ledger.batchedReads;
    await sleep(300); // past the claim's window (200 ms)
    const [pollsBefore, readsBefore] = [gets(), reads()];
    await waitFor('24 polls past the window', () => (gets() - pollsBefore >= 24 ? true : undefined));
    const polls = gets() - pollsBefore;
    expect(ledger.batchedReads).toBeGreaterThan(0);
    expect(reads() - readsBefore).toBeLessThanOrEqual(polls / 2); // one read a poll before
    // one record taken (a lease lost anyway): left at its next poll, by the read it shared
    const [taken, ...kept] = resumed as [TaskHandle, ...TaskHandle[]];
    const outcome = outcomeCode(taken);
    const thief = new SqliteLedger(harness.ledgerPath);
    harness.defer(() => thief.dispose());
    await thief.release(taken.recordId, 'second');
    expect(await thief.claim(taken.recordId, 'thief', Date.now() + 60_000, Date.now())).toBe(true);
    expect(await outcome).toBe('leased-elsewhere');
    for (const handle of kept) await second.cancel(handle.taskId);
    expect(await Promise.all(kept.map((handle) => handle.outcome()))).toEqual(
      kept.map(() => expect.objectContaining({ kind: 'cancelled' })),
    );
  });

  it('stops at once when the first query after resume finds the task terminal', async () => {
    const first = await harness.connect();
    const handle = await task(first, 'unlimited');
    await first.close();
    harness.fixture.tasks.get(handle.taskId)!.gets = 5; // it finished while nobody was looking
    const second = await harness.connect();
    const before = harness.fixture.count('tasks/get');
    const { resumed } = await second.resumeAll();
    await resumed[0]!.result();
    await sleep(100);
    expect(harness.fixture.count('tasks/get')).toBe(before + 1);
  });

  it('settles a lapsed submission of a holder it cannot prove dead only once it has seen the ledger healthy for a lease', async () => {
    const ledger = new SqliteLedger(harness.ledgerPath);
    await ledger.recordIntent({
      recordId: 'elsewhere',
      endpoint: harness.fixture.url.href,
      toolName: 'unlimited',
      arguments: {},
      argumentsDigest: argumentsDigest({}),
      submittedAt: Date.now() - 60_000,
      // a holder in another container or host: only its lease says whether it lives
      leaseHolder: 'worker-on-another-host',
      leaseExpiresAt: Date.now() - 30_000,
    });
    await ledger.markSent('elsewhere', 'worker-on-another-host', Date.now() - 59_000);
    await ledger.dispose();

    const closed: string[] = [];
    const client = await harness.connect({
      leaseMs: 600,
      onEvent: (event) => event.type === 'closed' && closed.push(event.record.recordId),
    });
    const startedAt = Date.now();
    const report = await client.resumeAll();
    expect(report.unknownOutcome).toEqual([]);
    expect(await client.get('elsewhere')).toMatchObject({ localState: 'submitting' });
    await waitFor('the submission to be settled', async () =>
      (await client.get('elsewhere'))?.localState === 'unknown-outcome' ? true : undefined,
    );
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(600);
    expect(closed).toContain('elsewhere');
    expect(harness.fixture.count('tools/call')).toBe(0);
  });

  it('surfaces a submission left unanswered as unknown-outcome and re-sends it only on resubmit', async () => {
    const deadProcess = deadHolderId();
    const ledger = new SqliteLedger(harness.ledgerPath);
    await ledger.recordIntent({
      recordId: 'lost',
      endpoint: harness.fixture.url.href,
      toolName: 'unlimited',
      arguments: {},
      argumentsDigest: argumentsDigest({}),
      idempotencyKey: 'job-9',
      submittedAt: Date.now() - 60_000,
      leaseHolder: deadProcess,
      leaseExpiresAt: Date.now() - 30_000,
    });
    await ledger.markSent('lost', deadProcess, Date.now() - 59_000);
    await ledger.dispose();

    const client = await harness.connect();
    const report = await client.resumeAll();
    expect(report.unknownOutcome.map((record) => record.recordId)).toEqual(['lost']);
    expect(harness.fixture.count('tools/call')).toBe(0);
    await expect(client.callTool('unlimited', { other: 1 }, { idempotencyKey: 'job-9' })).rejects.toMatchObject({
      code: 'idempotency-conflict',
    });
    expect(harness.fixture.count('tools/call')).toBe(0);

    const handle = (await client.resubmit('job-9')) as TaskHandle;
    await handle.result();
    expect(harness.fixture.count('tools/call')).toBe(1);
    const call = harness.fixture.requests.find((request) => request.method === 'tools/call');
    expect((call?.params['_meta'] as Record<string, unknown>)['io.closeout/idempotencyKey']).toBe('job-9');
    expect(await client.get('lost')).toMatchObject({ supersededBy: handle.recordId });
    expect(await client.get(handle.taskId)).toMatchObject({ resubmittedFrom: 'lost' });
  });

  it('re-sends a stored input answer after a restart instead of asking again', async () => {
    const { handle, asked } = await answeredNeverSent();

    const seen: string[] = [];
    const second = await harness.connect({
      inputHandlers: {
        elicitation: (_request, context) => {
          seen.push(context.key);
          return { action: 'accept', content: {} };
        },
        roots: () => ({ roots: [] }),
      },
    });
    const { resumed } = await second.resumeAll();
    await resumed[0]!.result();
    expect(asked()).toBe(1);
    expect(seen).toEqual(['confirm']); // name was answered from the ledger
    expect(harness.fixture.tasks.get(handle.taskId)?.answers['name']).toEqual({ action: 'accept', content: {} });
  });

  it('sends no stored answer for a resumed record another process took before its first poll', async () => {
    // that poll reads no lease (the first third after a claim); the record read before routing does, and only the
    // record's holder sends stored answers
    const { handle } = await answeredNeverSent();
    const updatesBefore = harness.fixture.count('tasks/update');

    const second = await harness.connect({ leaseHolder: 'second', leaseMs: 3_000 });
    const { resumed } = await second.resumeAll();
    const outcome = outcomeCode(resumed[0]!);
    // no timer has fired since the claim (nothing below waits on one): the first poll is still to come
    const thief = await takeFromSecond(handle.recordId);
    expect(await outcome).toBe('leased-elsewhere');
    expect(harness.fixture.count('tasks/update')).toBe(updatesBefore);
    expect(harness.fixture.tasks.get(handle.taskId)?.answers['name']).toBeUndefined();
    expect((await thief.get(handle.recordId))!.inputs[0]).toMatchObject({ key: 'name', sentAt: undefined });
  });

  it('leaves a record another process took, not closed, when its first poll after the claim finds the task gone', async () => {
    // -32602 closes a record out as expired, but only its holder's: a refused close-out is no 'closed' event
    const first = await harness.connect();
    const handle = await task(first, 'cancellable');
    await first.close();
    const closed: string[] = [];
    const second = await harness.connect({
      leaseHolder: 'second',
      leaseMs: 3_000,
      onEvent: (event) => {
        if (event.type === 'closed') closed.push(event.record.localState);
      },
    });
    const { resumed } = await second.resumeAll();
    const outcome = outcomeCode(resumed[0]!);
    const thief = await takeFromSecond(handle.recordId);
    harness.fixture.tasks.get(handle.taskId)!.purged = true;
    expect(await outcome).toBe('leased-elsewhere');
    expect(closed).toEqual([]);
    expect(await thief.get(handle.recordId)).toMatchObject({ leaseHolder: 'thief', localState: 'tracking' });
  });

  it('lets one process drive a task; another sees it leased and can take over after a detach', async () => {
    const first = await harness.connect();
    const second = await harness.connect();
    const handle = await task(first, 'cancellable');
    const report = await second.resumeAll();
    expect(report.leasedElsewhere.map((record) => record.taskId)).toEqual([handle.taskId]);
    await expect(second.attach(handle.taskId)).rejects.toMatchObject({ code: 'leased-elsewhere' });

    await handle.detach();
    expect(await handle.outcome()).toMatchObject({ kind: 'detached' });
    const getsAfterDetach = harness.fixture.count('tasks/get');
    const taken = await second.attach(handle.taskId);
    await second.cancel(handle.taskId);
    expect(await taken.outcome()).toMatchObject({ kind: 'cancelled' });
    expect(harness.fixture.count('tasks/get')).toBeGreaterThan(getsAfterDetach);
  });
});
