/**
 * The raw dispatch the official ext-tasks client (`@modelcontextprotocol/ext-tasks`) needs for a 2026-07-28 Tasks
 * server, as its package documents the setup: the host owns it (the SDK codec refuses task wire shapes) and sends each
 * framed request as Streamable HTTP, with the SEP-2243 routing headers.
 */
import type { RawClientDispatch } from '@modelcontextprotocol/ext-tasks/client';

import { routingHeaders } from './rpc.js';

/** A raw dispatch that POSTs to `url()` (read on each request, so it may name a server started later). */
export function streamableHttpDispatch(url: () => string): RawClientDispatch {
  return async (request, options) => {
    const body: Record<string, unknown> = { jsonrpc: '2.0', id: crypto.randomUUID(), ...(request as object) };
    const params = (body['params'] ?? {}) as Record<string, unknown>;
    const response = await fetch(url(), {
      method: 'POST',
      headers: routingHeaders(String(body['method']), params),
      body: JSON.stringify(body),
      ...(options?.signal ? { signal: options.signal } : {}),
    });
    const message = (await response.json()) as { result?: never; error?: never };
    return message.error !== undefined
      ? { kind: 'error', error: message.error }
      : { kind: 'result', result: message.result! };
  };
}
