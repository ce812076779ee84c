/**
 * The fast path of `tasks/get`: polls outnumber every other request a Tasks server answers, and the SDK's
 * per-request server costs several times the read itself (bench/RESULTS.md, sections 1 and 12). An ordinary
 * `tasks/get` (one well-formed POST, the expected headers, a declared extension) is answered here with the same
 * rules as the SDK's path: the SDK's own classifier judges the envelope and the headers, the same zod schema parses
 * the params, and `answerTaskGet` (sdkGlue.ts) runs the same capability check, principal-bound read and telemetry.
 * Anything else (and anything this module cannot decide) goes to the SDK's path unchanged, its body replayed byte
 * for byte. test/server/taskGetFastPath.test.ts sends the same valid and hostile requests to a server with and one
 * without this path and compares the answers.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { Readable } from 'node:stream';

import type { AuthInfo } from '@modelcontextprotocol/server';
import { classifyInboundRequest, isJsonContentType, SERVER_INFO_META_KEY } from '@modelcontextprotocol/server';

import type { GetTaskParams } from '../protocol/index.js';
import { CLIENT_CAPABILITIES_META_KEY, ErrorCode, GetTaskParamsSchema, TASK_METHODS } from '../protocol/index.js';
import { MAX_REQUEST_JSON_DEPTH, textNestsDeeperThan } from './jsonDepthGuard.js';
import { answerTaskGet, type PrincipalResolver } from './sdkGlue.js';
import type { TaskServer } from './taskServer.js';

/** The protocol revision the fast path answers (MCP 2026-07-28); any other revision goes to the SDK's path. */
const SERVED_REVISION = '2026-07-28';

/** An ordinary `tasks/get` is a few hundred bytes; a larger body goes to the SDK's path, which has its own limits. */
const MAX_FAST_BODY_BYTES = 64 * 1024;

/** The base64 sentinel an `Mcp-Name` value may be wrapped in (MCP 2026-07-28, transports); decoding is the SDK's. */
const ENCODED_HEADER_PREFIX = '=?';

/** An ordinary `tasks/get`, decided: its JSON-RPC id, its params (parsed by the one schema) and what it declared. */
interface OrdinaryTaskGet {
  id: string | number;
  params: GetTaskParams;
  clientCapabilities: unknown;
}

export interface TaskGetFastPathOptions {
  /** The identity the SDK stamps into every result's `_meta` (the same `serverInfo` the handler builds servers with). */
  serverInfo: { name: string; version: string };
  principal: PrincipalResolver;
}

/** Serves a request in full; `fallback` gets what the fast path does not answer, with its body intact. */
export type TaskGetFastPath = (
  req: IncomingMessage,
  res: ServerResponse,
  authInfo: AuthInfo | undefined,
  fallback: (req: IncomingMessage) => Promise<void>,
) => Promise<void>;

/** Whether a request may be an ordinary `tasks/get`, from its request line and headers alone (nothing read). */
export function mayBeTaskGet(req: IncomingMessage): boolean {
  return req.method === 'POST' && req.headers['mcp-method'] === TASK_METHODS.get;
}

export function taskGetFastPath(tasks: TaskServer, options: TaskGetFastPathOptions): TaskGetFastPath {
  const serverInfo = { ...options.serverInfo };
  return async (req, res, authInfo, fallback) => {
    // a declared length (a chunked body is not what a poll sends), small, of JSON: else nothing is read here
    const declared = Number(req.headers['content-length']);
    if (!(declared <= MAX_FAST_BODY_BYTES) || !isJsonContentType(req.headers['content-type'] ?? null)) {
      return fallback(req);
    }
    const chunks = await readBody(req);
    const ordinary = ordinaryTaskGet(req, Buffer.concat(chunks).toString('utf8'));
    if (!ordinary) return fallback(replayed(req, chunks));
    let status = 200;
    let message: unknown;
    try {
      const task = await answerTaskGet(tasks, ordinary.params, ordinary.clientCapabilities, () =>
        options.principal({ authInfo }),
      );
      // the SDK's encoding of a 2026-07-28 result: `resultType` stamped, then the server's identity in `_meta`
      const result = { ...task, resultType: 'complete', _meta: { [SERVER_INFO_META_KEY]: serverInfo } };
      message = { result, jsonrpc: '2.0', id: ordinary.id };
    } catch (error) {
      // the SDK's encoding of a thrown error: its code when it has one, -32603 otherwise; -32021 is answered 400
      const { code, message: text, data } = error as { code?: unknown; message?: unknown; data?: unknown };
      const errorCode = Number.isSafeInteger(code) ? (code as number) : ErrorCode.InternalError;
      if (errorCode === ErrorCode.MissingRequiredClientCapability) status = 400;
      message = {
        jsonrpc: '2.0',
        id: ordinary.id,
        error: { code: errorCode, message: text ?? 'Internal error', ...(data !== undefined && { data }) },
      };
    }
    const bytes = Buffer.from(JSON.stringify(message));
    res.writeHead(status, { 'content-type': 'application/json', 'content-length': bytes.length }).end(bytes);
  };
}

/**
 * The request as an ordinary `tasks/get`, or undefined when it is anything else or anything unusual: the SDK's path
 * then answers it (and refuses it, when it must).
 */
function ordinaryTaskGet(req: IncomingMessage, text: string): OrdinaryTaskGet | undefined {
  if (textNestsDeeperThan(text, MAX_REQUEST_JSON_DEPTH)) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const versionHeader = req.headers['mcp-protocol-version'];
  const nameHeader = req.headers['mcp-name'];
  if (typeof versionHeader !== 'string' || typeof nameHeader !== 'string') return undefined;
  // the SDK's own classifier: JSON-RPC shape, the `_meta` envelope, and the headers against the body
  const route = classifyInboundRequest({
    httpMethod: 'POST',
    protocolVersionHeader: versionHeader,
    mcpMethodHeader: TASK_METHODS.get,
    mcpNameHeader: nameHeader,
    body,
  });
  if (route.kind !== 'modern' || route.messageKind !== 'request') return undefined;
  if (route.classification.revision !== SERVED_REVISION || versionHeader !== SERVED_REVISION) return undefined;
  const { id, method, params } = route.message as { id: unknown; method: unknown; params?: Record<string, unknown> };
  if (method !== TASK_METHODS.get || (typeof id !== 'string' && typeof id !== 'number') || !params) return undefined;
  // multi-round-trip material in the params is lifted and judged by the SDK: not ordinary for a poll
  if ('inputResponses' in params || 'requestState' in params) return undefined;
  const parsed = GetTaskParamsSchema.safeParse(params);
  if (!parsed.success) return undefined;
  // `Mcp-Name` must mirror params.taskId (SEP-2663, Streamable HTTP); only a plain, equal value is decided here
  if (nameHeader !== parsed.data.taskId || nameHeader.startsWith(ENCODED_HEADER_PREFIX)) return undefined;
  const meta = params['_meta'] as Record<string, unknown>;
  return { id, params: parsed.data, clientCapabilities: meta[CLIENT_CAPABILITIES_META_KEY] };
}

/** The body, whose length the caller checked against its declared Content-Length (node's parser holds it to it). */
function readBody(req: IncomingMessage): Promise<Buffer[]> {
  // events, not `for await`: the async iterator showed in the CPU profile of a poll (bench/RESULTS.md, section 12)
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.once('end', () => resolve(chunks));
    req.once('error', reject);
  });
}

/**
 * The request again, its body replayed from the bytes already read, for the SDK's Node adapter, which reads the
 * request line, the headers, `auth` and the body stream.
 */
function replayed(req: IncomingMessage, chunks: Buffer[]): IncomingMessage {
  const { headers, rawHeaders, method, url, httpVersion, socket } = req;
  const auth = (req as { auth?: AuthInfo }).auth;
  return Object.assign(Readable.from(chunks, { objectMode: false }), {
    headers,
    rawHeaders,
    method,
    url,
    httpVersion,
    socket,
    ...(auth !== undefined && { auth }),
  }) as unknown as IncomingMessage;
}
