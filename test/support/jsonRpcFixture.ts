/**
 * The skeleton of the raw JSON-RPC servers that tests and benchmarks stand up as "a Tasks server that is not ours":
 * POSTed JSON-RPC over node:http on 127.0.0.1, a notification acknowledged with 202, a request answered with what
 * `dispatch` returns, as JSON.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

import { PROTOCOL_VERSION } from './rpc.js';

export type JsonRpcAnswer = { result: object } | { error: object };

export interface JsonRpcFixture {
  /** `http://127.0.0.1:PORT`; the fixtures serve any path under it. */
  origin: string;
  server: Server;
  close(): Promise<void>;
}

export interface JsonRpcFixtureOptions {
  /** Sees each request first, with its body read; returns true when it answered it itself. */
  route?: (req: IncomingMessage, res: ServerResponse) => boolean;
}

/** The answer to `server/discover` (MCP 2026-07-28): this revision only, with the given capabilities and server info. */
export function discoverResult(
  capabilities: object,
  serverInfo: { name: string; version: string },
): { result: Record<string, unknown> } {
  return {
    result: {
      resultType: 'complete',
      supportedVersions: [PROTOCOL_VERSION],
      capabilities,
      _meta: { 'io.modelcontextprotocol/serverInfo': serverInfo },
    },
  };
}

export async function startJsonRpcFixture(
  dispatch: (method: string, params: Record<string, unknown>) => JsonRpcAnswer,
  options: JsonRpcFixtureOptions = {},
): Promise<JsonRpcFixture> {
  const server = createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => res.writeHead(500).end(String(error)));
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let body = '';
    for await (const chunk of req) body += String(chunk);
    if (options.route?.(req, res)) return;
    if (req.method !== 'POST') return void res.writeHead(405).end();
    const message = JSON.parse(body) as { id?: string | number; method: string; params?: Record<string, unknown> };
    if (message.id === undefined) return void res.writeHead(202).end();
    const answer = dispatch(message.method, message.params ?? {});
    const payload = 'error' in answer ? { error: answer.error } : { result: answer.result };
    res
      .writeHead(200, { 'content-type': 'application/json' })
      .end(JSON.stringify({ jsonrpc: '2.0', id: message.id, ...payload }));
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
