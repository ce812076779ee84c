/**
 * The Ledger: the client's durable record of every submission (docs/DESIGN.md, "The task's life on the client";
 * docs/REQUIREMENTS.md S4, S6, S15). Nothing the client knows about a task lives only in memory: a process that dies
 * and restarts reads everything it needs back from here.
 *
 * Local times are epoch milliseconds of the ledger's clock (`Ledger.now`): the process's for a SQLite ledger, the
 * database's for a PostgreSQL one, which many machines share; server times (`createdAt`, `lastUpdatedAt`) are kept as
 * the ISO strings the server sent. Every method resolves only after its write is committed, except `noteSchedule`
 * (deferred bookkeeping, see there).
 */
import type { InputRequest, InputResponse, JsonObject, JsonRpcError, TaskStatus } from '../../protocol/index.js';
import type { TraceCarrier } from '../../protocol/traceContext.js';
import type { LocalState } from './localState.js';
import type { RecordCounts, RecordListPage, RecordListQuery } from './recordListing.js';

export { LOCAL_STATES, type LocalState } from './localState.js';

/** States in which a task is still open on the server and somebody should follow it. */
export const FOLLOWABLE_STATES: readonly LocalState[] = ['tracking', 'detached'];

/** The last thing that went wrong while talking to the server about this record; never a task failure (S16). */
export interface RecordedError {
  /**
   * `transport`: the request did not get a JSON-RPC answer (refused, timeout, 5xx, 429).
   * `protocol`: the server answered with a JSON-RPC error that does not end the task.
   * `server-output`: the server's answer broke the spec (unknown resultType, status going backwards, ...).
   * `input`: an input handler failed or is missing.
   * `storage`: the ledger itself failed.
   */
  kind: 'transport' | 'protocol' | 'server-output' | 'input' | 'storage';
  message: string;
  at: number;
  /** JSON-RPC code or HTTP status, when there was one. */
  code?: number | undefined;
  /** The server's Retry-After, when it gave one. */
  retryAfterMs?: number | undefined;
}

/** One `inputRequests` key the client has seen, and what it did about it (S9). */
export interface InputAnswer {
  key: string;
  request: InputRequest;
  /** When the key was first handed to an input handler (set before the handler is called). */
  askedAt: number | undefined;
  /** The answer, stored before any `tasks/update` carries it: after a crash it is re-sent, not asked again. */
  response: InputResponse | undefined;
  answeredAt: number | undefined;
  /** The last time a `tasks/update` carrying the answer was acknowledged. */
  sentAt: number | undefined;
}

export interface TaskRecord {
  /** Local identity of the submission; the taskId is only known once the server answered. */
  recordId: string;
  /** Which server: its URL, or `stdio:` and the command line. */
  endpoint: string;
  toolName: string;
  arguments: JsonObject;
  /** sha256 of the canonical JSON of the arguments: two submissions with one key must carry the same arguments. */
  argumentsDigest: string;
  correlationId: string | undefined;
  idempotencyKey: string | undefined;
  /**
   * The key sent as `_meta["io.closeout/idempotencyKey"]`: derived from `idempotencyKey` with the ledger's secret, so
   * nobody without the ledger can guess it from a business id (docs/DESIGN.md, rule 5). Undefined on records written
   * before ledger schema 2, which sent `idempotencyKey` as it is.
   */
  wireIdempotencyKey: string | undefined;
  /**
   * A keyed fingerprint of the credential the record was created under (never the credential): an answer under
   * another one says nothing about the task (docs/DESIGN.md, rule 5). Undefined on records older than ledger schema 2.
   */
  credential: string | undefined;
  taskId: string | undefined;
  localState: LocalState;
  status: TaskStatus | undefined;
  statusMessage: string | undefined;
  /** Server timestamps, as sent. */
  createdAt: string | undefined;
  lastUpdatedAt: string | undefined;
  /** `null` is the server's "unlimited"; `undefined` means no task was seen. */
  ttlMs: number | null | undefined;
  pollIntervalMs: number | undefined;
  /** Local times. */
  submittedAt: number;
  sentAt: number | undefined;
  lastPollAt: number | undefined;
  nextPollAt: number | undefined;
  lastError: RecordedError | undefined;
  /** The CallToolResult (immediate, or the completed task's `result`). */
  result: JsonObject | undefined;
  /** The JSON-RPC error of a failed task, or of a `tools/call` that failed outright. */
  error: JsonRpcError | undefined;
  /** Why the record is no longer open (terminal, expired, unknown-outcome): always set with those states (S15). */
  terminalReason: string | undefined;
  terminalAt: number | undefined;
  cancelRequestedAt: number | undefined;
  /** Explicit resubmission links (S13: never automatic). */
  resubmittedFrom: string | undefined;
  supersededBy: string | undefined;
  leaseHolder: string | undefined;
  leaseExpiresAt: number | undefined;
  updatedAt: number;
  /**
   * How long this client has itself seen the task open, by its own monotonic clock, summed over the processes that
   * followed it (time when none did is not counted): the TTL backstop's measure (docs/DESIGN.md, rule 2).
   */
  observedAgeMs: number | undefined;
  /**
   * The call's W3C trace context (and baggage) when telemetry was on: the polls and the close-out of whichever process
   * follows the task join the call's trace (docs/operations.md, "Observability"). Undefined on records older than ledger
   * schema 4 (PostgreSQL ledger: 2).
   */
  traceContext: TraceCarrier | undefined;
  /** Every input key seen for the task, in the order first seen. */
  inputs: InputAnswer[];
}

/**
 * One line of the append-only history: an observed status or local state change (S15), or a failed input handler
 * (its `note` the failure, the state unchanged).
 */
export interface HistoryEntry {
  seq: number;
  recordId: string;
  taskId: string | undefined;
  status: TaskStatus | undefined;
  statusMessage: string | undefined;
  localState: LocalState;
  /** The server's `lastUpdatedAt` when the change came from the server. */
  serverUpdatedAt: string | undefined;
  observedAt: number;
  note: string | undefined;
}

export interface NewSubmission {
  recordId: string;
  endpoint: string;
  toolName: string;
  arguments: JsonObject;
  argumentsDigest: string;
  correlationId?: string | undefined;
  idempotencyKey?: string | undefined;
  wireIdempotencyKey?: string | undefined;
  credential?: string | undefined;
  submittedAt: number;
  /** The recording process holds the lease from the start, so nobody else takes the submission for dead. */
  leaseHolder: string;
  leaseExpiresAt: number;
  resubmittedFrom?: string | undefined;
  /** The call's trace context, kept with the record (`TaskRecord.traceContext`). */
  traceContext?: TraceCarrier | undefined;
}

/** A task state as the server reported it (CreateTaskResult or tasks/get), already validated. */
export interface ObservedTask {
  taskId: string;
  status: TaskStatus;
  statusMessage: string | undefined;
  createdAt: string;
  lastUpdatedAt: string;
  ttlMs: number | null;
  pollIntervalMs: number | undefined;
  result?: JsonObject | undefined;
  error?: JsonRpcError | undefined;
  inputRequests?: Record<string, InputRequest> | undefined;
}

/** How a record leaves the open states. */
export interface Closing {
  localState: 'terminal' | 'expired' | 'unknown-outcome';
  reason: string;
  result?: JsonObject | undefined;
  error?: JsonRpcError | undefined;
  lastError?: RecordedError | undefined;
  /**
   * The answer that ended a call without a task (an immediate result, a JSON-RPC error), which arrived (docs/DESIGN.md
   * rule 10): it also closes a record that never had a task and that another process settled `unknown-outcome`
   * meanwhile, as a taskId that arrives is committed.
   */
  arrived?: boolean | undefined;
}

export interface LedgerFilter {
  endpoint?: string | undefined;
  localStates?: readonly LocalState[] | undefined;
  toolName?: string | undefined;
  correlationId?: string | undefined;
  idempotencyKey?: string | undefined;
  /** Only records submitted at or after this local time. */
  submittedSince?: number | undefined;
  /**
   * Only followable records whose lease is free or ran out before this local time: what a worker may take over from
   * one that stopped renewing.
   */
  claimableAt?: number | undefined;
  limit?: number | undefined;
}

/** What `noteSchedule` records; a field left out is left as it is. */
export interface ScheduleNote {
  /** A poll got an answer at this local time. */
  polledAt?: number | undefined;
  /** The next poll is planned at this local time; `null`: none planned. */
  nextPollAt?: number | null | undefined;
  /** How long this client has seen the task open so far (see `TaskRecord.observedAgeMs`); never lowered. */
  observedAgeMs?: number | undefined;
}

/**
 * Result of recording an intent: a new record, or the live record that already holds the idempotency key. A
 * resubmission is also refused (`refused`) when the old record is still open, or was resubmitted already (`record`
 * is then the resubmission that won).
 */
export type RecordedIntent =
  | { created: true; record: TaskRecord }
  | { created: false; record: TaskRecord; refused?: 'still-open' | 'already-resubmitted' | undefined };

/**
 * Writes that drive a task (`holder` parameter) apply only while `holder` holds the record's lease and return
 * `false` otherwise: a process that lost its lease stops driving the task instead of fighting over it.
 */
export interface Ledger {
  /** Where the ledger lives, fit for display (a file path; a connection string without its password), for messages. */
  readonly location?: string | undefined;
  /**
   * Record the intent before `tools/call` is sent. When a record with the same endpoint and idempotency key is
   * already current (not superseded), nothing is inserted and that record comes back instead.
   */
  recordIntent(submission: NewSubmission): Promise<RecordedIntent>;
  /**
   * Record an explicit resubmission: a new record, and the old one marked superseded by it, in one transaction that
   * first checks the old record is closed and not superseded yet, so of two concurrent resubmissions one goes through.
   */
  recordResubmission(previousRecordId: string, submission: NewSubmission): Promise<RecordedIntent>;
  /** `tools/call` is about to leave: from here on, silence means `unknown-outcome`. */
  markSent(recordId: string, holder: string, at: number): Promise<boolean>;
  /**
   * The first thing done with a handle: commit its taskId and seed state (S4). An answer that arrived is a fact
   * (docs/DESIGN.md rule 10): it is recorded on a record still `submitting` or already settled `unknown-outcome`,
   * whoever held the lease, and `holder` holds the lease from then on (until `leaseExpiresAt`, when given). `true` when
   * the record holds the taskId now; `false` when the record is gone, holds another task, or another record of the
   * endpoint holds this task already (a resubmission with the same idempotency key: `findByTaskId` names it).
   */
  commitTask(
    recordId: string,
    holder: string,
    task: ObservedTask,
    at: number,
    leaseExpiresAt?: number,
  ): Promise<boolean>;
  /** A `tasks/get` answer: status fields, result or error, a history line when the status changed. */
  recordObservation(recordId: string, holder: string, task: ObservedTask, at: number): Promise<boolean>;
  /** A poll happened (or failed): the last poll time and, when something went wrong, the error. */
  recordPoll(recordId: string, holder: string, at: number, lastError: RecordedError | undefined): Promise<boolean>;
  /**
   * Schedule bookkeeping: a successful poll's time and when the next poll is planned. The one deferred write: it may
   * be committed later, together with others (SqliteLedger: with its next transaction, at most `deferMs` later), and
   * a crash may lose it, because nothing is decided from it: after a crash every open task is queried before
   * anything else (S7). Reads of this ledger object see it at once. Applies only while `holder` holds the lease;
   * `nextPollAt` only while the record is tracked.
   */
  noteSchedule(recordId: string, holder: string, note: ScheduleNote): void;
  /**
   * Record an error without a poll (input handlers, server output of cancel/update, storage). Any process. A failed
   * input handler (kind `input`) is also a line of the history (`errorNote`).
   */
  recordError(recordId: string, lastError: RecordedError): Promise<void>;
  /**
   * Close a record out: it leaves the open states (an `expired` record may come back with `reopen`). Not to be
   * confused with `dispose()`, which closes the storage.
   */
  closeOut(recordId: string, holder: string, closing: Closing, at: number): Promise<boolean>;
  /**
   * An `expired` record whose task the server still knows (it was checked again): tracked again, with `holder`
   * holding the lease. False when the record is not expired.
   */
  reopen(recordId: string, holder: string, leaseExpiresAt: number, at: number, note: string): Promise<boolean>;
  /** Mark records stuck in `submitting` whose lease expired as `unknown-outcome` (S13: surfaced, never re-sent). */
  settleAbandonedSubmissions(endpoint: string, now: number, reason: string): Promise<TaskRecord[]>;
  /** Let go of a followed task without closing it. */
  detach(recordId: string, holder: string, at: number): Promise<boolean>;
  /** The application asked for cancellation (any process may). */
  recordCancelRequest(recordId: string, at: number): Promise<void>;

  /** Take the lease when it is free, expired, or already ours. Reattaching a detached record makes it tracked. */
  claim(recordId: string, holder: string, leaseExpiresAt: number, now: number): Promise<boolean>;
  /** `claim` for many records in one transaction; resolves with the ids claimed, in the order given. */
  claimAll(recordIds: readonly string[], holder: string, leaseExpiresAt: number, now: number): Promise<string[]>;
  /** Whether `holder` holds the lease on the record and it is still tracked (the cheap check before a poll). */
  isTrackedBy(recordId: string, holder: string): Promise<boolean>;
  /** `isTrackedBy` for many records in one read (the polls of one wake-up): the ids among them `holder` tracks. */
  trackedAmong(recordIds: readonly string[], holder: string): Promise<ReadonlySet<string>>;
  /** Extend every lease `holder` holds on open records to `leaseExpiresAt`. */
  renewLeases(holder: string, leaseExpiresAt: number): Promise<void>;
  release(recordId: string, holder: string): Promise<void>;
  /** Free every lease `holder` holds (its process is known to be dead); resolves with how many. */
  releaseAllOf(holder: string): Promise<number>;

  /** Remember an input key before its handler is called (so a crash mid-handler is known). */
  recordInputAsked(recordId: string, holder: string, key: string, request: InputRequest, at: number): Promise<boolean>;
  /**
   * Store an answer, whoever holds the lease (docs/DESIGN.md rule 10: the holder sends stored answers); the first
   * stored answer for a key wins and is returned; undefined when the record is gone.
   */
  recordInputAnswer(
    recordId: string,
    holder: string,
    key: string,
    request: InputRequest,
    response: InputResponse,
    at: number,
  ): Promise<InputAnswer | undefined>;
  /** A `tasks/update` carrying these keys was acknowledged. */
  recordInputsSent(recordId: string, keys: readonly string[], at: number): Promise<void>;

  get(recordId: string): Promise<TaskRecord | undefined>;
  findByTaskId(endpoint: string, taskId: string): Promise<TaskRecord | undefined>;
  /** The current (not superseded) record holding an idempotency key. */
  findByIdempotencyKey(endpoint: string, idempotencyKey: string): Promise<TaskRecord | undefined>;
  list(filter?: LedgerFilter): Promise<TaskRecord[]>;
  history(recordId: string): Promise<HistoryEntry[]>;

  /**
   * For people (the console): one page of the records `query` selects, newest first, on the ledger's listing indexes
   * (src/client/ledger/recordListing.ts). Throws RecordListQueryError for a query it refuses.
   */
  listRecords?(query?: RecordListQuery): Promise<RecordListPage>;
  /** For people, as `listRecords`: how many records of each status the query's tool and search select. */
  countRecords?(query?: RecordListQuery): Promise<RecordCounts>;

  /** The ledger's own random secret (created with the ledger): keys fingerprints and wire idempotency keys. */
  secret(): Promise<Uint8Array>;

  /**
   * The time every process on this ledger stamps and compares its times on (leases above all): one clock for all of
   * them, whatever their hosts' wall clocks say (docs/DESIGN.md, "Rules learned in the field", 2). A SQLite ledger is
   * one machine's: its clock. A PostgreSQL ledger, shared by workers on many machines: the database's.
   */
  now(): number;

  /** Close the underlying storage. */
  dispose(): Promise<void>;
}

/**
 * Whether a ledger write may succeed when tried again later: another process holds the write lock (a large resume, a
 * backup, a sqlite3 shell), or the disk is full or failing for a moment. SQLite's result codes, as better-sqlite3
 * names them; any other ledger may mark an error `transient: true`.
 */
export function isTransientStorageError(error: unknown): boolean {
  const { code, transient } = (error ?? {}) as { code?: unknown; transient?: unknown };
  return transient === true || (typeof code === 'string' && /^SQLITE_(BUSY|LOCKED|IOERR|FULL|PROTOCOL)/.test(code));
}

/** Whether a record is still open on the server side (somebody should follow it, or may pick it up). */
export function isFollowable(state: LocalState): boolean {
  return FOLLOWABLE_STATES.includes(state);
}
