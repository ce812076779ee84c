// Push over real HTTP on SQLite (the server half): `subscriptions/listen` with `notifications.taskIds`
// agrees only to the caller's own tasks, refuses precisely (-32021 without the extension, each limit by name), sends a
// `notifications/tasks` per change whose body is what tasks/get answers, misses no change made while the stream
// opened, survives consumers that die or stop reading, ends its streams gracefully on close, and changes nothing for a
// client that never subscribes.
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterEach, describe, expect, it } from 'vitest';

import { serveTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import type { TaskServerOptions } from '../../src/server/taskServerOptions.js';
import { type JsonRpcMessage, listen, taskNotification, withoutMeta } from '../support/listen.js';
import { PROTOCOL_VERSION, rpc, TASKS } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const tokens = { [ALICE]: 'alice', [BOB]: 'bob' };
const SUBSCRIPTION_ID = 'io.modelcontextprotocol/subscriptionId';

let server: TestServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** Tools: `done` finishes at once; `asks` asks for input, then finishes with the answer; `chatty` reports progress. */
function register(tasks: TaskServer): void {
  const task = { support: 'required', pollIntervalMs: 1000 } as const;
  tasks.registerTool('done', { task }, () => ({ content: [{ type: 'text', text: 'done at once' }] }));
  tasks.registerTool('asks', { task }, async (_args, ctx) => {
    const answer = await ctx.input('name', {
      method: 'elicitation/create',
      params: { mode: 'form', message: 'Your name?', requestedSchema: { type: 'object', properties: {} } },
    });
    return { content: [{ type: 'text', text: JSON.stringify(answer) }] };
  });
  tasks.registerTool('chatty', { task }, async (args, ctx) => {
    const count = Number(args['count']);
    const size = Number(args['size']);
    for (let i = 0; i < count && !ctx.signal.aborted; i++) await ctx.status(`${i} ${'x'.repeat(size)}`);
    return { content: [] };
  });
  // once told to go, large status messages until cancelled (bounded)
  tasks.registerTool('loud', { task }, async (_args, ctx) => {
    await ctx.input('go', {
      method: 'elicitation/create',
      params: { mode: 'form', message: 'Go?', requestedSchema: { type: 'object', properties: {} } },
    });
    const big = 'x'.repeat(64 * 1024);
    for (let i = 0; i < 5000 && !ctx.signal.aborted; i++) {
      await ctx.status(`${i} ${big}`);
      // SQLite answers synchronously: without a turn of the event loop this loop would starve every request
      await new Promise((resolve) => setImmediate(resolve));
    }
    return { content: [] };
  });
}

async function start(server?: Partial<TaskServerOptions>): Promise<TestServer> {
  return startTestServer(register, {
    server: { ...server, push: { checkIntervalMs: 60_000, ...server?.push } },
    serve: { tokens },
  });
}

async function create(url: string, tool: string, token = ALICE, args: Record<string, unknown> = {}): Promise<string> {
  const created = await rpc(
    url,
    'tools/call',
    { name: tool, arguments: args },
    { token, capabilities: { elicitation: {} } },
  );
  const taskId = created.result?.['taskId'];
  if (typeof taskId !== 'string') throw new Error(`no task created: ${JSON.stringify(created)}`);
  return taskId;
}

/** What tasks/get answers now, without the response's own stamps (resultType, _meta). */
async function getTask(url: string, taskId: string, token = ALICE): Promise<Record<string, unknown>> {
  const answer = await rpc(url, 'tasks/get', { taskId }, { token });
  const { resultType: _resultType, _meta: _meta, ...task } = answer.result ?? {};
  return task;
}

const isAck = (message: JsonRpcMessage) => message.method === 'notifications/subscriptions/acknowledged';

describe('subscriptions/listen with notifications.taskIds', () => {
  it("acknowledges the caller's own tasks only, another principal's and unknown ids silently left out", async () => {
    server = await start();
    const mine = await create(server.url, 'asks');
    const bobs = await create(server.url, 'asks', BOB);
    const stream = await listen(server.url, [mine, bobs, 'no-such-task', mine], { token: ALICE, id: 'sub-1' });
    expect(stream.httpStatus).toBe(200);
    const ack = await stream.next(() => true);
    expect(ack).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/subscriptions/acknowledged',
      params: { _meta: { [SUBSCRIPTION_ID]: 'sub-1' }, notifications: { taskIds: [mine] } },
    });
    // nothing is ever said about bob's task on alice's stream
    await stream.next(taskNotification(mine, 'input_required'));
    expect(stream.messages.some(taskNotification(bobs))).toBe(false);
    stream.abort();
  });

  it("reads a change as the task's owner: another principal listening on its id takes it from no owner's streams", async () => {
    // the store a few hundred milliseconds away for the reads a listen makes to learn whose its tasks are, so that
    // bob's listen naming alice's task is still being checked while the task changes
    const dir = mkdtempSync(join(tmpdir(), 'closeout-push-isolation-'));
    const store = new SqliteTaskStore(join(dir, 'tasks.db'));
    const slow = new Proxy(store, {
      get(target, property) {
        const value: unknown = Reflect.get(target, property, target);
        if (typeof value !== 'function') return value;
        const method = value as (...args: unknown[]) => unknown;
        if (property !== 'getMany' && property !== 'taskOwners') return method.bind(target);
        return async (...args: unknown[]) => {
          await new Promise((resolve) => setTimeout(resolve, 300));
          return method.apply(target, args);
        };
      },
    });
    const tasks = new TaskServer({ store: slow, push: { checkIntervalMs: 60_000 } });
    tasks.registerTool('ticks', { task: { support: 'required' } }, async (_args, ctx) => {
      for (let i = 0; i < 20; i++) {
        await ctx.status(`tick ${i}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      return { content: [{ type: 'text', text: 'done' }] };
    });
    const serving = await serveTaskServer(tasks, { port: 0, tokens });
    try {
      const alices = await create(serving.url, 'ticks');
      const bobListens = listen(serving.url, [alices, 'no-such-task'], { token: BOB });
      await new Promise((resolve) => setTimeout(resolve, 50));
      const alice = await listen(serving.url, [alices], { token: ALICE });
      const bob = await bobListens;
      expect((await bob.next(isAck)).params?.['notifications']).toEqual({ taskIds: [] });
      expect((await alice.next(isAck)).params?.['notifications']).toEqual({ taskIds: [alices] });
      // alice follows her task to its end, whatever bob's listen did meanwhile
      await alice.next(taskNotification(alices, 'completed'), 0, 15_000);
      expect(bob.messages.some(taskNotification(alices))).toBe(false);
      alice.abort();
    } finally {
      await serving.close();
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('ends at once, gracefully, when no id is agreed to', async () => {
    server = await start();
    const bobs = await create(server.url, 'asks', BOB);
    const stream = await listen(server.url, [bobs], { token: ALICE, id: 7 });
    await stream.closed();
    expect(stream.messages.map((m) => m.method ?? m.result)).toEqual([
      'notifications/subscriptions/acknowledged',
      expect.objectContaining({ resultType: 'complete', _meta: expect.objectContaining({ [SUBSCRIPTION_ID]: 7 }) }),
    ]);
    expect(stream.messages[0]?.params?.['notifications']).toEqual({ taskIds: [] });
  });

  it('answers -32021 naming the extension when the request did not declare it', async () => {
    server = await start();
    const mine = await create(server.url, 'asks');
    const stream = await listen(server.url, [mine], { token: ALICE, declareTasks: false, id: 3 });
    await stream.closed();
    expect(stream.messages).toEqual([
      expect.objectContaining({
        id: 3,
        error: expect.objectContaining({
          code: -32021,
          data: { requiredCapabilities: { extensions: { [TASKS]: {} } } },
        }),
      }),
    ]);
  });

  it('leaves the SDK’s refusal of a malformed request as it is (the SDK checks it before push serves it)', async () => {
    server = await start();
    const mine = await create(server.url, 'asks');
    const stream = await listen(server.url, [mine], { token: ALICE, headers: { 'mcp-method': 'tools/list' } });
    await stream.closed();
    expect(stream.httpStatus).toBe(400);
    expect(stream.messages[0]?.error?.code).toBe(-32020);
    expect(server.tasks.push.stats()).toEqual({ streams: 0, taskIds: 0 });
  });

  it('is not served to a 2025-era request, where subscriptions/listen does not exist', async () => {
    server = await start();
    const mine = await create(server.url, 'asks');
    const response = await fetch(server.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2025-11-25',
        authorization: `Bearer ${ALICE}`,
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'subscriptions/listen',
        params: { notifications: { taskIds: [mine] } },
      }),
    });
    const text = await response.text();
    expect(text).not.toContain('notifications/subscriptions/acknowledged');
    expect(text).toContain('"error"');
    expect(server.tasks.push.stats()).toEqual({ streams: 0, taskIds: 0 });
  });

  it('answers -32602 for task ids that are not strings', async () => {
    server = await start();
    const stream = await listen(server.url, ['ok', 42], { token: ALICE });
    await stream.closed();
    expect(stream.messages[0]?.error).toMatchObject({ code: -32602, message: expect.stringContaining('taskIds[1]') });
  });

  it('refuses streams and ids over the per-principal limits, each refusal naming its limit', async () => {
    server = await start({ maxListenStreamsPerPrincipal: 1, maxSubscribedTasksPerPrincipal: 2 });
    const [a, b, c] = [
      await create(server.url, 'asks'),
      await create(server.url, 'asks'),
      await create(server.url, 'asks'),
    ];
    // more ids than any caller may follow: the request's own mistake
    const tooMany = await listen(server.url, [a, b, c], { token: ALICE });
    await tooMany.closed();
    expect(tooMany.messages[0]?.error).toMatchObject({
      code: -32602,
      message: expect.stringContaining('maxSubscribedTasksPerPrincipal'),
      data: { limit: 'maxSubscribedTasksPerPrincipal', max: 2 },
    });
    const first = await listen(server.url, [a, b], { token: ALICE });
    await first.next(isAck);
    const second = await listen(server.url, [c], { token: ALICE });
    await second.closed();
    expect(second.messages[0]?.error).toMatchObject({
      code: -32603,
      message: expect.stringContaining('maxListenStreamsPerPrincipal'),
      data: { limit: 'maxListenStreamsPerPrincipal', max: 1 },
    });
    // the limits are per principal: bob is not refused for alice's streams
    const bobs = await create(server.url, 'asks', BOB);
    const bob = await listen(server.url, [bobs], { token: BOB });
    expect((await bob.next(isAck)).params?.['notifications']).toEqual({ taskIds: [bobs] });
    // a closed stream frees its place
    first.abort();
    await waitFor('alice’s stream to be forgotten', () =>
      server!.tasks.push.stats().streams === 1 ? true : undefined,
    );
    const again = await listen(server.url, [c], { token: ALICE });
    expect((await again.next(isAck)).params?.['notifications']).toEqual({ taskIds: [c] });
    bob.abort();
    again.abort();
  });

  it('refuses ids over the limit with what the caller follows already as a limit to wait out (-32603)', async () => {
    server = await start({ maxListenStreamsPerPrincipal: 4, maxSubscribedTasksPerPrincipal: 2 });
    const [a, b, c] = [
      await create(server.url, 'asks'),
      await create(server.url, 'asks'),
      await create(server.url, 'asks'),
    ];
    const first = await listen(server.url, [a, b], { token: ALICE });
    await first.next(isAck);
    const second = await listen(server.url, [c], { token: ALICE });
    await second.closed();
    expect(second.messages[0]?.error).toMatchObject({
      code: -32603,
      message: expect.stringContaining('this caller follows 2 tasks and asked for 1 more'),
      data: { limit: 'maxSubscribedTasksPerPrincipal', max: 2 },
    });
    first.abort();
  });
});

describe('notifications/tasks', () => {
  it('goes out for every change, tagged with the subscription id, its body what tasks/get answers then', async () => {
    server = await start();
    const url = server.url;
    const taskId = await create(url, 'asks');
    const stream = await listen(url, [taskId], { token: ALICE, id: 'sub-x' });
    await stream.next(isAck);
    const asked = await stream.next(taskNotification(taskId, 'input_required'));
    expect(asked.params?._meta).toEqual({ [SUBSCRIPTION_ID]: 'sub-x' });
    expect(withoutMeta(asked.params)).toEqual(await getTask(url, taskId));

    const from = stream.messages.length;
    await rpc(
      url,
      'tasks/update',
      { taskId, inputResponses: { name: { action: 'accept', content: {} } } },
      { token: ALICE },
    );
    const completed = await stream.next(taskNotification(taskId, 'completed'), from);
    expect(withoutMeta(completed.params)).toEqual(await getTask(url, taskId));
    expect(completed.params?.['result']).toMatchObject({ content: [{ type: 'text', text: expect.any(String) }] });
    // the answer moved the task back to working before it completed: that change went out too, in order
    const statuses = stream.messages
      .slice(from)
      .filter(taskNotification(taskId))
      .map((m) => m.params?.['status']);
    expect(statuses.at(-1)).toBe('completed');
    expect(new Set(statuses)).toEqual(new Set(['working', 'completed']));
    stream.abort();
  });

  it('sends the terminal state of a task that finished before the stream opened (no gap)', async () => {
    server = await start();
    const taskId = await create(server.url, 'done');
    await waitFor('the task to complete', async () =>
      (await getTask(server!.url, taskId))['status'] === 'completed' ? true : undefined,
    );
    const stream = await listen(server.url, [taskId], { token: ALICE });
    expect(stream.messages.length === 0 || isAck(stream.messages[0]!)).toBe(true);
    const completed = await stream.next(taskNotification(taskId, 'completed'));
    expect(stream.messages.indexOf(completed)).toBe(1);
    expect(withoutMeta(completed.params)).toEqual(await getTask(server.url, taskId));
    stream.abort();
  });

  it('sends every status message of a chatty task, and a final state equal to tasks/get', async () => {
    server = await start();
    const taskId = await create(server.url, 'chatty', ALICE, { count: 1, size: 1 });
    const stream = await listen(server.url, [taskId], { token: ALICE });
    const done = await stream.next(taskNotification(taskId, 'completed'));
    expect(withoutMeta(done.params)).toEqual(await getTask(server.url, taskId));
    stream.abort();
  });
});

describe('consumers that go away', () => {
  it('a stream killed mid-way is forgotten and the server goes on serving other streams and requests', async () => {
    server = await start();
    const url = server.url;
    const first = await create(url, 'asks');
    const killed = await listen(url, [first], { token: ALICE });
    await killed.next(taskNotification(first, 'input_required'));
    killed.abort();
    await waitFor('the killed stream to be forgotten', () =>
      server!.tasks.push.stats().streams === 0 ? true : undefined,
    );
    const second = await create(url, 'asks');
    const other = await listen(url, [first, second], { token: ALICE });
    await other.next(taskNotification(second, 'input_required'));
    await rpc(
      url,
      'tasks/update',
      { taskId: first, inputResponses: { name: { action: 'decline' } } },
      { token: ALICE },
    );
    await other.next(taskNotification(first, 'completed'));
    expect((await getTask(url, first))['status']).toBe('completed');
    other.abort();
  });

  it('a consumer that stops reading loses its stream once its buffer is full; other streams do not wait', async () => {
    server = await start({ push: { bufferBytes: 256 * 1024 } });
    const url = server.url;
    const loud = await create(url, 'loud');
    // a raw TCP consumer that sends the request and then never reads a byte
    const stalled = await stalledListener(url, [loud]);
    await waitFor('the stalled stream to open', () => (server!.tasks.push.stats().streams === 1 ? true : undefined));
    const healthyTask = await create(url, 'asks');
    const healthy = await listen(url, [healthyTask], { token: ALICE });
    await healthy.next(taskNotification(healthyTask, 'input_required'));
    await rpc(
      url,
      'tasks/update',
      { taskId: loud, inputResponses: { go: { action: 'accept', content: {} } } },
      { token: ALICE },
    );
    // the loud task fills the stalled consumer's socket, then its buffer: the stream is cut, the healthy one lives
    await waitFor(
      'the stalled stream to be cut',
      () => (server!.tasks.push.stats().streams === 1 ? true : undefined),
      60_000,
      50,
    );
    // and its connection with it: once the consumer reads again, it finds the end of the connection
    stalled.resume();
    await waitFor('the stalled connection to be closed by the server', () => (stalled.destroyed ? true : undefined));
    await rpc(url, 'tasks/cancel', { taskId: loud }, { token: ALICE });
    await rpc(
      url,
      'tasks/update',
      { taskId: healthyTask, inputResponses: { name: { action: 'decline' } } },
      { token: ALICE },
    );
    await healthy.next(taskNotification(healthyTask, 'completed'));
    healthy.abort();
    stalled.destroy();
  });

  it('ends every stream gracefully on server close: the completion result, then the end of the stream', async () => {
    server = await start();
    const taskId = await create(server.url, 'asks');
    const stream = await listen(server.url, [taskId], { token: ALICE, id: 'closing' });
    await stream.next(taskNotification(taskId, 'input_required'));
    const closing = server.close();
    server = undefined;
    const result = await stream.next((m) => m.id === 'closing');
    expect(result).toMatchObject({
      jsonrpc: '2.0',
      id: 'closing',
      result: { resultType: 'complete', _meta: { [SUBSCRIPTION_ID]: 'closing' } },
    });
    await stream.closed();
    await closing;
  });
});

describe('a client that never subscribes', () => {
  it('creates, polls and completes its tasks as before, and the server holds no push state for it', async () => {
    server = await start();
    const taskId = await create(server.url, 'done');
    const done = await waitFor('the task to complete', async () => {
      const task = await getTask(server!.url, taskId);
      return task['status'] === 'completed' ? task : undefined;
    });
    expect(done['result']).toMatchObject({ content: [{ type: 'text', text: 'done at once' }] });
    expect(server.tasks.push.stats()).toEqual({ streams: 0, taskIds: 0 });
  });
});

/** Opens a listen over a raw socket that never reads what comes back. */
async function stalledListener(url: string, taskIds: string[]): Promise<Socket> {
  const { hostname, port, pathname } = new URL(url);
  const body = JSON.stringify({
    jsonrpc: '2.0',
    id: 'stalled',
    method: 'subscriptions/listen',
    params: {
      _meta: {
        'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
        'io.modelcontextprotocol/clientInfo': { name: 'stalled', version: '0' },
        'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } },
      },
      notifications: { taskIds },
    },
  });
  const socket = connect(Number(port), hostname);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  socket.on('error', () => {});
  socket.write(
    [
      `POST ${pathname} HTTP/1.1`,
      `host: ${hostname}:${port}`,
      'content-type: application/json',
      'accept: application/json, text/event-stream',
      `mcp-protocol-version: ${PROTOCOL_VERSION}`,
      'mcp-method: subscriptions/listen',
      `authorization: Bearer ${ALICE}`,
      `content-length: ${Buffer.byteLength(body)}`,
      '',
      body,
    ].join('\r\n'),
  );
  socket.pause();
  return socket;
}
