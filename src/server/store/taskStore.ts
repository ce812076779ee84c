/**
 * The TaskStore: the only home of task state on the server (docs/DESIGN.md, "The task's life on the server").
 * Every instance reads and writes the same rows; nothing about a task lives only in memory.
 *
 * Times are epoch milliseconds. Every method resolves only after its write is committed.
 */
import type { InputRequest, InputResponse, JsonObject, JsonRpcError, TaskStatus } from '../../protocol/index.js';
import type { TraceCarrier } from '../../protocol/traceContext.js';
import type { TaskCounts, TaskListPage, TaskListQuery } from './listing/query.js';

/** One entry of a task's `inputRequests`, kept for the task's life so keys are never reused and answers replay. */
export interface StoredInput {
  key: string;
  request: InputRequest;
  /** The client's answer, once `tasks/update` delivered it. */
  response: InputResponse | undefined;
  requestedAt: number;
  answeredAt: number | undefined;
}

export interface StoredTask {
  taskId: string;
  /** The caller's principal (`PrincipalResolver`): only it may see or touch the task (column `owner`). */
  principal: string;
  toolName: string;
  arguments: JsonObject;
  status: TaskStatus;
  statusMessage: string | undefined;
  createdAt: number;
  lastUpdatedAt: number;
  ttlMs: number | null;
  pollIntervalMs: number;
  resumable: boolean;
  idempotencyKey: string | undefined;
  result: JsonObject | undefined;
  error: JsonRpcError | undefined;
  cancelRequested: boolean;
  /** The lease holder: the instance (`TaskServerOptions.instanceId`) that runs the handler, and until when. */
  leaseHolder: string | undefined;
  leaseExpiresAt: number | undefined;
  /** Bumped on every claim: a write that carries an older fence is from a stale holder and is refused. */
  fence: number;
  /** How many times a handler was started for this task (1 on creation, +1 per takeover). */
  attempt: number;
  /** Every input request of the task's life, in the order they were raised. */
  inputs: StoredInput[];
  /**
   * The input kinds the creating request declared in its client capabilities (docs/DESIGN.md rule 6): the handler may
   * ask only for these. Undefined for a task created before the store kept them.
   */
  inputCapabilities: InputCapabilities | undefined;
  /**
   * The W3C trace context of the `tools/call` that created the task (docs/operations.md, "Observability"): every run of its
   * handler joins that trace, on any instance, after any restart. Undefined when there was none.
   */
  traceContext: TraceCarrier | undefined;
}

/**
 * The part of a request's declared client capabilities that says which input requests the client can answer
 * (MRTR: servers MUST NOT send input requests the client has not declared support for).
 */
export interface InputCapabilities {
  /** The elicitation modes declared; absent when elicitation was not declared (`{}` declares form only). */
  elicitation?: { form?: JsonObject; url?: JsonObject } | undefined;
  sampling?: JsonObject | undefined;
  roots?: JsonObject | undefined;
}

export interface NewTask {
  taskId: string;
  /** The caller's principal (see `StoredTask.principal`). */
  principal: string;
  toolName: string;
  arguments: JsonObject;
  createdAt: number;
  ttlMs: number | null;
  pollIntervalMs: number;
  resumable: boolean;
  idempotencyKey?: string | undefined;
  statusMessage?: string | undefined;
  /** The input kinds the creating request declared; kept for the task's life, across restarts and instances. */
  inputCapabilities?: InputCapabilities | undefined;
  /** The trace context of the creating `tools/call`, kept so that every run of the task joins its trace. */
  traceContext?: TraceCarrier | undefined;
  /** The lease holder: the creating instance holds the lease from the start. */
  leaseHolder: string;
  leaseExpiresAt: number;
  /**
   * When set, the insert is refused with OpenTaskLimitError if the principal already has this many non-terminal tasks,
   * checked in the same transaction as the insert (an idempotent replay of an existing task is never refused).
   */
  maxOpenTasksForPrincipal?: number | undefined;
  /**
   * When set, the insert is refused with StoredTaskLimitError if the principal already has this many tasks stored, open
   * or finished and not yet purged, checked in the same transaction as the insert (an idempotent replay is never
   * refused).
   */
  maxStoredTasksForPrincipal?: number | undefined;
}

/** `create` refused a task because its principal already has `limit` non-terminal tasks. */
export class OpenTaskLimitError extends Error {
  constructor(readonly limit: number) {
    super(`the principal already has ${limit} non-terminal tasks`);
    this.name = 'OpenTaskLimitError';
  }
}

/** `create` refused a task because its principal already has `limit` tasks stored (open or finished, not yet purged). */
export class StoredTaskLimitError extends Error {
  constructor(readonly limit: number) {
    super(`the principal already has ${limit} tasks stored`);
    this.name = 'StoredTaskLimitError';
  }
}

/** A JSON value as `JSON.parse` returns it: what a durable step's result and a task's checkpoint are stored as. */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** One durable step of a task (`ctx.step`): its result, committed by the lease holder, kept for the task's life. */
export interface StoredStep {
  /** Unique over the task's life. */
  name: string;
  /** The step's JSON result; undefined for a step whose function returned nothing. */
  result: JsonValue | undefined;
  committedAt: number;
}

/** What a task's earlier attempts left for the next one: its steps in commit order, and its checkpoint. */
export interface TaskSteps {
  steps: StoredStep[];
  /** The last value `ctx.checkpoint.set` committed; undefined when none was. */
  checkpoint: JsonValue | undefined;
}

/** The per-task bounds a step or checkpoint write is checked against, in the same transaction as the write. */
export interface StepWriteLimits {
  /** Most steps one task may store; a new step beyond it is refused with StepLimitError ('steps'). */
  maxSteps?: number | undefined;
  /** Most bytes of JSON one task may store in steps and checkpoint together; beyond it, StepLimitError ('bytes'). */
  maxTotalBytes?: number | undefined;
}

/** A step or checkpoint write refused because the task would hold more than `limit` steps or bytes. */
export class StepLimitError extends Error {
  constructor(
    readonly kind: 'steps' | 'bytes',
    readonly limit: number,
    /** For 'bytes': what the task would hold with this write. */
    readonly wouldHold?: number,
  ) {
    super(
      kind === 'steps'
        ? `the task already has ${limit} steps stored`
        : `the task would hold ${wouldHold} bytes of steps and checkpoint, over ${limit}`,
    );
    this.name = 'StepLimitError';
  }
}

/** Throws StepLimitError when a task holding `steps` steps and `bytes` bytes would pass a limit. */
export function checkStepLimits(limits: StepWriteLimits, steps: number, bytes: number): void {
  if (limits.maxSteps !== undefined && steps > limits.maxSteps) throw new StepLimitError('steps', limits.maxSteps);
  if (limits.maxTotalBytes !== undefined && bytes > limits.maxTotalBytes) {
    throw new StepLimitError('bytes', limits.maxTotalBytes, bytes);
  }
}

/** Proof of holding a task's lease: writes from the handler side carry it. */
export interface LeaseRef {
  taskId: string;
  fence: number;
}

/** A lease `renewLeases` extended, with whether a cancel was requested (the lease loop's fallback for a lost signal). */
export interface RenewedLease extends LeaseRef {
  cancelRequested: boolean;
}

/** An input key a running handler waits on. */
export interface AwaitedInput {
  taskId: string;
  key: string;
}

/** How much one `purge` call may do, and how long a finished task without a TTL is kept. */
export interface PurgeOptions {
  /** At most this many tasks, and this many tombstones, per call (a small step that never blocks serving). */
  limit?: number;
  /**
   * A terminal task with `ttlMs: null` is purged this long after it finished (its last update). Unset: never.
   */
  unlimitedRetentionMs?: number;
}

export type TerminalOutcome =
  | { status: 'completed'; result: JsonObject; statusMessage?: string | undefined }
  | { status: 'failed'; error: JsonRpcError; statusMessage?: string | undefined }
  | { status: 'cancelled'; statusMessage?: string | undefined };

/**
 * A committed change of a task, from any instance: `input` and `cancel` are what a running handler must hear about;
 * `status` is any other change of what `tasks/get` answers (status, message, result), for `notifications/tasks`.
 */
export interface TaskSignal {
  taskId: string;
  kind: 'input' | 'cancel' | 'status';
}

/**
 * What push's periodic check compares (src/server/taskPush.ts): every write that changes a task's DetailedTask moves its
 * status or its `lastUpdatedAt`, so an unchanged version needs no full read.
 */
export interface TaskVersion {
  taskId: string;
  status: TaskStatus;
  lastUpdatedAt: number;
  /** `createdAt + ttlMs`; undefined for an unlimited TTL. */
  expiresAt: number | undefined;
}

export interface TaskStore {
  /**
   * Inserts a task, committed when this resolves (spec: MUST NOT return CreateTaskResult before the task is durably
   * created). With an `idempotencyKey`, the same principal and key return the existing task and `created: false`.
   * Throws OpenTaskLimitError when `maxOpenTasksForPrincipal` is set and reached, StoredTaskLimitError when
   * `maxStoredTasksForPrincipal` is.
   */
  create(task: NewTask): Promise<{ task: StoredTask; created: boolean }>;

  /** The task with its inputs, or undefined when unknown or purged. */
  get(taskId: string): Promise<StoredTask | undefined>;

  /** The tasks among `taskIds` with their inputs, in one read; unknown and purged ids are left out. */
  getMany?(taskIds: string[]): Promise<StoredTask[]>;

  /**
   * Whether the id belonged to a task of `principal` that was purged after its TTL (so the error can say "expired" to
   * that principal, and only to it).
   */
  wasPurged(taskId: string, principal: string): Promise<boolean>;

  /** Handler side: a new status message. False when the lease was lost or the task is terminal. */
  setStatusMessage(lease: LeaseRef, message: string, now: number): Promise<boolean>;

  /**
   * Handler side: raise an input request and move the task to `input_required`. A key already answered returns its
   * stored response and changes nothing (a replay after restart asks nothing twice); a key already outstanding is left
   * as it is. `held: false` when the lease was lost or the task is terminal.
   */
  requestInput(
    lease: LeaseRef,
    key: string,
    request: InputRequest,
    now: number,
  ): Promise<{ held: boolean; response: InputResponse | undefined }>;

  /**
   * Handler side: commits a durable step's result under `name`, fenced like every handler write and only while the
   * task is open. A name already stored keeps its first result, which is returned (names are unique over the task's
   * life). `held: false` when the lease was lost or the task is terminal. Throws StepLimitError when a limit of
   * `limits` would be passed, checked in the same transaction as the write.
   */
  recordStep(
    lease: LeaseRef,
    name: string,
    result: JsonValue | undefined,
    now: number,
    limits?: StepWriteLimits,
  ): Promise<{ held: boolean; step: StoredStep | undefined }>;

  /**
   * Handler side: replaces the task's checkpoint, fenced like `recordStep`. False when the lease was lost or the task
   * is terminal. Throws StepLimitError when `limits.maxTotalBytes` would be passed.
   */
  saveCheckpoint(lease: LeaseRef, value: JsonValue, now: number, limits?: StepWriteLimits): Promise<boolean>;

  /** The steps and checkpoint stored for a task (none for an unknown or purged one), in one read. */
  readSteps(taskId: string): Promise<TaskSteps>;

  /** Handler side: the one terminal write. Conditional on "not yet terminal" and on the fence; false when it lost. */
  finish(lease: LeaseRef, outcome: TerminalOutcome, now: number): Promise<boolean>;

  /**
   * Client side (`tasks/update`): store responses for keys that are outstanding, ignore the rest, and move the task
   * back to `working` when nothing is outstanding any more. Returns the keys it accepted.
   */
  answerInputs(taskId: string, responses: Record<string, InputResponse>, now: number): Promise<string[]>;

  /** Client side (`tasks/cancel`): record the intent on a non-terminal task. False when already terminal or unknown. */
  requestCancel(taskId: string, now: number): Promise<boolean>;

  /**
   * Extends the leases the instance `holder` still holds (fence unchanged) and returns those; the others were lost. One
   * statement whatever the number of leases (docs/DESIGN.md, "Rules learned in the field", 8). A rejection says nothing
   * about the leases: the store could not be reached.
   */
  renewLeases(holder: string, leases: LeaseRef[], until: number): Promise<RenewedLease[]>;

  /** The stored answers among `awaited` keys, in one read (the fallback for a lost input signal). */
  answeredInputs(awaited: AwaitedInput[]): Promise<Array<AwaitedInput & { response: InputResponse }>>;

  /**
   * Takes over non-terminal tasks whose lease expired before `now`, or whose lease holder is in `deadHolders`: the
   * lease moves to the instance `holder` until `until`, the fence goes up by one, and the attempt too unless `holder`
   * held the lease already (its own run goes on) and did not hand it back (an expiry of 0: its run was stopped).
   * Returns the claimed tasks.
   */
  claimOrphans(
    holder: string,
    now: number,
    until: number,
    limit: number,
    deadHolders?: string[],
  ): Promise<StoredTask[]>;

  /** Distinct lease holders (instance ids) of non-terminal tasks (to spot dead local processes at start). */
  leaseHolders(): Promise<string[]>;

  /**
   * Fails non-terminal tasks past `createdAt + ttlMs` as expired (unfenced), at most `limit` of them (default all),
   * and returns their ids.
   */
  expireOverdue(now: number, limit?: number): Promise<string[]>;

  /**
   * Deletes terminal tasks older than `createdAt + ttlMs + retentionMs` (and, with `unlimitedRetentionMs`, terminal
   * tasks without a TTL that finished that long ago) with their inputs and steps, leaving a tombstone, and drops
   * tombstones older than a week; at most `limit` of each per call. Returns how many rows went, tasks and tombstones
   * together.
   */
  purge(now: number, retentionMs: number, options?: PurgeOptions): Promise<number>;

  /** Optional push channel for signals of every instance (LISTEN/NOTIFY); the runtime polls as the fallback. */
  subscribe?(listener: (signal: TaskSignal) => void): () => void;

  /**
   * The time, in ms since the epoch, that every instance sharing this store agrees on, for a store that instances on
   * several hosts share: leases, creation times and expiry are then stamped and compared on one clock, never on two
   * hosts' wall clocks (docs/DESIGN.md, "Rules learned in the field", 2). A store without it (SQLite: one host) runs
   * on the host's clock. `syncClock` (re)reads that clock; the TaskServer awaits it before it first claims a task.
   */
  now?(): number;
  syncClock?(): Promise<void>;

  close(): Promise<void>;

  /**
   * The versions of the tasks among `taskIds`, in one statement, without their arguments, results or inputs (the cost
   * of push's periodic check must not grow with what a task holds: docs/DESIGN.md, "Rules learned in the field", 8).
   * Unknown and purged ids are left out.
   */
  taskVersions?(taskIds: string[]): Promise<TaskVersion[]>;

  /**
   * Whose each of the tasks among `taskIds` is, in one statement, without what the tasks hold (a `subscriptions/listen`
   * asking for thousands of large tasks must not read them all at once to learn which are the caller's). Unknown and
   * purged ids are left out.
   */
  taskOwners?(taskIds: string[]): Promise<TaskOwner[]>;

  /**
   * For operators only, never served over MCP (callers must not enumerate tasks): one page of every principal's tasks
   * that `query` selects, newest first, on indexes (src/server/store/listing/query.ts). Throws TaskListQueryError for
   * a query it refuses.
   */
  listTasks?(query?: TaskListQuery): Promise<TaskListPage>;

  /** For operators only, as `listTasks`: how many tasks of each status `query` selects (its limit and cursor unused). */
  countTasks?(query?: TaskListQuery): Promise<TaskCounts>;
}

export interface TaskOwner {
  taskId: string;
  principal: string;
}

/** The StoredTask a successful insert wrote, equal to what `get` reads back (the arguments through the same JSON). */
export function insertedTask(task: NewTask, argumentsJson: string): StoredTask {
  return {
    taskId: task.taskId,
    principal: task.principal,
    toolName: task.toolName,
    arguments: JSON.parse(argumentsJson) as JsonObject,
    status: 'working',
    statusMessage: task.statusMessage,
    createdAt: task.createdAt,
    lastUpdatedAt: task.createdAt,
    ttlMs: task.ttlMs,
    pollIntervalMs: task.pollIntervalMs,
    resumable: task.resumable,
    idempotencyKey: task.idempotencyKey,
    result: undefined,
    error: undefined,
    cancelRequested: false,
    leaseHolder: task.leaseHolder,
    leaseExpiresAt: task.leaseExpiresAt,
    // the column defaults of a new row
    fence: 1,
    attempt: 1,
    inputs: [],
    inputCapabilities: task.inputCapabilities,
    traceContext: task.traceContext,
  };
}
