/**
 * The one module of the client half that relies on how the SDK (2.4.x) behaves inside. What it relies on, each pinned
 * by test/client/sdkGlue.test.ts so an SDK upgrade that changes it fails loudly:
 *
 * 1. The 2026 codec rejects a `tools/call` result with `resultType: "task"` (SdkError UNSUPPORTED_RESULT_TYPE) and
 *    drops the body, so `callTool` cannot see a task handle.
 * 2. A JSON-RPC error response reaches the caller as `ProtocolError` with its `code` and `data` intact
 *    (`ProtocolError.fromError` keeps unknown codes as they are).
 * 3. Transports deliver every inbound message through their public `onmessage` property, read at call time, and
 *    `Protocol` sends through the public `send`.
 * 4. The SDK recognises its stdio transport by the instance (own fields, prototype, constructor), so the instance
 *    must stay the one the application created: it is instrumented in place, not wrapped in a new object.
 * 5. In `versionNegotiation: 'auto'` the SDK probes a transport that is exactly its StdioClientTransport on a
 *    throwaway sibling process spawned from the same parameters, and probes a subclass in place. A durable stdio
 *    server takes over orphaned tasks when it starts, so the sibling would run them once more before it is killed
 *   : `SessionStdioClientTransport` makes the probe use the one session process. Pinned by
 *    test/e2e/clientStdioRestart.test.ts, which counts the processes a connection spawns.
 * 6. Probing in place, a 2025-era stdio server that exits on any request before `initialize` fails the connect with
 *    SdkError ERA_NEGOTIATION_FAILED "... the connection closed during the server/discover probe ..."
 *    (`exitedOnVersionProbe`); connectStdioTaskClient then spawns it once more in the 2025 way. Pinned by the same file.
 *
 * 7. `Client.listen()` (2026-07-28 `subscriptions/listen`) sends its request through the transport's `send` with an id
 *    of its own, settles on the acknowledgement, on the listen's JSON-RPC answer and on the end of its stream, but
 *    passes on only the notification kinds it knows: `notifications/tasks` (SEP-2663, "Task Status Notifications")
 *    and the acknowledgement's `taskIds` do not reach the application (the SDK's schemas know
 *    `notifications/tasks/status` but not `notifications/tasks`, and the subscription filter schema it reads the
 *    acknowledgement with has no `taskIds`).
 *    `listenForTasks` keeps the SDK's stream life cycle and takes the task side off the wire below it. Pinned by
 *    test/client/push.test.ts.
 *
 * The interception uses only the public `Transport` interface: `send` records which `tools/call` requests declared
 * the Tasks extension; `onmessage` turns a `resultType: "task"` answer to one of those into a JSON-RPC error that
 * carries the CreateTaskResult untouched, tagged with a per-transport nonce so no server error can pose as one.
 * `onmessage` also fills in `resultType: "complete"` where a server of an earlier revision left it out (the SDK's 2026
 * codec would refuse the result). When the SDK learns `resultType: "task"`, this file is the one to replace.
 */
import { randomUUID } from 'node:crypto';

import type { Client, JSONRPCMessage, Transport } from '@modelcontextprotocol/client';
import {
  isJSONRPCRequest,
  isJSONRPCResultResponse,
  ProtocolError,
  SdkError,
  SdkErrorCode,
} from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

import {
  SUBSCRIPTION_ID_META_KEY,
  SUBSCRIPTIONS_LISTEN_METHOD,
  TASK_STATUS_NOTIFICATION_METHOD,
} from '../../protocol/constants.js';
import {
  CLIENT_CAPABILITIES_META_KEY,
  PROTOCOL_VERSION_META_KEY,
  TASK_RESULT_TYPE,
  TASKS_EXTENSION_ID,
} from '../../protocol/index.js';

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

const ACKNOWLEDGED_METHOD = 'notifications/subscriptions/acknowledged';

/** What a task stream is told, from below the SDK. */
export interface TaskStreamListener {
  /** The acknowledgement's `notifications.taskIds` as the server sent it; undefined when the field is absent. */
  acknowledged(taskIds: unknown): void;
  /** The `params` of one `notifications/tasks` of this stream (a DetailedTask, plus `_meta`). */
  task(params: Record<string, unknown>): void;
}

/** The task side of the transport: listen requests about to leave, and the live ones by subscription id. */
interface TaskListens {
  /** Set by listenForTasks just before `Client.listen()` sends, taken by `send` (the SDK sends synchronously). */
  next: { meta: Record<string, unknown>; listener: TaskStreamListener; sent?: string | number } | undefined;
  live: Map<string | number, TaskStreamListener>;
}
const listens = new WeakMap<Transport, TaskListens>();

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

  const tasksListens: TaskListens = { next: undefined, live: new Map() };
  listens.set(transport, tasksListens);

  const send = transport.send.bind(transport);
  transport.send = (message, options) => {
    if (isJSONRPCRequest(message)) {
      if (message.method === 'tools/call' && declaresTasks(message.params)) declaring.add(message.id);
      if (hasModernEnvelope(message.params)) modern.add(message.id);
      const next = tasksListens.next;
      if (message.method === SUBSCRIPTIONS_LISTEN_METHOD && next && next.sent === undefined) {
        // SEP-2663: task notifications are asked for with the extension declared, on this request only
        // (docs/REQUIREMENTS.md S1)
        next.sent = message.id;
        tasksListens.live.set(message.id, next.listener);
        const params = (message.params ?? {}) as { _meta?: Record<string, unknown> };
        message = { ...message, params: { ...params, _meta: { ...params._meta, ...next.meta } } };
      }
    }
    return send(message, options);
  };

  /** A task stream's own notifications are taken here; undefined: consumed. */
  const demux = (received: JSONRPCMessage): JSONRPCMessage | undefined => {
    if (!('method' in received) || 'id' in received) return received;
    if (received.method !== ACKNOWLEDGED_METHOD && received.method !== TASK_STATUS_NOTIFICATION_METHOD) {
      return received;
    }
    const params = (received.params ?? {}) as Record<string, unknown>;
    const subscriptionId = (params['_meta'] as Record<string, unknown> | undefined)?.[SUBSCRIPTION_ID_META_KEY];
    const listener =
      typeof subscriptionId === 'string' || typeof subscriptionId === 'number'
        ? tasksListens.live.get(subscriptionId)
        : undefined;
    if (received.method === ACKNOWLEDGED_METHOD) {
      // the SDK settles its listen on it too, after this
      listener?.acknowledged((params['notifications'] as Record<string, unknown> | undefined)?.['taskIds']);
      return received;
    }
    // spec: a notification of a subscription this client does not hold is not its business: dropped
    listener?.task(params);
    return undefined;
  };

  const carry = (received: JSONRPCMessage): JSONRPCMessage | undefined => {
    if (demux(received) === undefined) return undefined;
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
    const wrapped: MessageHandler = (message, extra) => {
      const carried = carry(message);
      if (carried !== undefined) original(carried as typeof message, extra);
    };
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

/** An open task stream: how it ended, and the way to close it. */
export interface TaskStream {
  /** Resolves when the stream ends: `local` (closed here), `graceful` (the server's completion result), `remote`. */
  readonly ended: Promise<'local' | 'graceful' | 'remote'>;
  close(): Promise<void>;
}

/**
 * Open one `subscriptions/listen` stream asking `notifications/tasks` for `taskIds` (SEP-2663, "Task Status
 * Notifications"), through the SDK's `Client.listen()` (point 7). `meta` is merged into the request's `_meta` (the
 * per-request capabilities that declare the extension). `listener` hears the acknowledgement and every task
 * notification as they arrive (before this resolves: the server may send the tasks' states right after its
 * acknowledgement). Rejects as `Client.listen()` does: a JSON-RPC error, a 2025-era connection, no acknowledgement
 * within `timeoutMs`.
 */
export async function listenForTasks(
  client: Client,
  taskIds: readonly string[],
  meta: Record<string, unknown>,
  listener: TaskStreamListener,
  timeoutMs: number,
): Promise<TaskStream> {
  const transport = client.transport;
  if (!transport) throw new SdkError(SdkErrorCode.NotConnected, 'Not connected');
  attachTaskResultCarrier(transport);
  const state = listens.get(transport)!;
  const next: NonNullable<TaskListens['next']> = { meta, listener };
  state.next = next;
  let opening: ReturnType<Client['listen']>;
  try {
    // the SDK's filter type knows only the base protocol's kinds; `taskIds` is the extension's (SEP-2663)
    opening = client.listen({ taskIds: [...taskIds] } as Parameters<Client['listen']>[0], { timeout: timeoutMs });
  } finally {
    state.next = undefined;
  }
  const forget = () => {
    if (next.sent !== undefined) state.live.delete(next.sent);
  };
  let subscription: Awaited<ReturnType<Client['listen']>>;
  try {
    subscription = await opening;
  } catch (error) {
    forget();
    throw error;
  }
  const ended = subscription.closed.then((cause) => {
    forget();
    return cause;
  });
  return { ended, close: () => subscription.close() };
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
