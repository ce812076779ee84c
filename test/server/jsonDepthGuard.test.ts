// The depth guard reads a request body once: a JSON body reaches the SDK parsed (so the SDK neither clones nor
// re-reads the request), anything else reaches it as the same text, and a body nested too deep never reaches it.
import type { McpHttpHandler } from '@modelcontextprotocol/server';
import { describe, expect, it } from 'vitest';

import { guardJsonDepth, MAX_REQUEST_JSON_DEPTH } from '../../src/server/jsonDepthGuard.js';

type Seen = { request: Request; options: Parameters<McpHttpHandler['fetch']>[1] };

function recording(): { handler: McpHttpHandler; seen: Seen[] } {
  const seen: Seen[] = [];
  const handler = {
    fetch: async (request: Request, options?: Parameters<McpHttpHandler['fetch']>[1]) => {
      seen.push({ request, options });
      return new Response('{}', { headers: { 'content-type': 'application/json' } });
    },
  } as unknown as McpHttpHandler;
  return { handler, seen };
}

const post = (body: string) =>
  new Request('http://localhost/mcp', { method: 'POST', headers: { 'content-type': 'application/json' }, body });

describe('guardJsonDepth', () => {
  it('hands a JSON body on parsed, with the request it came in', async () => {
    const { handler, seen } = recording();
    const message = { jsonrpc: '2.0', id: 7, method: 'tasks/get', params: { taskId: 'abc', nested: [[{ a: 1 }]] } };
    const request = post(JSON.stringify(message));
    await guardJsonDepth(handler).fetch(request, { authInfo: { token: 't', clientId: 'c', scopes: [] } });
    expect(seen).toHaveLength(1);
    expect(seen[0]!.request).toBe(request);
    expect(seen[0]!.options).toEqual({ authInfo: { token: 't', clientId: 'c', scopes: [] }, parsedBody: message });
  });

  it('hands a body that is not JSON on as the same text, unparsed, for the SDK to answer', async () => {
    const { handler, seen } = recording();
    await guardJsonDepth(handler).fetch(post('{"jsonrpc": "2.0", "id": 1,'));
    expect(seen).toHaveLength(1);
    expect(seen[0]!.options?.parsedBody).toBeUndefined();
    expect(await seen[0]!.request.text()).toBe('{"jsonrpc": "2.0", "id": 1,');
  });

  it('refuses a body nested deeper than the limit without calling the handler', async () => {
    const { handler, seen } = recording();
    const deep = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":${'['.repeat(MAX_REQUEST_JSON_DEPTH + 1)}${']'.repeat(MAX_REQUEST_JSON_DEPTH + 1)}}`;
    const response = await guardJsonDepth(handler).fetch(post(deep));
    expect(seen).toHaveLength(0);
    expect(response.status).toBe(400);
    expect(await response.json()).toMatchObject({ id: 3, error: { code: -32600 } });
  });
});
