/**
 * A raw JSON-RPC probe: sends exactly the bytes the 2026-07-28 wire expects (the `_meta` envelope, the
 * MCP-Protocol-Version / Mcp-Method / Mcp-Name headers) and returns the server's answer unfiltered by any SDK, so
 * `closeout doctor` (and the tests) can judge what a server really says, header by header.
 */
import { DEFAULT_CLIENT_INFO } from '../../client/connect.js';

export const PROTOCOL_VERSION = '2026-07-28';
export const TASKS = 'io.modelcontextprotocol/tasks';

export interface RpcOptions {
  /** Declare the Tasks extension in the request's client capabilities. Default true. */
  declareTasks?: boolean;
  /** Extra client capabilities (merged). */
  capabilities?: Record<string, unknown>;
  /** Bearer token. */
  token?: string;
  /** Override or drop headers (undefined drops). */
  headers?: Record<string, string | undefined>;
  /** Extra `_meta` entries. */
  meta?: Record<string, unknown>;
  /** Send this raw body instead of building one. */
  rawBody?: string;
  /** Give up after this long. Default 10 s. */
  timeoutMs?: number;
}

export interface RpcResponse {
  httpStatus: number;
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: unknown };
}

/** One request's exact bytes: the body and the headers it is sent with. */
export interface WireRequest {
  body: string;
  headers: Record<string, string>;
}

let nextId = 1;

/**
 * The SEP-2243 / SEP-2663 headers of a request over Streamable HTTP: the protocol version, the method, and the
 * `Mcp-Name` that routes it (the tool of a tools/call, the task of a tasks/* request).
 */
export function routingHeaders(method: string, params: Record<string, unknown>): Record<string, string> {
  const name =
    method === 'tools/call'
      ? String(params['name'])
      : method.startsWith('tasks/') && typeof params['taskId'] === 'string'
        ? params['taskId']
        : undefined;
  return {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': PROTOCOL_VERSION,
    'mcp-method': method,
    'user-agent': `${DEFAULT_CLIENT_INFO.name}/${DEFAULT_CLIENT_INFO.version}`,
    ...(name !== undefined && { 'mcp-name': name }),
  };
}

/**
 * The bytes of one request, built once: the `_meta` envelope and the routing headers (a load generator replays
 * them without paying for JSON on its side).
 */
export function wireRequest(
  method: string,
  params: Record<string, unknown> = {},
  options: Omit<RpcOptions, 'rawBody' | 'timeoutMs'> = {},
): WireRequest {
  const declare = options.declareTasks ?? true;
  const capabilities = { ...(declare && { extensions: { [TASKS]: {} } }), ...options.capabilities };
  const body = {
    jsonrpc: '2.0',
    id: nextId++,
    method,
    params: {
      ...params,
      _meta: {
        'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
        // the probe says who it is, as every closeout client does
        'io.modelcontextprotocol/clientInfo': DEFAULT_CLIENT_INFO,
        'io.modelcontextprotocol/clientCapabilities': capabilities,
        ...options.meta,
      },
    },
  };
  const headers: Record<string, string> = {
    ...routingHeaders(method, params),
    ...(options.token && { authorization: `Bearer ${options.token}` }),
  };
  for (const [key, value] of Object.entries(options.headers ?? {})) {
    if (value === undefined) delete headers[key.toLowerCase()];
    else headers[key.toLowerCase()] = value;
  }
  return { body: JSON.stringify(body), headers };
}

/** Sends one request. Throws only when the server cannot be reached or answers with a body that is not JSON-RPC. */
export async function rpc(
  url: string,
  method: string,
  params: Record<string, unknown> = {},
  options: RpcOptions = {},
): Promise<RpcResponse> {
  const { body, headers } = wireRequest(method, params, options);
  const response = await fetch(url, {
    method: 'POST',
    headers,
    body: options.rawBody ?? body,
    signal: AbortSignal.timeout(options.timeoutMs ?? 10_000),
  });
  const text = await response.text();
  const message = parseBody(text, response.headers.get('content-type') ?? '');
  return {
    httpStatus: response.status,
    ...(message?.result && { result: message.result }),
    ...(message?.error && { error: message.error }),
  };
}

function parseBody(
  text: string,
  contentType: string,
): { result?: Record<string, unknown>; error?: RpcResponse['error'] } | undefined {
  if (text.length === 0) return undefined;
  if (contentType.includes('text/event-stream')) {
    const data = text
      .split('\n')
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trim())
      .filter((line) => line.length > 0);
    for (const chunk of data.reverse()) {
      const parsed = JSON.parse(chunk) as {
        result?: Record<string, unknown>;
        error?: RpcResponse['error'];
        id?: unknown;
      };
      if (parsed.id !== undefined) return parsed;
    }
    return undefined;
  }
  return JSON.parse(text) as { result?: Record<string, unknown>; error?: RpcResponse['error'] };
}
