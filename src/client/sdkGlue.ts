/**
 * The one module of the client half that relies on how the SDK (2.4.x) behaves inside. What it relies on, each pinned
 * by test/client/sdkGlue.test.ts so an SDK upgrade that changes it fails loudly:
 *
 * 1. The 2026 codec rejects a `tools/call` result with `resultType: "task"` (SdkError UNSUPPORTED_RESULT_TYPE) and
 *    drops the body, so `callTool` cannot see a task handle (notes/sdk-v2.md, "Client side").
 * 2. A JSON-RPC error response reaches the caller as `ProtocolError` with its `code` and `data` intact
 *    (`ProtocolError.fromError` keeps unknown codes as they are).
 * 3. Transports deliver every inbound message through their public `onmessage` property, read at call time, and
 *    `Protocol` sends through the public `send`.
 * 4. The SDK recognises its stdio transport by the instance (own fields, prototype, constructor), so the instance
 *    must stay the one the application created: it is instrumented in place, not wrapped in a new object.
 * 5. In `versionNegotiation: 'auto'` the SDK probes a transport that is exactly its StdioClientTransport on a
 *    throwaway sibling process spawned from the same parameters, and probes a subclass in place. A durable stdio
 *    server takes over orphaned tasks when it starts, so the sibling would run them once more before it is killed
 *    (issue 13 item 4): `SessionStdioClientTransport` makes the probe use the one session process. Pinned by
 *    test/e2e/clientStdioRestart.test.ts, which counts the processes a connection spawns.
 * 6. Probing in place, a 2025-era stdio server that exits on any request before `initialize` fails the connect with
 *    SdkError ERA_NEGOTIATION_FAILED "... the connection closed during the server/discover probe ..."
 *    (`exitedOnVersionProbe`); connectStdioTaskClient then spawns it once more in the 2025 way. Pinned by the same file.
 *
 * The interception uses only the public `Transport` interface: `send` records which `tools/call` requests declared
 * the Tasks extension; `onmessage` turns a `resultType: "task"` answer to one of those into a JSON-RPC error that
 * carries the CreateTaskResult untouched, tagged with a per-transport nonce so no server error can pose as one.
 * `onmessage` also fills in `resultType: "complete"` where a server of an earlier revision left it out (the SDK's 2026
 * codec would refuse the result). When the SDK learns `resultType: "task"`, this file is the one to replace.
 */
import { randomUUID } from 'node:crypto';

import type { JSONRPCMessage, Transport } from '@modelcontextprotocol/client';
import {
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  ProtocolError,
  SdkError,
  SdkErrorCode,
} from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import {
  CLIENT_CAPABILITIES_META_KEY,
  PROTOCOL_VERSION_META_KEY,
  TASK_RESULT_TYPE,
  TASKS_EXTENSION_ID,
} from '../protocol/index.js';

/** A server-defined JSON-RPC code (-32000..-32099) used only between this module and the TaskClient. */
export const TASK_CARRIER_ERROR_CODE = -32099;
const CARRIER_TAG = 'io.closeout/taskCarrier';

/** Recovers CreateTaskResults that the instrumented transport carried past the SDK's result codec. */
export interface TaskResultCarrier {
  /** The raw CreateTaskResult when `error` is this transport's carrier, else undefined. */
  extract(error: unknown): Record<string, unknown> | undefined;
}

type MessageHandler = NonNullable<Transport['onmessage']>;

const carriers = new WeakMap<Transport, TaskResultCarrier>();

/**
 * Instrument `transport` (before or after `client.connect`) so a `tools/call` that declared the Tasks extension can
 * answer with a task handle. Idempotent per transport instance.
 */
export function attachTaskResultCarrier(transport: Transport): TaskResultCarrier {
  const existing = carriers.get(transport);
  if (existing) return existing;

  const nonce = randomUUID();
  // ids of tools/call requests that declared the extension and are not answered yet
  const declaring = new Set<string | number>();
  // ids of requests sent with the 2026-07-28 envelope and not answered yet
  const modern = new Set<string | number>();

  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (isJSONRPCRequest(message)) {
      if (message.method === 'tools/call' && declaresTasks(message.params)) declaring.add(message.id);
      if (hasModernEnvelope(message.params)) modern.add(message.id);
    }
    return send(message, options);
  };

  const carry = (received: JSONRPCMessage): JSONRPCMessage => {
    if (!('id' in received) || received.id === undefined || received.id === null) return received;
    const message = modern.delete(received.id) ? completeByDefault(received) : received;
    if (!declaring.delete(received.id)) return message;
    if (!isJSONRPCResultResponse(message)) return message;
    const result = message.result as Record<string, unknown>;
    if (result['resultType'] !== TASK_RESULT_TYPE) return message;
    return {
      jsonrpc: '2.0',
      id: message.id,
      error: {
        code: TASK_CARRIER_ERROR_CODE,
        message: 'CreateTaskResult carried past the SDK result codec',
        data: { [CARRIER_TAG]: nonce, result },
      },
    };
  };

  // the SDK assigns onmessage (on connect, and again around its version probe): keep wrapping whatever it assigns
  const originals = new WeakMap<MessageHandler, MessageHandler>();
  const wrap = (handler: Transport['onmessage']): Transport['onmessage'] => {
    if (handler === undefined) return undefined;
    const original = originals.get(handler) ?? handler;
    const wrapped: MessageHandler = (message, extra) => original(carry(message) as typeof message, extra);
    originals.set(wrapped, original);
    return wrapped;
  };
  let current = wrap(transport.onmessage);
  Object.defineProperty(transport, 'onmessage', {
    configurable: true,
    enumerable: true,
    get: () => current,
    set: (handler: Transport['onmessage']) => {
      current = wrap(handler);
    },
  });

  const carrier: TaskResultCarrier = {
    extract(error) {
      if (!(error instanceof ProtocolError) || error.code !== TASK_CARRIER_ERROR_CODE) return undefined;
      const data = error.data as Record<string, unknown> | undefined;
      if (data?.[CARRIER_TAG] !== nonce) return undefined;
      const result = data['result'];
      return typeof result === 'object' && result !== null ? (result as Record<string, unknown>) : undefined;
    },
  };
  carriers.set(transport, carrier);
  return carrier;
}

/**
 * basic/index "ResultType": for backward compatibility with servers of earlier revisions, clients MUST treat an
 * absent `resultType` as "complete". The SDK's 2026 codec refuses such a result instead, so it is filled in here.
 */
function completeByDefault(message: JSONRPCMessage): JSONRPCMessage {
  if (!isJSONRPCResultResponse(message)) return message;
  const result = message.result as Record<string, unknown> | undefined;
  if (typeof result !== 'object' || result === null || result['resultType'] !== undefined) return message;
  return { ...message, result: { ...result, resultType: 'complete' } };
}

function hasModernEnvelope(params: unknown): boolean {
  const meta = (params as { _meta?: Record<string, unknown> } | undefined)?._meta;
  return meta?.[PROTOCOL_VERSION_META_KEY] !== undefined;
}

/** spec: a server MUST NOT return CreateTaskResult to a request that did not declare the extension. */
function declaresTasks(params: unknown): boolean {
  const meta = (params as { _meta?: Record<string, unknown> } | undefined)?._meta;
  const capabilities = meta?.[CLIENT_CAPABILITIES_META_KEY] as { extensions?: Record<string, unknown> } | undefined;
  return capabilities?.extensions?.[TASKS_EXTENSION_ID] !== undefined;
}

/**
 * The stdio transport connectStdioTaskClient spawns its server with: the SDK's version probe runs on this process,
 * the one the session uses, never on a throwaway copy that would take over the server's orphaned tasks (point 5).
 */
export class SessionStdioClientTransport extends StdioClientTransport {}

/** True when an in-place version probe failed because the stdio server exited on `server/discover` (point 6). */
export function exitedOnVersionProbe(error: unknown): boolean {
  return (
    error instanceof SdkError &&
    error.code === SdkErrorCode.EraNegotiationFailed &&
    error.message.includes('connection closed during the server/discover probe')
  );
}
