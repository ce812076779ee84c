// Invariant: the undici-based fetch answers the SDK transport as global fetch would (headers both ways, SSE streamed
// as it arrives, redirects followed, aborts and refused connections rejected in the shapes classifyTransportError
// knows), and its pool is closed when the TaskClient that made it closes.
import { mkdtempSync, rmSync } from 'node:fs';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';

import type { HttpFetch } from '../../src/client/index.js';
import { connectHttpTaskClient } from '../../src/client/index.js';
import { createHttpFetch } from '../../src/client/transport/httpFetch.js';
import {
  classifyTransportError,
  HttpStatusError,
  retryAfterFetch,
} from '../../src/client/transport/transportFailure.js';
import { waitFor } from '../support/waitFor.js';
import { startTasksFixture } from './fixtures/tasksFixtureServer.js';

let server: Server;
let base: string;
let http: HttpFetch;
/** The paths the server was asked for, in order. */
const hits: string[] = [];
/** Resolvers the server waits on or signals through, per test. */
let releaseStream: () => void = () => undefined;
let streamEnded = false;
let arrived: Promise<void> = Promise.resolve();
let signalArrived: () => void = () => undefined;

beforeAll(async () => {
  server = createServer((req, res) => void route(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

beforeEach(() => {
  http = createHttpFetch();
  hits.length = 0;
  streamEnded = false;
  arrived = new Promise((resolve) => (signalArrived = resolve));
});

afterEach(async () => {
  releaseStream();
  await http.close();
});

async function route(req: IncomingMessage, res: ServerResponse): Promise<void> {
  let body = '';
  for await (const chunk of req) body += chunk;
  hits.push(req.url ?? '');
  switch (req.url) {
    case '/echo':
      res.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/']);
      res.setHeader('x-multi', ['one', 'two']);
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ method: req.method, headers: req.headers, body }));
    case '/events':
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
      res.write('data: one\n\n');
      await new Promise<void>((resolve) => (releaseStream = resolve));
      streamEnded = true;
      return void res.end('data: two\n\n');
    case '/hang':
      signalArrived();
      return;
    case '/hang-body':
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"partial"');
      signalArrived();
      return;
    case '/moved':
      return void res.writeHead(307, { location: '/echo' }).end('see /echo');
    case '/fixed':
      // a byte order mark, then JSON with a non-ASCII character: what a JSON answer's reader must decode
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(Buffer.from('\uFEFF{"answer":"é","n":1}', 'utf8'));
    case '/empty':
      return void res.writeHead(204).end();
    case '/busy':
      return void res.writeHead(429, { 'retry-after': '2' }).end('slow down');
    default:
      return void res.writeHead(404).end();
  }
}

describe('createHttpFetch', () => {
  it('sends the request headers in every form fetch takes, and returns repeated response headers whole', async () => {
    const forms: RequestInit['headers'][] = [
      new Headers({ 'x-request-id': 'r-1', 'content-type': 'application/json' }),
      { 'x-request-id': 'r-1', 'content-type': 'application/json' },
      [
        ['x-request-id', 'r-1'],
        ['content-type', 'application/json'],
      ],
    ];
    for (const headers of forms) {
      const response = await http.fetch(new URL('/echo', base), { method: 'POST', headers, body: '{"ping":1}' });
      expect(response.status).toBe(200);
      expect(response.statusText).toBe('OK');
      const echoed = (await response.json()) as { method: string; headers: Record<string, string>; body: string };
      expect(echoed.method).toBe('POST');
      expect(echoed.headers['x-request-id']).toBe('r-1');
      expect(echoed.headers['content-type']).toBe('application/json');
      expect(echoed.headers['content-length']).toBe('10');
      expect(echoed.body).toBe('{"ping":1}');
      expect(response.headers.getSetCookie()).toEqual(['a=1; Path=/', 'b=2; Path=/']);
      expect(response.headers.get('x-multi')).toBe('one, two');
      expect(response.headers.get('content-type')).toBe('application/json');
    }
    expect(hits).toEqual(['/echo', '/echo', '/echo']);
  });

  it('streams an SSE answer: the first event arrives before the server ends the response', async () => {
    const response = await http.fetch(`${base}/events`, { headers: { accept: 'text/event-stream' } });
    expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
    const first = await reader.read();
    expect(first.value).toBe('data: one\n\n');
    expect(streamEnded).toBe(false);
    releaseStream();
    let rest = '';
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) rest += chunk.value;
    expect(rest).toBe('data: two\n\n');
    expect(streamEnded).toBe(true);
  });

  it('rejects with the abort reason when aborted before the request, sending nothing', async () => {
    const error = await http
      .fetch(`${base}/echo`, { method: 'POST', body: 'x', signal: AbortSignal.abort() })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DOMException);
    expect((error as DOMException).name).toBe('AbortError');
    await new Promise((resolve) => setTimeout(resolve, 50));
    expect(hits).toEqual([]);
  });

  it('rejects with the abort reason when aborted while waiting for the answer or reading its body', async () => {
    const waiting = new AbortController();
    const pending = http.fetch(`${base}/hang`, { method: 'POST', body: '{}', signal: waiting.signal });
    await arrived;
    waiting.abort();
    const error = await pending.catch((caught: unknown) => caught);
    expect((error as Error).name).toBe('AbortError');
    expect(classifyTransportError(error)).toMatchObject({ kind: 'timeout' });

    arrived = new Promise((resolve) => (signalArrived = resolve));
    const reading = new AbortController();
    const reason = new Error('the caller gave up');
    const partial = http.fetch(`${base}/hang-body`, { signal: reading.signal });
    await arrived;
    reading.abort(reason);
    await expect(partial).rejects.toBe(reason);
  });

  it('rejects a refused connection with TypeError("fetch failed"), classified as refused', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const { port } = closed.address() as AddressInfo;
    await new Promise((resolve) => closed.close(resolve));
    const error = await http.fetch(`http://127.0.0.1:${port}/`).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(TypeError);
    expect((error as TypeError).message).toBe('fetch failed');
    expect(((error as TypeError).cause as { code?: string }).code).toBe('ECONNREFUSED');
    expect(classifyTransportError(error)).toMatchObject({ kind: 'refused' });
  });

  it('follows a 307 with the same method and body, and leaves it alone under redirect: manual', async () => {
    const followed = await http.fetch(`${base}/moved`, { method: 'POST', body: 'payload' });
    expect(followed.status).toBe(200);
    expect(((await followed.json()) as { method: string; body: string }).body).toBe('payload');
    // the redirect is asked again of global fetch, which follows it
    expect(hits).toEqual(['/moved', '/moved', '/echo']);

    const manual = await http.fetch(`${base}/moved`, { method: 'POST', body: 'payload', redirect: 'manual' });
    expect(manual.status).toBe(307);
    expect(manual.headers.get('location')).toBe('/echo');
    expect(await manual.text()).toBe('see /echo');
    expect(hits).toEqual(['/moved', '/moved', '/echo', '/moved']);
  });

  it('reads a JSON answer as global fetch does, in every way and order a body can be read (the body is buffered)', async () => {
    // each script reads one response; the same script on a global fetch response of the same bytes must agree
    const outcome = async (read: () => Promise<unknown>) => {
      try {
        return { value: await read() };
      } catch (error) {
        return { error: (error as Error).name };
      }
    };
    const decode = (bytes: ArrayBuffer | Uint8Array) => new TextDecoder().decode(bytes);
    const streamText = async (response: Response) => {
      let text = '';
      for await (const chunk of response.body!.pipeThrough(new TextDecoderStream())) text += chunk;
      return text;
    };
    const scripts: Record<string, (response: Response) => Promise<unknown[]>> = {
      'json, then json again': async (r) => [
        r.bodyUsed,
        await outcome(() => r.json()),
        r.bodyUsed,
        await outcome(() => r.json()),
      ],
      'text, then the body': async (r) => [
        await outcome(() => r.text()),
        r.body === null,
        r.bodyUsed,
        await outcome(() => r.text()),
      ],
      'arrayBuffer, then bytes': async (r) => [
        await outcome(async () => decode(await r.arrayBuffer())),
        // Node's Response has bytes(); its typings here do not yet
        await outcome(async () => decode(await (r as Response & { bytes(): Promise<Uint8Array> }).bytes())),
      ],
      'the body streamed, then text': async (r) => [
        await outcome(() => streamText(r)),
        r.bodyUsed,
        await outcome(() => r.text()),
      ],
      'the body asked for, then json': async (r) => [
        r.body instanceof ReadableStream,
        r.bodyUsed,
        await outcome(() => r.json()),
      ],
      'clone, both read': async (r) => {
        const copy = r.clone();
        return [
          await outcome(() => copy.text()),
          await outcome(() => r.json()),
          copy.status,
          copy.headers.get('content-type'),
        ];
      },
      'blob, then text': async (r) => [
        await outcome(async () => (await r.blob()).text()),
        await outcome(() => r.text()),
      ],
    };
    for (const [name, script] of Object.entries(scripts)) {
      const ours = await script(await http.fetch(`${base}/fixed`));
      const theirs = await script(await fetch(`${base}/fixed`));
      expect({ name, ours }).toEqual({ name, ours: theirs });
    }
    const response = await http.fetch(`${base}/fixed`);
    expect(await response.json()).toEqual({ answer: 'é', n: 1 });
    expect(response).toBeInstanceOf(Response);
  });

  it('answers a 204 with a null body', async () => {
    const response = await http.fetch(`${base}/empty`, { method: 'DELETE' });
    expect(response.status).toBe(204);
    expect(response.body).toBeNull();
    expect(await response.text()).toBe('');
  });

  it('keeps Retry-After from a 429 through retryAfterFetch, as with global fetch', async () => {
    const busy = (baseFetch: typeof fetch) =>
      retryAfterFetch(baseFetch)(`${base}/busy`, { method: 'POST', body: '{}' }).catch((caught: unknown) => caught);
    const [viaUndici, viaGlobal] = [await busy(http.fetch), await busy(fetch)];
    expect(viaUndici).toBeInstanceOf(HttpStatusError);
    expect(classifyTransportError(viaUndici)).toMatchObject({ kind: 'http', status: 429, retryAfterMs: 2_000 });
    expect(classifyTransportError(viaUndici)).toEqual(classifyTransportError(viaGlobal));
  });

  it('closes its keep-alive connections on close()', async () => {
    const count = () =>
      new Promise<number>((resolve, reject) =>
        server.getConnections((error, open) => (error ? reject(error) : resolve(open))),
      );
    server.closeAllConnections(); // those global fetch left open in earlier tests
    await (await http.fetch(`${base}/echo`)).text();
    expect(await count()).toBe(1);
    await http.close();
    // the server keeps an idle connection 5 s, so only the client closing it ends it this soon
    await waitFor('the pool to close its connection', async () => ((await count()) === 0 ? true : undefined), 1_000);
  });
});

describe('connectHttpTaskClient', () => {
  it('closes the pool of its default fetch when the TaskClient closes', async () => {
    const fixture = await startTasksFixture();
    const dir = mkdtempSync(join(tmpdir(), 'closeout-httpfetch-'));
    try {
      const client = await connectHttpTaskClient(fixture.url, { ledger: join(dir, 'ledger.db') });
      expect(fixture.requests.length).toBeGreaterThan(0);
      expect(await fixture.openConnections()).toBeGreaterThan(0);
      await client.close();
      await waitFor(
        'the TaskClient to close its connections',
        async () => ((await fixture.openConnections()) === 0 ? true : undefined),
        1_000,
      );
    } finally {
      await fixture.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
