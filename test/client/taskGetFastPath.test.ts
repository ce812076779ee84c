// Invariant: a poll on the client's fast path (src/client/transport/taskGetFastPath.ts) reaches the server as the SDK's
// own tasks/get would, and whatever the server answers (valid, hostile, an error, an overload, a stream, a hang-up) the
// TaskClient's requests conclude exactly what they conclude through the SDK alone. Each answer is asked once on the
// fast path when the fast path decides it, and the SDK asks again only when it does not.
import { mkdtempSync, rmSync } from 'node:fs';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { Client, ProtocolError } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { DEFAULT_CLIENT_INFO, httpTaskTransport } from '../../src/client/connect.js';
import { ClientCore } from '../../src/client/core/clientCore.js';
import type { TaskQuery } from '../../src/client/following/taskRequests.js';
import { TaskRequests } from '../../src/client/following/taskRequests.js';
import { SqliteLedger } from '../../src/client/ledger/sqliteLedger.js';
import { attachTaskResultCarrier } from '../../src/client/transport/sdkGlue.js';
import { discoverResult } from '../support/jsonRpcFixture.js';
import { TASKS } from '../support/rpc.js';

const TASK_ID = 'u6Qp2bWm1xLk9sV3aZr0Tg';

/** An HTTP answer to one tasks/get, given the request's JSON-RPC id. */
type Answer = (id: unknown, res: ServerResponse) => void;

const json =
  (message: (id: unknown) => unknown, status = 200, headers: Record<string, string> = {}): Answer =>
  (id, res) =>
    res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(message(id)));
const sse =
  (body: (id: unknown) => string): Answer =>
  (id, res) =>
    res.writeHead(200, { 'content-type': 'text/event-stream' }).end(body(id));
const result = (value: unknown): Answer => json((id) => ({ jsonrpc: '2.0', id, result: value }));
const task = (fields: Record<string, unknown> = {}) => ({
  resultType: 'complete',
  taskId: TASK_ID,
  status: 'working',
  createdAt: '2026-12-01T10:00:00.000Z',
  lastUpdatedAt: '2026-12-01T10:00:01.000Z',
  ttlMs: 60_000,
  pollIntervalMs: 1_000,
  ...fields,
});

/** Every answer asked about: a name, the answer, and whether the fast path decides it (one request, not two). */
const ANSWERS: [string, Answer, boolean][] = [
  ['a working task', result(task()), true],
  [
    'a completed task with its result',
    result(task({ status: 'completed', result: { resultType: 'complete', content: [{ type: 'text', text: 'ok' }] } })),
    true,
  ],
  ['a failed task with its error', result(task({ status: 'failed', error: { code: -32603, message: 'boom' } })), true],
  [
    'an input_required task',
    result(
      task({
        status: 'input_required',
        inputRequests: { k: { method: 'elicitation/create', params: { message: 'name?', requestedSchema: {} } } },
      }),
    ),
    true,
  ],
  ['a task with _meta and members unknown here', result(task({ _meta: { a: 1 }, extra: [1, 2] })), true],
  ['another taskId', result(task({ taskId: 'someone-else' })), true],
  ['a status that does not exist', result(task({ status: 'sleeping' })), true],
  ['a negative ttlMs', result(task({ ttlMs: -5 })), true],
  ['no resultType', result({ ...task(), resultType: undefined }), false],
  ['resultType "task"', result(task({ resultType: 'task' })), false],
  ['resultType "input_required"', result(task({ resultType: 'input_required' })), false],
  ['a result that is an array', result([task()]), false],
  ['a result that is a string', result('working'), false],
  ['a result that is null', result(null), false],
  [
    'a JSON-RPC error -32602 with data',
    json((id) => ({
      jsonrpc: '2.0',
      id,
      error: { code: -32602, message: 'Task not found', data: { taskId: TASK_ID } },
    })),
    true,
  ],
  ['a JSON-RPC error -32603', json((id) => ({ jsonrpc: '2.0', id, error: { code: -32603, message: 'oops' } })), true],
  [
    'a JSON-RPC error on HTTP 400 (a header refusal)',
    json((id) => ({ jsonrpc: '2.0', id, error: { code: -32020, message: 'Mcp-Name mismatch' } }), 400),
    true,
  ],
  [
    'a JSON-RPC error whose code is a string',
    json((id) => ({ jsonrpc: '2.0', id, error: { code: 'x', message: 'm' } })),
    false,
  ],
  ['an answer to another id', json(() => ({ jsonrpc: '2.0', id: 'not-yours', result: task() })), false],
  ['jsonrpc "1.0"', json((id) => ({ jsonrpc: '1.0', id, result: task() })), false],
  [
    'a body that is not JSON',
    (_id, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc'),
    false,
  ],
  [
    'a JSON body sent as text/plain',
    (id, res) =>
      res.writeHead(200, { 'content-type': 'text/plain' }).end(JSON.stringify({ jsonrpc: '2.0', id, result: task() })),
    false,
  ],
  [
    'the result as a server-sent event',
    (id, res) =>
      res
        .writeHead(200, { 'content-type': 'text/event-stream' })
        .end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id, result: task() })}\n\n`),
    true,
  ],
  [
    'a stream: a priming event, then the result',
    sse((id) => `id: 1\ndata:\n\nevent: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id, result: task() })}\n\n`),
    true,
  ],
  [
    'a stream whose first message is a notification',
    sse(
      (id) =>
        `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } })}\n\n` +
        `data: ${JSON.stringify({ jsonrpc: '2.0', id, result: task() })}\n\n`,
    ),
    false,
  ],
  ['a stream that ends without a message', sse(() => ': nothing here\n\n'), false],
  ['a stream whose event is not JSON', sse(() => 'data: {"jsonrpc\n\n'), false],
  ['HTTP 429 with Retry-After', (_id, res) => res.writeHead(429, { 'retry-after': '3' }).end('slow down'), true],
  ['HTTP 503', (_id, res) => res.writeHead(503).end('unavailable'), true],
  ['HTTP 500', (_id, res) => res.writeHead(500, { 'content-type': 'text/plain' }).end('internal'), false],
  ['HTTP 404', (_id, res) => res.writeHead(404).end(), false],
  // dropped at its headers: the unread body's abort must not surface as an unhandled 'error' (the soak found it)
  [
    'HTTP 500 whose body never ends',
    (_id, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' }).write('partial');
      setTimeout(() => res.destroy(), 1_500).unref();
    },
    false,
  ],
  ['a connection hung up before any answer', (_id, res) => res.socket?.destroy(), true],
];

interface Received {
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
  /** The body as it came, byte for byte. */
  text: string;
}

let server: Server;
let url: URL;
let answer: Answer = result(task());
const received: Received[] = [];
const dir = mkdtempSync(join(tmpdir(), 'closeout-fast-path-'));
const sides: Record<'fast' | 'sdk', { requests: TaskRequests; close(): Promise<void> }> = {} as never;

async function side(name: 'fast' | 'sdk') {
  const { transport, fastPath } = httpTaskTransport(url, { pollFastPath: name === 'fast' });
  expect(fastPath !== undefined).toBe(name === 'fast');
  attachTaskResultCarrier(transport);
  const client = new Client(DEFAULT_CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  const ledger = new SqliteLedger(join(dir, `${name}.db`));
  const core = new ClientCore({
    client,
    ledger,
    endpoint: url.href,
    requestTimeoutMs: 1_000,
    ...(fastPath && { taskGetFastPath: fastPath }),
  });
  return {
    requests: new TaskRequests(core),
    close: async () => {
      await client.close();
      await ledger.dispose();
    },
  };
}

beforeAll(async () => {
  server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as { id?: unknown; method: string };
      if (body.id === undefined) return void res.writeHead(202).end();
      if (body.method === 'tasks/get') {
        received.push({ headers: req.headers, body, text });
        return answer(body.id, res);
      }
      const discover = discoverResult({ extensions: { [TASKS]: {} } }, { name: 'differential', version: '1.0.0' });
      const reply = body.method === 'server/discover' ? discover : { error: { code: -32601, message: 'no' } };
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: body.id, ...reply }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
  sides.fast = await side('fast');
  sides.sdk = await side('sdk');
  // the SDK's first poll is the fast path's template
  answer = result(task());
  expect((await sides.fast.requests.getTask(TASK_ID)).kind).toBe('task');
});

afterAll(async () => {
  await sides.fast?.close();
  await sides.sdk?.close();
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

/** What a TaskClient concludes from one poll: comparable across the two paths. */
function conclusion(requests: TaskRequests, query: TaskQuery): unknown {
  if (query.kind === 'task') return query.task;
  if (query.kind === 'bad-output') return { badOutput: query.error.message };
  const { at: _at, ...recorded } = requests.describeError('tasks/get', query.error);
  const error = query.error;
  return {
    recorded,
    type: (error as Error)?.constructor?.name,
    ...(error instanceof ProtocolError && { code: error.code, message: error.message, data: error.data }),
  };
}

/** One poll on a side: its conclusion and the tasks/get requests the server received for it. */
async function poll(name: 'fast' | 'sdk') {
  const before = received.length;
  const query = await sides[name].requests.getTask(TASK_ID, { taskId: TASK_ID, status: 'working' });
  return { conclusion: conclusion(sides[name].requests, query), sent: received.slice(before) };
}

/** The headers a request carries that either path chose (the connection's own are left out). */
function chosenHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const { host: _host, connection: _connection, 'content-length': _length, ...chosen } = headers;
  return chosen;
}

describe('the client poll fast path against the SDK alone', () => {
  it('sends the SDK own request: the same headers and the same body but for its JSON-RPC id', async () => {
    answer = result(task());
    const fast = await poll('fast');
    const sdk = await poll('sdk');
    expect(fast.sent).toHaveLength(1);
    expect(sdk.sent).toHaveLength(1);
    expect(String(fast.sent[0]!.body['id'])).toMatch(/^closeout-\d+$/);
    expect(chosenHeaders(fast.sent[0]!.headers)).toEqual(chosenHeaders(sdk.sent[0]!.headers));
    expect({ ...fast.sent[0]!.body, id: 0 }).toEqual({ ...sdk.sent[0]!.body, id: 0 });
    // the same bytes, members in the SDK's order, but for the id
    const withoutId = ({ text, body }: Received) => {
      const at = text.lastIndexOf('"id":');
      expect(text.slice(at)).toBe(`"id":${JSON.stringify(body['id'])}}`);
      return text.slice(0, at);
    };
    expect(withoutId(fast.sent[0]!)).toBe(withoutId(sdk.sent[0]!));
    expect(fast.sent[0]!.headers['mcp-name']).toBe(TASK_ID);
  });

  it.each(ANSWERS)('concludes the same from %s', async (_name, scripted, decided) => {
    // an answer the fast path does not decide leaves it off until the SDK's poll is answered with JSON again
    answer = result(task());
    await sides.fast.requests.getTask(TASK_ID);
    answer = scripted;
    const sdk = await poll('sdk');
    const fast = await poll('fast');
    expect(fast.conclusion).toEqual(sdk.conclusion);
    // decided on the fast path: asked once; else asked again through the SDK, which then decides
    expect(fast.sent).toHaveLength(decided ? 1 : 2);
    expect(sdk.sent).toHaveLength(1);
  });

  it('gives up on an answer that trickles in after the request timeout, as the SDK does', async () => {
    answer = (_id, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      const timer = setInterval(() => res.write(' '), 100);
      res.on('close', () => clearInterval(timer));
    };
    const started = performance.now();
    const fast = await poll('fast');
    expect(performance.now() - started).toBeLessThan(2_500);
    expect(fast.sent).toHaveLength(1);
    expect(fast.conclusion).toMatchObject({
      recorded: { kind: 'transport', message: expect.stringMatching(/timed out/) },
    });
    const sdk = await poll('sdk');
    expect(sdk.conclusion).toMatchObject({
      recorded: { kind: 'transport', message: expect.stringMatching(/timed out/i) },
    });
  });

  it('keeps the trace context and capabilities of each poll, and learns nothing from a request not its own', async () => {
    answer = result(task());
    await sides.fast.requests.getTask(TASK_ID);
    const before = received.length;
    const meta: Record<string, unknown> = {
      ...sides.fast.requests.tasksMeta(),
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
    };
    expect(meta['io.modelcontextprotocol/clientCapabilities']).toBeDefined();
    const core = (sides.fast.requests as unknown as { core: ClientCore }).core;
    const fastPath = core.options.taskGetFastPath!;
    expect(await fastPath.get(TASK_ID, meta, 2_000)).toMatchObject({ taskId: TASK_ID, status: 'working' });
    const sent = received.slice(before);
    expect(sent).toHaveLength(1);
    expect((sent[0]!.body['params'] as { _meta: Record<string, unknown> })._meta).toMatchObject(meta);
    // other capabilities than the ones the SDK's own poll carried, or a key it does not know: not sent this way
    const other = { 'io.modelcontextprotocol/clientCapabilities': { extensions: {} } };
    expect(await fastPath.get(TASK_ID, other, 2_000)).toBeUndefined();
    expect(await fastPath.get(TASK_ID, { ...meta, 'io.example/unknown': 1 }, 2_000)).toBeUndefined();
    expect(await fastPath.get('a taskId with spaces', meta, 2_000)).toBeUndefined();
    expect(received.length - before).toBe(1);
  });
});
