/** The extension identifier (SEP-2663 "Extension Identifier"). */
export const TASKS_EXTENSION_ID = 'io.modelcontextprotocol/tasks';

/** Per-request client capabilities live under this `_meta` key (MCP 2026-07-28, basic/index "_meta"). */
export const CLIENT_CAPABILITIES_META_KEY = 'io.modelcontextprotocol/clientCapabilities';

/** The protocol revision of a request lives under this `_meta` key (MCP 2026-07-28, basic/index "_meta"). */
export const PROTOCOL_VERSION_META_KEY = 'io.modelcontextprotocol/protocolVersion';

/** Closeout's own `_meta` key for idempotent task creation; servers that are not Closeout ignore it. */
export const IDEMPOTENCY_KEY_META_KEY = 'io.closeout/idempotencyKey';

/** The `resultType` of a CreateTaskResult (SEP-2663 "Polymorphic Results"). */
export const TASK_RESULT_TYPE = 'task';

/** Methods added by the extension. */
export const TASK_METHODS = {
  get: 'tasks/get',
  update: 'tasks/update',
  cancel: 'tasks/cancel',
} as const;

/** JSON-RPC error codes the extension uses (SEP-2663 "Protocol Errors"). */
export const ErrorCode = {
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  /** Streamable HTTP: a routing header disagrees with the body (MCP 2026-07-28, transports). */
  HeaderMismatch: -32020,
  MissingRequiredClientCapability: -32021,
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** Largest taskId either half accepts on the wire; ours are 32 characters. */
export const MAX_TASK_ID_LENGTH = 256;

/** Largest inputRequests key accepted on the wire. */
export const MAX_INPUT_KEY_LENGTH = 256;

/** The `data` of a -32021 error that names this extension (SEP-2663 "Capability Negotiation"). */
export function requiredTasksCapabilityData(): {
  requiredCapabilities: { extensions: Record<string, Record<string, never>> };
} {
  return { requiredCapabilities: { extensions: { [TASKS_EXTENSION_ID]: {} } } };
}

/** The stream a client opens for server notifications (MCP 2026-07-28, basic/patterns/subscriptions). */
export const SUBSCRIPTIONS_LISTEN_METHOD = 'subscriptions/listen';

/** Every message of a `subscriptions/listen` stream carries its subscription id under this `_meta` key. */
export const SUBSCRIPTION_ID_META_KEY = 'io.modelcontextprotocol/subscriptionId';

/** The task status notification pushed on a `subscriptions/listen` stream (SEP-2663 "Task Status Notifications"). */
export const TASK_STATUS_NOTIFICATION_METHOD = 'notifications/tasks';
