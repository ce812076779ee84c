/**
 * Local errors of the client half. Wire errors stay what the SDK makes them (`ProtocolError` with the JSON-RPC code);
 * these say what the client decided about a submission, and name the record so the caller can act on it.
 */
import type { JsonRpcError } from '../protocol/index.js';
import type { TaskRecord } from './ledger/ledger.js';

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
