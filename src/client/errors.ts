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
  /**
   * An input handler's signal: this process could not renew its lease on the record in time (its ledger unreachable
   * for it alone, or slow), so another worker may take the record and ask again; nothing this round returns is sent.
   */
  | 'lease-unrenewed'
  /** The server could not be reached (refused, reset, timed out, HTTP 5xx); nothing was sent, nothing recorded. */
  | 'unreachable'
  /** The server refused this client's credential (HTTP 401 or 403). */
  | 'unauthorized'
  /** The server answered, but no MCP session could be made with it (not an MCP endpoint, no common revision). */
  | 'protocol'
  /** The ledger could not record something that arrived (a taskId, an answer); the message names it. */
  | 'storage'
  /**
   * Another process held the ledger's write lock longer than its busy timeout (a backup, a sqlite3 shell, a large
   * resume): the operation did nothing; try it again once that process is done.
   */
  | 'ledger-busy'
  /**
   * The ledger cannot be opened or used: its directory is missing, its permissions refuse it, it is no Closeout ledger
   * or one of a newer version, its PostgreSQL database cannot be reached. The message says which and what to do.
   */
  | 'ledger-unavailable'
  /**
   * A call's tool name, idempotency key or correlation id holds NUL or a lone surrogate, which no ledger or server
   * store keeps as it is (docs/DESIGN.md rule 14); the message names the field. Nothing was recorded or sent.
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

/**
 * What a failure of the ledger means to a user, as a TaskClientError with the SQLite or PostgreSQL error as its cause:
 * `ledger-busy` while another process holds the write lock, else `ledger-unavailable`. `location` is the ledger as it
 * may be shown (a path, a connection string without its password); `outcome` what became of the operation.
 */
export function ledgerFailure(location: string | undefined, error: unknown, outcome: string): TaskClientError {
  if (error instanceof TaskClientError) return error;
  const ledger = location === undefined ? 'the ledger' : `the ledger ${location}`;
  const code = (error as { code?: unknown } | undefined)?.code;
  const message = error instanceof Error ? error.message : String(error);
  const failure = (code: TaskClientErrorCode, text: string) =>
    new TaskClientError(code, `${text}; ${outcome}`, { cause: error });
  if (typeof code === 'string' && /^SQLITE_(BUSY|LOCKED)/.test(code)) {
    return failure(
      'ledger-busy',
      `${ledger} is locked by another process (${message}): wait for it to finish (a backup, a sqlite3 shell, a large resume) and try again`,
    );
  }
  if (code === 'ENOENT') {
    return failure(
      'ledger-unavailable',
      `cannot open ${ledger}: its directory does not exist (create it, or use another path)`,
    );
  }
  if (
    code === 'EACCES' ||
    code === 'EPERM' ||
    (typeof code === 'string' && /^SQLITE_(CANTOPEN|READONLY|PERM)/.test(code))
  ) {
    return failure(
      'ledger-unavailable',
      `cannot open ${ledger} (${message}): check its permissions, or use another path`,
    );
  }
  if (typeof code === 'string' && /^SQLITE_(NOTADB|CORRUPT)/.test(code)) {
    return failure(
      'ledger-unavailable',
      `${ledger} is corrupt or not a Closeout ledger (${message}): move it aside, or use another path`,
    );
  }
  if (/newer than this build/.test(message)) {
    const newer = message.replace(/: upgrade closeout$/, '');
    return failure('ledger-unavailable', `${newer}: upgrade closeout, or use another ledger`);
  }
  return failure(
    'ledger-unavailable',
    `${ledger} cannot be used (${message}): check its file, or for PostgreSQL that the database is up and the URL right`,
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
