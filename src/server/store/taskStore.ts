/**
 * The TaskStore: the only home of task state on the server (DESIGN.md, "The task's life on the server").
 * Every instance reads and writes the same rows; nothing about a task lives only in memory.
 *
 * Times are epoch milliseconds. Every method resolves only after its write is committed.
 */
import type { InputRequest, InputResponse, JsonObject, JsonRpcError, TaskStatus } from '../../protocol/index.js';

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
  /** The caller's principal: only it may see or touch the task. */
  owner: string;
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
  /** The runtime instance that runs the handler, and until when its claim holds. */
  leaseOwner: string | undefined;
  leaseExpiresAt: number | undefined;
  /** Bumped on every claim: a write that carries an older fence is from a stale owner and is refused. */
  fence: number;
  /** How many times a handler was started for this task (1 on creation, +1 per takeover). */
  attempt: number;
  /** Every input request of the task's life, in the order they were raised. */
  inputs: StoredInput[];
  /**
   * The input kinds the creating request declared in its client capabilities (DESIGN.md rule 6): the handler may ask
   * only for these. Undefined for a task created before the store kept them.
   */
  inputCapabilities: InputCapabilities | undefined;
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
  owner: string;
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
  /** The creating instance holds the lease from the start. */
  leaseOwner: string;
  leaseExpiresAt: number;
  /**
   * When set, the insert is refused with OpenTaskLimitError if `owner` already has this many non-terminal tasks,
   * checked in the same transaction as the insert (an idempotent replay of an existing task is never refused).
   */
  maxOpenTasksForOwner?: number | undefined;
  /**
   * When set, the insert is refused with StoredTaskLimitError if `owner` already has this many tasks stored, open or
   * finished and not yet purged, checked in the same transaction as the insert (an idempotent replay is never refused).
   */
  maxStoredTasksForOwner?: number | undefined;
}

/** `create` refused a task because its owner already has `limit` non-terminal tasks. */
export class OpenTaskLimitError extends Error {
  constructor(readonly limit: number) {
    super(`the owner already has ${limit} non-terminal tasks`);
    this.name = 'OpenTaskLimitError';
  }
}

/** `create` refused a task because its owner already has `limit` tasks stored (open or finished, not yet purged). */
export class StoredTaskLimitError extends Error {
  constructor(readonly limit: number) {
    super(`the owner already has ${limit} tasks stored`);
    this.name = 'StoredTaskLimitError';
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

export interface TaskStore {
  /**
   * Inserts a task, committed when this resolves (spec: MUST NOT return CreateTaskResult before the task is durably
   * created). With an `idempotencyKey`, the same owner and key return the existing task and `created: false`.
   * Throws OpenTaskLimitError when `maxOpenTasksForOwner` is set and reached, StoredTaskLimitError when
   * `maxStoredTasksForOwner` is.
   */
  create(task: NewTask): Promise<{ task: StoredTask; created: boolean }>;

  /** The task with its inputs, or undefined when unknown or purged. */
  get(taskId: string): Promise<StoredTask | undefined>;

  /** The tasks among `taskIds` with their inputs, in one read; unknown and purged ids are left out. */
  getMany?(taskIds: string[]): Promise<StoredTask[]>;

  /**
   * Whether the id belonged to a task of `owner` that was purged after its TTL (so the error can say "expired" to
   * its owner, and only to its owner).
   */
  wasPurged(taskId: string, owner: string): Promise<boolean>;

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
   * Extends the leases `owner` still holds (fence unchanged) and returns those; the others were lost. One statement
   * whatever the number of leases (DESIGN.md, "Rules learned in the field", 8). A rejection says nothing about the
   * leases: the store could not be reached.
   */
  renewLeases(owner: string, leases: LeaseRef[], until: number): Promise<RenewedLease[]>;

  /** The stored answers among `awaited` keys, in one read (the fallback for a lost input signal). */
  answeredInputs(awaited: AwaitedInput[]): Promise<Array<AwaitedInput & { response: InputResponse }>>;

  /**
   * Takes over non-terminal tasks whose lease expired before `now`, or whose lease owner is in `deadOwners`: the
   * lease moves to `owner` until `until`, the fence and the attempt go up by one. Returns the claimed tasks.
   */
  claimOrphans(owner: string, now: number, until: number, limit: number, deadOwners?: string[]): Promise<StoredTask[]>;

  /** Distinct lease owners of non-terminal tasks (to spot dead local processes at start). */
  leaseOwners(): Promise<string[]>;

  /**
   * Fails non-terminal tasks past `createdAt + ttlMs` as expired (unfenced), at most `limit` of them (default all),
   * and returns their ids.
   */
  expireOverdue(now: number, limit?: number): Promise<string[]>;

  /**
   * Deletes terminal tasks older than `createdAt + ttlMs + retentionMs` (and, with `unlimitedRetentionMs`, terminal
   * tasks without a TTL that finished that long ago), leaving a tombstone, and drops tombstones older than a week;
   * at most `limit` of each per call. Returns how many rows went, tasks and tombstones together.
   */
  purge(now: number, retentionMs: number, options?: PurgeOptions): Promise<number>;

  /** Optional push channel for signals of every instance (LISTEN/NOTIFY); the runtime polls as the fallback. */
  subscribe?(listener: (signal: TaskSignal) => void): () => void;

  close(): Promise<void>;
}
