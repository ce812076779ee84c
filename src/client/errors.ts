/**
 * Local errors of the client half. Wire errors stay what the SDK makes them (`ProtocolError` with the JSON-RPC code);
 * these say what the client decided about a submission, and name the record so the caller can act on it.
 */
import type { JsonRpcError } from '../protocol/index.js';
import type { TaskRecord } from './ledger/ledger.js';
import { classifyTransportError } from './transport/transportFailure.js';

export type TaskClientErrorCode =
  /** tools/call was sent and no usable answer came back: surfaced, never re-sent silently (docs/REQUIREMENTS.md S13). */
  | 'unknown-outcome'
  /** tools/call asked (MRTR) for input this client could not give: no handler, or the handler failed. Nothing ran. */
  | 'input-unavailable'
  /** The server's answer broke the spec; what it broke is in the message. */
  | 'bad-server-output'
  /** An idempotency key was reused for a different tool or different arguments. */
  | 'idempotency-conflict'
  /** Another live process holds the lease on this record. */
  | 'leased-elsewhere'
  /** The task handle is no longer usable (-32602, or its ttlMs passed by this client's own clock). */
  | 'expired'
  /**
   * The server answered -32602 for a task created under another credential: that says nothing about the task, and
   * the record stays open for a process that holds the credential it was created under.
   */
  | 'wrong-credential'
  /** The task ended `failed`; `error` is the server's JSON-RPC error. */
  | 'failed'
  /** The task ended `cancelled`. */
  | 'cancelled'
  /** The handle was detached before the task ended. */
  | 'detached'
  /** The operation needs a record in another state (e.g. resubmitting a task that is still open). */
  | 'invalid-state'
  /** No record matches the reference. */
  | 'not-found'
  /** The connection to the server closed and could not be made again; the record stays open for a resume. */
  | 'disconnected'
  /** The TaskClient was closed. */
  | 'closed'
  /** The server could not be reached (refused, reset, timed out, HTTP 5xx); nothing was sent, nothing recorded. */
  | 'unreachable'
  /** The server refused this client's credential (HTTP 401 or 403). */
  | 'unauthorized'
  /** The server answered, but no MCP session could be made with it (not an MCP endpoint, no common revision). */
  | 'protocol'
  /** The ledger could not record something that arrived (a taskId, an answer); the message names it. */
  | 'storage'
  /**
   * A call's tool name, idempotency key or correlation id holds NUL or a lone surrogate, which no ledger or server
   * store keeps as it is (docs/DESIGN.md rule 15); the message names the field. Nothing was recorded or sent.
   */
  | 'invalid-argument';

export class TaskClientError extends Error {
  readonly code: TaskClientErrorCode;
  readonly recordId: string | undefined;
  readonly taskId: string | undefined;
  /** The JSON-RPC error of a failed task. */
  readonly error: JsonRpcError | undefined;

  constructor(
    code: TaskClientErrorCode,
    message: string,
    details: { record?: TaskRecord | undefined; error?: JsonRpcError | undefined; cause?: unknown } = {},
  ) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'TaskClientError';
    this.code = code;
    this.recordId = details.record?.recordId;
    this.taskId = details.record?.taskId;
    this.error = details.error;
  }
}

/**
 * What a failed attempt to connect to `endpoint` means to a user, as a TaskClientError with a stable code and what to
 * do about it.
 */
export function connectionError(endpoint: string, error: unknown): TaskClientError {
  if (error instanceof TaskClientError) return error;
  const failure = classifyTransportError(error);
  const status = failure?.status ?? httpStatusOf(error);
  if (status === 401 || status === 403) {
    return new TaskClientError(
      'unauthorized',
      `the server at ${endpoint} refused this client's credential (HTTP ${status}): check the bearer token given in requestInit.headers.authorization`,
      { cause: error },
    );
  }
  // a server that is down, restarting or overloaded; any other HTTP answer (404, 400) is not mended by waiting
  if (failure && (failure.kind !== 'http' || status === undefined || status >= 500 || status === 429)) {
    return new TaskClientError(
      'unreachable',
      `the server at ${endpoint} cannot be reached (${failure.message}): is it running, and is the URL right? Nothing was sent`,
      { cause: error },
    );
  }
  return new TaskClientError(
    'protocol',
    `no MCP session could be made with ${endpoint}: ${error instanceof Error ? error.message : String(error)} (is it an MCP endpoint, speaking 2025-06-18 or later?)`,
    { cause: error },
  );
}

function httpStatusOf(error: unknown): number | undefined {
  for (let cause: unknown = error, depth = 0; cause instanceof Error && depth < 5; depth += 1) {
    const data = (cause as { data?: { status?: unknown } }).data;
    if (typeof data?.status === 'number') return data.status;
    const status = (cause as { status?: unknown }).status;
    if (typeof status === 'number') return status;
    cause = cause.cause;
  }
  return undefined;
}
