// Invariant: against the answers a review found to set the client poll fast path
// (src/client/transport/taskGetFastPath.ts) apart from the SDK alone (strict JSON-RPC members, repeated headers,
// streams that stay open or come late, a server that streams every answer, a rotated token, a close with polls in
// flight), the same poll through the fast path and through the SDK alone, on a real HTTP server on 127.0.0.1, gives the
// same conclusion, the same request, no extra cost.
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
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import { DEFAULT_CLIENT_INFO, httpTaskTransport } from '../../src/client/connect.js';
import { ClientCore } from '../../src/client/core/clientCore.js';
import type { TaskQuery } from '../../src/client/following/taskRequests.js';
import { TaskRequests } from '../../src/client/following/taskRequests.js';
import { SqliteLedger } from '../../src/client/ledger/sqliteLedger.js';
import { attachTaskResultCarrier } from '../../src/client/transport/sdkGlue.js';
import { discoverResult } from '../support/jsonRpcFixture.js';
import { TASKS } from '../support/rpc.js';

const TASK_ID = 'u6Qp2bWm1xLk9sV3aZr0Tg';
const TIMEOUT_MS = 1_000;

type Answer = (id: unknown, res: ServerResponse, req: IncomingMessage) => void;
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
const rawJson =
  (message: (id: unknown) => unknown, status = 200): Answer =>
  (id, res) =>
    res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(message(id)));
const ordinary: Answer = rawJson((id) => ({ jsonrpc: '2.0', id, result: task() }));

interface Received {
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

let server: Server;
let url: URL;
let answer: Answer = ordinary;
const received: Received[] = [];
const dir = mkdtempSync(join(tmpdir(), 'closeout-fast-path-adv-'));
let sideCount = 0;

interface Side {
  requests: TaskRequests;
  client: Client;
  close(): Promise<void>;
}
const open: Side[] = [];

async function side(name: 'fast' | 'sdk', requestInit?: RequestInit): Promise<Side> {
  const { transport, fastPath } = httpTaskTransport(url, {
    pollFastPath: name === 'fast',
    ...(requestInit && { requestInit }),
  });
  expect(fastPath !== undefined).toBe(name === 'fast');
  attachTaskResultCarrier(transport);
  const client = new Client(DEFAULT_CLIENT_INFO, { versionNegotiation: { mode: 'auto' } });
  await client.connect(transport);
  const ledger = new SqliteLedger(join(dir, `${name}-${++sideCount}.db`));
  const core = new ClientCore({
    client,
    ledger,
    endpoint: url.href,
    requestTimeoutMs: TIMEOUT_MS,
    ...(fastPath && { taskGetFastPath: fastPath }),
  });
  const s: Side = {
    requests: new TaskRequests(core),
    client,
    close: async () => {
      await client.close();
      await ledger.dispose();
    },
  };
  open.push(s);
  // prime: the SDK's first tasks/get becomes the fast path's template
  const saved = answer;
  answer = ordinary;
  expect((await s.requests.getTask(TASK_ID)).kind).toBe('task');
  answer = saved;
  return s;
}

beforeAll(async () => {
  server = createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => (text += chunk.toString()));
    req.on('end', () => {
      const body = JSON.parse(text) as { id?: unknown; method: string };
      if (body.id === undefined) return void res.writeHead(202).end();
      if (body.method === 'tasks/get') {
        received.push({ headers: req.headers, body });
        return answer(body.id, res, req);
      }
      const discover = discoverResult({ extensions: { [TASKS]: {} } }, { name: 'adversary', version: '1.0.0' });
      const reply = body.method === 'server/discover' ? discover : { error: { code: -32601, message: 'no' } };
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify({ jsonrpc: '2.0', id: body.id, ...reply }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`);
});

afterEach(async () => {
  answer = ordinary;
  for (const s of open.splice(0)) await s.close().catch(() => undefined);
  server.closeAllConnections();
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
  rmSync(dir, { recursive: true, force: true });
});

function conclusion(requests: TaskRequests, query: TaskQuery): unknown {
  if (query.kind === 'task') return { task: query.task };
  if (query.kind === 'bad-output') return { badOutput: query.error.message };
  const { at: _at, ...recorded } = requests.describeError('tasks/get', query.error);
  const error = query.error;
  return {
    recorded,
    ...(error instanceof ProtocolError && { code: error.code, message: error.message }),
  };
}

async function poll(s: Side) {
  const before = received.length;
  const started = performance.now();
  const query = await s.requests.getTask(TASK_ID, { taskId: TASK_ID, status: 'working' });
  return {
    kind: query.kind,
    conclusion: conclusion(s.requests, query),
    sent: received.slice(before),
    ms: performance.now() - started,
  };
}

/** An SSE answer carrying `message`, the stream kept open (keep-alive comments) until the client goes away. */
const sseKeptOpen =
  (message: (id: unknown) => unknown): Answer =>
  (id, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(`event: message\ndata: ${JSON.stringify(message(id))}\n\n`);
    const timer = setInterval(() => res.write(': keep-alive\n\n'), 100);
    const stop = setTimeout(() => res.end(), 10_000); // bounded
    res.on('close', () => {
      clearInterval(timer);
      clearTimeout(stop);
    });
  };

describe('adversary: the fast path against the SDK alone', () => {
  it('A: a result response with an extra top-level member (the SDK rejects it, strict JSON-RPC schema)', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = rawJson((id) => ({ jsonrpc: '2.0', id, result: task(), extra: true }));
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(s.kind).toBe('unanswered');
    expect(f.conclusion).toEqual(s.conclusion);
  });

  it('B: a result whose _meta is not an object (the SDK rejects it, ResultSchema)', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = rawJson((id) => ({ jsonrpc: '2.0', id, result: task({ _meta: 'not-an-object' }) }));
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(f.conclusion).toEqual(s.conclusion);
  });

  it('C: two Content-Type headers (fetch joins them; the SDK refuses the content type)', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = (id, res) => {
      res.setHeader('content-type', ['application/json', 'text/html']);
      res.writeHead(200).end(JSON.stringify({ jsonrpc: '2.0', id, result: task() }));
    };
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(s.kind).toBe('unanswered');
    expect(f.conclusion).toEqual(s.conclusion);
  });

  it('D: a 503 with two Retry-After headers is recorded with the same retryAfterMs', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = (_id, res) => {
      res.setHeader('retry-after', ['3', '3']);
      res.writeHead(503).end('unavailable');
    };
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(f.conclusion).toEqual(s.conclusion);
  });

  it('E: an SSE answer whose stream stays open after the result (the SDK takes the event; the fast path waits for the end)', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = sseKeptOpen((id) => ({ jsonrpc: '2.0', id, result: task() }));
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(s.kind).toBe('task');
    expect(f.conclusion).toEqual(s.conclusion);
  });

  it('F: a poll never waits longer than requestTimeoutMs (slow SSE answer: fast path + SDK retry)', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = (id, res) => {
      const timer = setTimeout(() => {
        res
          .writeHead(200, { 'content-type': 'text/event-stream' })
          .end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id, result: task() })}\n\n`);
      }, 700);
      res.on('close', () => clearTimeout(timer));
    };
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(s.kind).toBe('task');
    expect(s.ms).toBeLessThan(TIMEOUT_MS);
    expect(f.kind).toBe('task');
    expect(f.ms).toBeLessThan(TIMEOUT_MS + 100);
  });

  it('G: against a server that answers in SSE (the official SDK server default), polls do not cost twice forever', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = (id, res) =>
      res
        .writeHead(200, { 'content-type': 'text/event-stream' })
        .end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id, result: task() })}\n\n`);
    let fastSent = 0;
    let sdkSent = 0;
    for (let i = 0; i < 5; i++) {
      fastSent += (await poll(fast)).sent.length;
      sdkSent += (await poll(sdk)).sent.length;
    }
    expect(sdkSent).toBe(5);
    // one probe to learn the server streams is fair; every poll twice is not
    expect(fastSent).toBeLessThanOrEqual(6);
  });

  it('H: a terminal answer that arrived is not dropped (DESIGN rule 10): SSE result, then the server goes away', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    const completed = task({ status: 'completed', result: { resultType: 'complete', content: [] } });
    let served = 0;
    answer = (id, res) => {
      // one answer per poll window, then 503 while restarting (a deploy, a rate limit)
      if (served++ % 2 === 1) return void res.writeHead(503, { 'retry-after': '5' }).end('restarting');
      res
        .writeHead(200, { 'content-type': 'text/event-stream' })
        .end(`event: message\ndata: ${JSON.stringify({ jsonrpc: '2.0', id, result: completed })}\n\n`);
    };
    served = 0;
    const s = await poll(sdk);
    served = 0;
    const f = await poll(fast);
    expect(s.kind).toBe('task');
    expect(f.conclusion).toEqual(s.conclusion);
  });

  it('I: after the caller rotates the token in requestInit.headers, polls carry the token the SDK would send', async () => {
    const headers = new Headers({ authorization: 'Bearer token-A' });
    const fast = await side('fast', { headers });
    const sdk = await side('sdk', { headers });
    headers.set('authorization', 'Bearer token-B');
    const s = await poll(sdk);
    const f = await poll(fast);
    expect(s.sent[0]!.headers.authorization).toBe('Bearer token-B');
    expect(f.sent.map((r) => r.headers.authorization)).toEqual(['Bearer token-B']);
  });

  it('J: close() during polls in flight concludes as the SDK alone does and leaves nothing pending', async () => {
    const fast = await side('fast');
    const sdk = await side('sdk');
    answer = () => undefined; // never answers (the connection is closed in afterEach)
    const polls = (s: Side) => Array.from({ length: 5 }, () => s.requests.getTask(TASK_ID));
    const fastPolls = polls(fast);
    const sdkPolls = polls(sdk);
    await new Promise((r) => setTimeout(r, 100));
    const started = performance.now();
    await Promise.all([fast.client.close(), sdk.client.close()]);
    const [f, s] = await Promise.all([Promise.all(fastPolls), Promise.all(sdkPolls)]);
    expect(performance.now() - started).toBeLessThan(500);
    expect(f.map((q) => conclusion(fast.requests, q))).toEqual(s.map((q) => conclusion(sdk.requests, q)));
  });
});
