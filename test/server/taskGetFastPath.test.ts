// The tasks/get fast path (docs/server.md, "The `tasks/get` fast path") answers exactly as the SDK's path: the same
// requests, ordinary and hostile, sent to one TaskServer served twice (fast path on, fast path off) get the same HTTP
// status, the same headers that matter, the same body byte for byte, and the same telemetry spans; and the ordinary
// ones really take the fast path (no per-request SDK server is built for them), while everything unusual is handed to
// the SDK's path intact.
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { serveTaskServer, type ServingTaskServer } from '../../src/server/http.js';
import { SqliteTaskStore } from '../../src/server/store/sqliteTaskStore.js';
import { TaskServer } from '../../src/server/taskServer.js';
import { rpc, TASKS, wireRequest } from '../support/rpc.js';
import { waitFor } from '../support/waitFor.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const TOKENS = { [ALICE]: 'alice', [BOB]: 'bob' };
const CALLER_TRACE = '0af7651916cd43dd8448eb211c80319c';

interface Exchange {
  method?: 'POST' | 'GET' | 'DELETE';
  headers: Record<string, string>;
  body?: string | Buffer;
  /** Send the body without a content-length (chunked). */
  chunked?: boolean;
}

interface Answer {
  status: number;
  /** The headers a client acts on; framing (date, length, chunking, keep-alive) is the HTTP server's, not ours. */
  headers: Record<string, string>;
  body: string;
}

const FRAMING = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length']);

function send(url: string, exchange: Exchange): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...exchange.headers };
    if (exchange.body !== undefined && !exchange.chunked) {
      headers['content-length'] = String(Buffer.byteLength(exchange.body));
    }
    const req = httpRequest(
      url,
      { method: exchange.method ?? 'POST', headers, timeout: 30_000, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const kept: Record<string, string> = {};
          for (const [name, value] of Object.entries(res.headers)) {
            if (!FRAMING.has(name) && value !== undefined) kept[name] = String(value);
          }
          resolve({ status: res.statusCode ?? 0, headers: kept, body: Buffer.concat(chunks).toString('utf8') });
        });
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('no answer within 30 s')));
    if (exchange.body !== undefined && exchange.chunked) {
      // two writes, so the body really arrives in pieces
      const bytes = Buffer.from(exchange.body);
      req.write(bytes.subarray(0, 10));
      req.end(bytes.subarray(10));
    } else req.end(exchange.body);
  });
}

/** A tasks/get exchange as a Closeout client sends it, with the given changes. */
function taskGet(
  params: Record<string, unknown>,
  options: Parameters<typeof wireRequest>[2] & {
    token?: string;
    mutate?: (body: Record<string, unknown>) => void;
  } = {},
): Exchange {
  const { mutate, ...rest } = options;
  const built = wireRequest('tasks/get', params, { token: ALICE, ...rest });
  if (!mutate) return { headers: built.headers, body: built.body };
  const body = JSON.parse(built.body) as Record<string, unknown>;
  mutate(body);
  return { headers: built.headers, body: JSON.stringify(body) };
}

const spans = new InMemorySpanExporter();
let dir: string;
let store: SqliteTaskStore;
let tasks: TaskServer;
let fast: ServingTaskServer;
let sdk: ServingTaskServer;
/** Per-request SDK servers built by each serving (its `setup` runs once for each). */
const built = { fast: 0, sdk: 0 };
const ids: Record<'working' | 'inputRequired' | 'completed' | 'failed' | 'cancelled', string> = {
  working: '',
  inputRequired: '',
  completed: '',
  failed: '',
  cancelled: '',
};

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'closeout-fastget-'));
  store = new SqliteTaskStore(join(dir, 'tasks.db'));
  tasks = new TaskServer({
    store,
    onError: () => {},
    telemetry: { tracerProvider: new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] }) },
  });
  const hold = (_args: unknown, ctx: { signal: AbortSignal }) =>
    new Promise<never>((_resolve, reject) =>
      ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason as Error), { once: true }),
    );
  // fixed poll intervals: both paths compute them at their own instant, an adaptive one could differ by a step
  const task = { support: 'required', pollIntervalMs: 1000 } as const;
  tasks.registerTool('hold', { task }, hold);
  tasks.registerTool('done', { task }, () => ({ content: [{ type: 'text', text: 'done' }] }));
  tasks.registerTool('fails', { task }, () => {
    throw { code: -32000, message: 'refused upstream', data: { why: 'test' } };
  });
  tasks.registerTool('asks', { task }, async (_args, ctx) => {
    await ctx.input('name', {
      method: 'elicitation/create',
      params: { message: 'Name?', requestedSchema: { type: 'object', properties: {} } },
    });
    return { content: [] };
  });
  fast = await serveTaskServer(tasks, { port: 0, tokens: TOKENS, setup: () => built.fast++ });
  sdk = await serveTaskServer(tasks, { port: 0, tokens: TOKENS, setup: () => built.sdk++, taskGetFastPath: false });

  const create = async (name: string) => {
    const created = await rpc(
      sdk.url,
      'tools/call',
      { name, arguments: {} },
      { token: ALICE, capabilities: { elicitation: {} } },
    );
    const taskId = created.result?.['taskId'];
    if (typeof taskId !== 'string') throw new Error(`creating ${name}: ${JSON.stringify(created)}`);
    return taskId;
  };
  ids.working = await create('hold');
  ids.inputRequired = await create('asks');
  ids.completed = await create('done');
  ids.failed = await create('fails');
  ids.cancelled = await create('hold');
  await rpc(sdk.url, 'tasks/cancel', { taskId: ids.cancelled }, { token: ALICE });
  const expected = {
    inputRequired: 'input_required',
    completed: 'completed',
    failed: 'failed',
    cancelled: 'cancelled',
  } as const;
  for (const [key, status] of Object.entries(expected)) {
    const taskId = ids[key as keyof typeof expected];
    await waitFor(`task ${key} to be ${status}`, async () => {
      const got = await rpc(sdk.url, 'tasks/get', { taskId }, { token: ALICE });
      return got.result?.['status'] === status ? true : undefined;
    });
  }
}, 60_000);

afterAll(async () => {
  await fast?.close();
  await sdk?.close();
  await store?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Both answers and the spans each produced; the span ids and times differ by nature, everything else must not. */
async function both(exchange: Exchange) {
  spans.reset();
  const builtBefore = { ...built };
  const fastAnswer = await send(fast.url, exchange);
  const fastSpans = spans.getFinishedSpans().map(spanView);
  spans.reset();
  const sdkAnswer = await send(sdk.url, exchange);
  const sdkSpans = spans.getFinishedSpans().map(spanView);
  return {
    fast: { ...fastAnswer, spans: fastSpans },
    sdk: { ...sdkAnswer, spans: sdkSpans },
    servedFast: built.fast === builtBefore.fast && built.sdk > builtBefore.sdk,
  };
}

function spanView(span: ReturnType<InMemorySpanExporter['getFinishedSpans']>[number]) {
  return {
    name: span.name,
    kind: span.kind,
    traceId: span.spanContext().traceId === CALLER_TRACE ? CALLER_TRACE : 'own',
    attributes: span.attributes,
    status: span.status,
    events: span.events.map((e) => e.name),
  };
}

const traceMeta = { traceparent: `00-${CALLER_TRACE}-b7ad6b7169203331-01` };

/** Ordinary polls: the fast path must answer them itself. */
const ordinary: Array<[string, () => Exchange]> = [
  ['a working task', () => taskGet({ taskId: ids.working })],
  ['an input_required task', () => taskGet({ taskId: ids.inputRequired })],
  ['a completed task', () => taskGet({ taskId: ids.completed })],
  ['a failed task', () => taskGet({ taskId: ids.failed })],
  ['a cancelled task', () => taskGet({ taskId: ids.cancelled })],
  ['a string request id', () => taskGet({ taskId: ids.working }, { mutate: (b) => (b['id'] = 'poll-7') })],
  ['the caller’s trace context', () => taskGet({ taskId: ids.working }, { meta: traceMeta })],
  ['unknown params and _meta entries', () => taskGet({ taskId: ids.working, extra: [1] }, { meta: { x: 1 } })],
  ['an unknown id', () => taskGet({ taskId: 'no-such-task' })],
  ['another principal’s task', () => taskGet({ taskId: ids.working }, { token: BOB })],
  // -32021 at HTTP 400, from the capability rule both paths share (sdkGlue.ts, answerTaskGet)
  ['the extension not declared', () => taskGet({ taskId: ids.working }, { declareTasks: false })],
  ['no Accept header', () => taskGet({ taskId: ids.working }, { headers: { accept: undefined } })],
  // node's HTTP parser drops the whitespace around a header value before either path sees it
  [
    'Mcp-Name with spaces around it',
    () => taskGet({ taskId: ids.working }, { headers: { 'mcp-name': ` ${ids.working} ` } }),
  ],
];

/** Everything else: handed to the SDK's path (or refused before either path), answered the same. */
const unusual: Array<[string, () => Exchange]> = [
  ['bad JSON', () => ({ headers: taskGet({ taskId: ids.working }).headers, body: '{"jsonrpc":"2.0",' })],
  [
    'a UTF-8 byte order mark before the JSON',
    () => {
      const one = taskGet({ taskId: ids.working });
      return { headers: one.headers, body: Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(one.body!)]) };
    },
  ],
  ['an empty body', () => ({ headers: taskGet({ taskId: ids.working }).headers, body: '' })],
  [
    'a batch',
    () => {
      const one = taskGet({ taskId: ids.working });
      return { headers: one.headers, body: `[${one.body as string}]` };
    },
  ],
  ['no Mcp-Name', () => taskGet({ taskId: ids.working }, { headers: { 'mcp-name': undefined } })],
  ['a wrong Mcp-Name', () => taskGet({ taskId: ids.working }, { headers: { 'mcp-name': ids.completed } })],
  [
    'Mcp-Name base64-encoded',
    () =>
      taskGet(
        { taskId: ids.working },
        { headers: { 'mcp-name': `=?base64?${Buffer.from(ids.working).toString('base64')}?=` } },
      ),
  ],
  [
    'no MCP-Protocol-Version',
    () => taskGet({ taskId: ids.working }, { headers: { 'mcp-protocol-version': undefined } }),
  ],
  [
    'MCP-Protocol-Version other than the body’s',
    () => taskGet({ taskId: ids.working }, { headers: { 'mcp-protocol-version': '2025-11-25' } }),
  ],
  [
    'an unsupported protocol version in header and body',
    () =>
      taskGet(
        { taskId: ids.working },
        {
          headers: { 'mcp-protocol-version': '2099-01-01' },
          meta: { 'io.modelcontextprotocol/protocolVersion': '2099-01-01' },
        },
      ),
  ],
  [
    'a 2025 protocol version in header and body',
    () =>
      taskGet(
        { taskId: ids.working },
        {
          headers: { 'mcp-protocol-version': '2025-11-25' },
          meta: { 'io.modelcontextprotocol/protocolVersion': '2025-11-25' },
        },
      ),
  ],
  [
    'no _meta envelope',
    () => taskGet({ taskId: ids.working }, { mutate: (b) => delete (b['params'] as Record<string, unknown>)['_meta'] }),
  ],
  [
    'an envelope without client capabilities',
    () => taskGet({ taskId: ids.working }, { meta: { 'io.modelcontextprotocol/clientCapabilities': undefined } }),
  ],
  [
    'a malformed clientInfo',
    () => taskGet({ taskId: ids.working }, { meta: { 'io.modelcontextprotocol/clientInfo': 'me' } }),
  ],
  ['no Mcp-Method', () => taskGet({ taskId: ids.working }, { headers: { 'mcp-method': undefined } })],
  [
    'Mcp-Method tasks/get on a tasks/cancel body',
    () => taskGet({ taskId: ids.working }, { mutate: (b) => (b['method'] = 'tasks/cancel') }),
  ],
  [
    'the extension declared as true',
    () => taskGet({ taskId: ids.working }, { declareTasks: false, capabilities: { extensions: { [TASKS]: true } } }),
  ],
  ['a numeric taskId', () => taskGet({ taskId: 42 }, { headers: { 'mcp-name': '42' } })],
  ['an empty taskId', () => taskGet({ taskId: '' }, { headers: { 'mcp-name': '' } })],
  ['a taskId of 300 characters', () => taskGet({ taskId: 'x'.repeat(300) })],
  ['no taskId', () => taskGet({}, { headers: { 'mcp-name': ids.working } })],
  ['no params', () => taskGet({ taskId: ids.working }, { mutate: (b) => delete b['params'] })],
  ['params an array', () => taskGet({ taskId: ids.working }, { mutate: (b) => (b['params'] = [ids.working]) })],
  ['a null id', () => taskGet({ taskId: ids.working }, { mutate: (b) => (b['id'] = null) })],
  ['an object id', () => taskGet({ taskId: ids.working }, { mutate: (b) => (b['id'] = { n: 1 }) })],
  ['jsonrpc 1.0', () => taskGet({ taskId: ids.working }, { mutate: (b) => (b['jsonrpc'] = '1.0') })],
  ['a notification (no id)', () => taskGet({ taskId: ids.working }, { mutate: (b) => delete b['id'] })],
  [
    'inputResponses in the params',
    () => taskGet({ taskId: ids.working, inputResponses: { name: { action: 'accept' } } }),
  ],
  ['requestState in the params', () => taskGet({ taskId: ids.working, requestState: 'opaque' })],
  [
    'text/plain content type',
    () => {
      const one = taskGet({ taskId: ids.working });
      return { headers: { ...one.headers, 'content-type': 'text/plain' }, body: one.body };
    },
  ],
  ['a chunked body', () => ({ ...taskGet({ taskId: ids.working }), chunked: true })],
  ['a body over the fast path’s 64 KiB', () => taskGet({ taskId: ids.working }, { meta: { pad: 'p'.repeat(70_000) } })],
  [
    'a chunked body over 64 KiB',
    () => ({ ...taskGet({ taskId: ids.working }, { meta: { pad: 'p'.repeat(70_000) } }), chunked: true }),
  ],
  ['a body over 4 MiB', () => taskGet({ taskId: ids.working }, { meta: { pad: 'p'.repeat(4_200_000) } })],
  [
    'JSON nested 600 deep',
    () => {
      const one = taskGet({ taskId: ids.working });
      const deep = '{"a":'.repeat(600) + '0' + '}'.repeat(600);
      return { headers: one.headers, body: (one.body as string).replace('"_meta":{', `"deep":${deep},"_meta":{`) };
    },
  ],
  ['no bearer token', () => taskGet({ taskId: ids.working }, { token: '' })],
  ['a wrong bearer token', () => taskGet({ taskId: ids.working }, { token: 'nobody' })],
  ['GET', () => ({ method: 'GET', headers: taskGet({ taskId: ids.working }).headers })],
  ['DELETE', () => ({ method: 'DELETE', headers: taskGet({ taskId: ids.working }).headers })],
  [
    'tasks/cancel on the fast path’s neighbour',
    () => {
      const one = wireRequest('tasks/cancel', { taskId: 'no-such-task' }, { token: ALICE });
      return { headers: one.headers, body: one.body };
    },
  ],
];

describe('tasks/get fast path against the SDK path', () => {
  it.each(ordinary)('answers %s itself, exactly as the SDK path does', async (_label, exchange) => {
    const { fast: f, sdk: s, servedFast } = await both(exchange());
    expect(f.status).toBe(s.status);
    expect(f.headers).toEqual(s.headers);
    expect(f.body).toBe(s.body);
    expect(f.spans).toEqual(s.spans);
    expect(f.spans.length).toBeGreaterThan(0);
    expect(servedFast, 'no per-request SDK server was built for it').toBe(true);
  });

  it.each(unusual)('hands %s to the SDK path, answered the same', async (_label, exchange) => {
    const { fast: f, sdk: s, servedFast } = await both(exchange());
    expect(f.status).toBe(s.status);
    expect(f.headers).toEqual(s.headers);
    expect(f.body).toBe(s.body);
    expect(f.spans).toEqual(s.spans);
    expect(servedFast, 'the fast path did not answer it').toBe(false);
  });
});
