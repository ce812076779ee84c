/**
 * Local errors of the client half. Wire errors stay what the SDK makes them (`ProtocolError` with the JSON-RPC code);
 * these say what the client decided about a submission, and name the record so the caller can act on it.
 */
import type { JsonRpcError } from '../protocol/index.js';
import type { TaskRecord } from './ledger/ledger.js';

export type TaskClientErrorCode =
  /** tools/call was sent and no usable answer came back: surfaced, never re-sent silently (S13). */
  | 'unknown-outcome'
  /** The server's answer broke the spec; what it broke is in the message. */
  | 'bad-server-output'
  /** An idempotency key was reused for a different tool or different arguments. */
  | 'idempotency-conflict'
  /** Another live process holds the lease on this record. */
  | 'leased-elsewhere'
  /** The task handle is no longer usable (-32602, or createdAt + ttlMs passed). */
  | 'expired'
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
  /** The TaskClient was closed. */
  | 'closed'
  /** The ledger could not record something that arrived (a taskId, an answer); the message names it. */
  | 'storage';

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
