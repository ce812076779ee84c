// Invariant: a request that got no JSON-RPC answer (refused, reset, timeout, 5xx, 429) is classified as a transport
// failure, with the server's Retry-After kept; a JSON-RPC error answer is not a transport failure.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

import { ProtocolError, SdkError, SdkErrorCode } from '@modelcontextprotocol/client';
import { describe, expect, it } from 'vitest';

import {
  classifyTransportError,
  HttpStatusError,
  parseRetryAfter,
  retryAfterFetch,
} from '../../src/client/transport/transportFailure.js';

describe('parseRetryAfter', () => {
  it('reads delay-seconds and HTTP dates', () => {
    expect(parseRetryAfter('3')).toBe(3_000);
    expect(parseRetryAfter(' 0 ')).toBe(0);
    const now = Date.parse('2026-07-28T10:00:00Z');
    expect(parseRetryAfter('Tue, 28 Jul 2026 10:00:05 GMT', now)).toBe(5_000);
    expect(parseRetryAfter('Tue, 28 Jul 2026 09:00:00 GMT', now)).toBe(0);
    expect(parseRetryAfter('soon')).toBeUndefined();
    expect(parseRetryAfter(null)).toBeUndefined();
  });
});

describe('classifyTransportError', () => {
  it('recognises a refused connection from a real fetch', async () => {
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise((resolve) => server.close(resolve));
    const error = await fetch(`http://127.0.0.1:${port}/`).catch((caught: unknown) => caught);
    expect(classifyTransportError(error)).toMatchObject({ kind: 'refused' });
  });

  it('keeps Retry-After from a 429 through retryAfterFetch', async () => {
    const server = createServer((_req, res) => res.writeHead(429, { 'retry-after': '2' }).end('slow down'));
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as AddressInfo;
    try {
      const error = await retryAfterFetch()(`http://127.0.0.1:${port}/`).catch((caught: unknown) => caught);
      expect(error).toBeInstanceOf(HttpStatusError);
      expect(classifyTransportError(error)).toEqual({
        kind: 'http',
        message: 'HTTP 429 (Retry-After 2000 ms)',
        status: 429,
        retryAfterMs: 2_000,
      });
      const ok = await retryAfterFetch(async () => new Response('fine', { status: 200 }))('http://x/');
      expect(ok.status).toBe(200);
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('classifies SDK timeouts and HTTP errors, and leaves JSON-RPC errors alone', () => {
    expect(classifyTransportError(new SdkError(SdkErrorCode.RequestTimeout, 'Request timed out'))).toMatchObject({
      kind: 'timeout',
    });
    expect(
      classifyTransportError(new SdkError(SdkErrorCode.ClientHttpNotImplemented, 'HTTP 502', { status: 502 })),
    ).toMatchObject({ kind: 'http', status: 502 });
    expect(classifyTransportError(new ProtocolError(-32603, 'internal'))).toBeUndefined();
    expect(classifyTransportError(new Error('something else'))).toBeUndefined();
  });
});
