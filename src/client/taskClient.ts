/**
 * TaskClient: call tools on any Tasks server and close out every result (DESIGN.md, "The task's life on the
 * client"; seed S1..S17). It sits on an SDK `Client` (Streamable HTTP or stdio) and a Ledger:
 *
 * - submit: the intent is in the ledger before `tools/call` leaves; a task handle's taskId is committed before
 *   anything else is done with it; a submission whose answer never arrived is `unknown-outcome`, never re-sent;
 * - follow: one PollScheduler polls every open task at the server's `pollIntervalMs`, backs off on transport
 *   failures and records them, and stops at the first terminal status;
 * - input: `inputRequests` go to the application's handlers once per key, answers stored before they are sent;
 * - recover: `resumeAll()` takes up every open record after a crash, querying each once before anything else;
 * - one owner: a lease per record keeps two processes from driving one task.
 */
import { randomUUID } from 'node:crypto';

import type { CallToolResult, Client, ClientCapabilities } from '@modelcontextprotocol/client';
import { ProtocolError } from '@modelcontextprotocol/client';

import { isDeadLocalOwner, newLeaseOwner } from '../leaseOwner.js';
import type { InputResponse, JsonObject, JsonRpcError } from '../protocol/index.js';
import {
  CLIENT_CAPABILITIES_META_KEY,
  EmptyResultSchema,
  ErrorCode,
  IDEMPOTENCY_KEY_META_KEY,
  isTerminalStatus,
  JsonObjectSchema,
  TASK_METHODS,
  TASKS_EXTENSION_ID,
} from '../protocol/index.js';
import { argumentsDigest } from './argumentsDigest.js';
import { TaskClientError } from './errors.js';
import type { TaskInputHandlers } from './inputRouter.js';
import { capabilitiesForHandlers, InputRouter } from './inputRouter.js';
import type { HistoryEntry, Ledger, LedgerFilter, ObservedTask, RecordedError, TaskRecord } from './ledger/ledger.js';
import { isFollowable, isTransientStorageError, observationChanges } from './ledger/ledger.js';
import type { PollOutcome, PollPolicy, SchedulerClock } from './scheduler.js';
import { nextPollDelay, PollScheduler, SYSTEM_CLOCK } from './scheduler.js';
import type { TaskResultCarrier } from './sdkGlue.js';
import { attachTaskResultCarrier } from './sdkGlue.js';
import {
  parseCreateTaskResult,
  parseGetTaskResult,
  progressionViolation,
  sdkServerOutputMessage,
  ServerOutputError,
} from './serverOutput.js';
import { outcomeOf, TaskHandle } from './taskHandle.js';
import { classifyTransportError } from './transportFailure.js';

export interface TaskClientOptions {
  /** An SDK client, connected or not; its transport is instrumented by `sdkGlue` when the TaskClient uses it. */
  client: Client;
  ledger: Ledger;
  /** Which server this is (its URL, or `stdio:` and the command line): ledger records are scoped by it. */
  endpoint: string;
  inputHandlers?: TaskInputHandlers | undefined;
  /** Extra per-request client capabilities sent with task requests (the handlers' ones are derived). */
  capabilities?: ClientCapabilities | undefined;
  pollPolicy?: Partial<PollPolicy> | undefined;
  clock?: SchedulerClock | undefined;
  random?: (() => number) | undefined;
  /** How long a lease on a record lasts without renewal. Default 30 s; renewed every third of it. */
  leaseMs?: number | undefined;
  /** This process's lease owner id. Default: host, pid and a random suffix. */
  owner?: string | undefined;
  /** Timeout of each tools/call and tasks/* request. Default 60 s. */
  requestTimeoutMs?: number | undefined;
  /** A stored input answer the server still lists is sent again after this long. Default 5 s. */
  inputResendAfterMs?: number | undefined;
  /**
   * How long something that arrived (a taskId, an input answer) is retried into a busy or failing ledger before the
   * client gives up on recording it (DESIGN.md rule 10). Default 10 min.
   */
  storagePatienceMs?: number | undefined;
  /** After createdAt + ttlMs, how long an unreachable server is retried before the record expires. Default 5 min. */
  ttlGraceMs?: number | undefined;
  /** Close the SDK client too when this TaskClient closes. */
  ownsClient?: boolean | undefined;
  /** Dispose of the ledger too when this TaskClient closes. */
  ownsLedger?: boolean | undefined;
  /** Told about every change the client records; never awaited, errors ignored. */
  onEvent?: ((event: TaskClientEvent) => void) | undefined;
}

export type TaskClientEvent =
  | { type: 'status'; record: TaskRecord }
  | { type: 'closed'; record: TaskRecord }
  | { type: 'error'; recordId: string; error: RecordedError }
  /** The server created task `taskId` and the ledger cannot record it yet: retried for `storagePatienceMs`. */
  | { type: 'unrecorded'; recordId: string; taskId: string; error: RecordedError };

export interface CallToolOptions {
  /** Your business id for the call, kept on the record (S6). */
  correlationId?: string | undefined;
  /** Makes the call idempotent: sent as `_meta["io.closeout/idempotencyKey"]`, and a live record with the key is
   * returned instead of sending again (S16). A record whose answer was lost (`unknown-outcome`) is sent again with the
   * same key, once (a Closeout server answers with the task the lost call created). */
  idempotencyKey?: string | undefined;
  /** Aborts waiting for the tools/call answer; the submission then becomes `unknown-outcome`. */
  signal?: AbortSignal | undefined;
}

export interface ResubmitOptions {
  /**
   * `'reuse'` keeps the old key (a Closeout server then returns the task the lost call created, if it did), `'new'`
   * draws a fresh one, a string sets it. Default: `'reuse'` for `unknown-outcome`, `'new'` otherwise.
   */
  idempotencyKey?: 'reuse' | 'new' | string | undefined;
  signal?: AbortSignal | undefined;
}

export interface ResumeReport {
  /** Open tasks this process now follows. */
  resumed: TaskHandle[];
  /** Submissions sent by a process that died before the answer was recorded: resubmit explicitly if wanted. */
  unknownOutcome: TaskRecord[];
  /** Open tasks another live process follows. */
  leasedElsewhere: TaskRecord[];
}

/** True when `callTool` answered with a task handle rather than an immediate result (S3). */
export function isTaskHandle(value: CallToolResult | TaskHandle): value is TaskHandle {
  return value instanceof TaskHandle;
}

const DEFAULT_LEASE_MS = 30_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 60_000;
const DEFAULT_STORAGE_PATIENCE_MS = 600_000;

export class TaskClient {
  readonly endpoint: string;
  readonly owner: string;
  readonly ledger: Ledger;
  readonly client: Client;
  private readonly clock: SchedulerClock;
  private readonly random: () => number;
  private readonly scheduler: PollScheduler;
  private readonly inputs: InputRouter;
  private readonly handles = new Map<string, TaskHandle>();
  /** In-process submissions by idempotency key, so two concurrent calls with one key send once. */
  private readonly submitting = new Map<
    string,
    { toolName: string; argumentsDigest: string; submission: Promise<CallToolResult | TaskHandle> }
  >();
  /** Per-record chain: polls, refreshes and cancels of one record never overlap. */
  private readonly serial = new Map<string, Promise<unknown>>();
  private readonly leaseMs: number;
  private readonly requestTimeoutMs: number;
  private readonly ttlGraceMs: number;
  private readonly storagePatienceMs: number;
  private leaseTimer: unknown;
  private capabilitiesMeta: ClientCapabilities | undefined;
  private closed = false;

  constructor(private readonly options: TaskClientOptions) {
    this.client = options.client;
    this.ledger = options.ledger;
    this.endpoint = options.endpoint;
    this.owner = options.owner ?? newLeaseOwner();
    this.clock = options.clock ?? SYSTEM_CLOCK;
    this.random = options.random ?? Math.random;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.ttlGraceMs = options.ttlGraceMs ?? 300_000;
    this.storagePatienceMs = options.storagePatienceMs ?? DEFAULT_STORAGE_PATIENCE_MS;
    this.scheduler = new PollScheduler({
      poll: (recordId) => this.serialized(recordId, () => this.poll(recordId)),
      policy: options.pollPolicy,
      clock: this.clock,
      random: this.random,
      onScheduled: (recordId, nextPollAt) => {
        this.ledger.noteSchedule(recordId, this.owner, { nextPollAt: nextPollAt ?? null });
      },
      onPollError: (recordId, error) => {
        void this.recordError(recordId, { kind: 'storage', message: describe(error), at: this.clock.now() });
      },
    });
    this.inputs = new InputRouter({
      ledger: this.ledger,
      owner: this.owner,
      handlers: options.inputHandlers ?? {},
      now: () => this.clock.now(),
      sendUpdate: (taskId, inputResponses) => this.sendTaskRequest(TASK_METHODS.update, { taskId, inputResponses }),
      recordError: (recordId, error) => this.recordError(recordId, error),
      resendAfterMs: options.inputResendAfterMs ?? 5_000,
      storagePatienceMs: options.storagePatienceMs ?? DEFAULT_STORAGE_PATIENCE_MS,
      sleep: (ms) => new Promise<void>((resolve) => this.clock.setTimeout(resolve, ms)),
    });
    this.armLeaseRenewal();
  }

  /**
   * Call a tool, declaring the Tasks extension on this request only (S1, S2). Resolves with the CallToolResult when
   * the server answered at once, or with a TaskHandle when it created a task (S3); `isTaskHandle` tells them apart.
   * A JSON-RPC error from the server is rethrown as the SDK's ProtocolError after it is recorded.
   */
  async callTool(
    name: string,
    args: JsonObject = {},
    options: CallToolOptions = {},
  ): Promise<CallToolResult | TaskHandle> {
    this.assertOpen();
    const digest = argumentsDigest(args);
    const key = options.idempotencyKey;
    if (key === undefined) return this.submitNew(name, args, digest, options);
    // registered before the first await, so a concurrent call with the key joins this one instead of sending
    const inFlight = this.submitting.get(key);
    if (inFlight) {
      if (inFlight.toolName !== name || inFlight.argumentsDigest !== digest) {
        throw new TaskClientError('idempotency-conflict', `idempotency key ${key} is in use for ${inFlight.toolName}`);
      }
      return inFlight.submission;
    }
    return this.trackSubmission(
      key,
      name,
      digest,
      (async () => {
        const existing = await this.ledger.findByIdempotencyKey(this.endpoint, key);
        if (existing) return this.fromExisting(existing, name, digest);
        return this.submitNew(name, args, digest, options);
      })(),
    );
  }

  private async submitNew(
    name: string,
    args: JsonObject,
    digest: string,
    options: CallToolOptions,
  ): Promise<CallToolResult | TaskHandle> {
    const now = this.clock.now();
    const intent = await this.ledger.recordIntent({
      recordId: randomUUID(),
      endpoint: this.endpoint,
      toolName: name,
      arguments: args,
      argumentsDigest: digest,
      correlationId: options.correlationId,
      idempotencyKey: options.idempotencyKey,
      submittedAt: now,
      leaseOwner: this.owner,
      leaseExpiresAt: now + this.leaseMs,
    });
    // another process recorded the same key between our lookup and our insert
    if (!intent.created) return this.fromExisting(intent.record, name, digest);
    return this.submit(intent.record, options.signal);
  }

  /**
   * Take up every open record of this endpoint after a crash or restart (S12): submissions left `submitting` by a
   * dead process become `unknown-outcome`; each open task is queried once before anything else (S7).
   */
  async resumeAll(): Promise<ResumeReport> {
    this.assertOpen();
    // a lease held by a dead process of this host cannot be renewed: free it now instead of waiting it out
    const held = await this.ledger.list({
      endpoint: this.endpoint,
      localStates: ['submitting', 'tracking', 'detached'],
    });
    const deadHolders = new Set<string>();
    for (const { leaseOwner: holder } of held) {
      if (holder && holder !== this.owner && isDeadLocalOwner(holder)) deadHolders.add(holder);
    }
    for (const holder of deadHolders) await this.ledger.releaseAllOf(holder);
    const unknownOutcome = await this.ledger.settleAbandonedSubmissions(
      this.endpoint,
      this.clock.now(),
      'found on resume',
    );
    // settling touched only `submitting` records and freeing only leases, which the claim below decides on afresh
    const open = held.filter((record) => isFollowable(record.localState));
    const resumed: TaskHandle[] = [];
    const leasedElsewhere: TaskRecord[] = [];
    const unfollowed = open.filter((record) => {
      const live = this.handles.get(record.recordId);
      if (live) resumed.push(live);
      return !live;
    });
    // every lease in one transaction: thousands of records are claimed in milliseconds, not one commit each
    const now = this.clock.now();
    const leaseExpiresAt = now + this.leaseMs;
    const claimed = new Set(
      await this.ledger.claimAll(
        unfollowed.map((record) => record.recordId),
        this.owner,
        leaseExpiresAt,
        now,
      ),
    );
    for (const record of unfollowed) {
      if (!claimed.has(record.recordId)) {
        leasedElsewhere.push((await this.ledger.get(record.recordId)) ?? record);
        continue;
      }
      // what the claim changed, without reading 10,000 records back; the first poll (now) refreshes the rest
      const mine: TaskRecord = { ...record, localState: 'tracking', leaseOwner: this.owner, leaseExpiresAt };
      resumed.push(this.startFollowing(mine, now));
    }
    return { resumed, unknownOutcome, leasedElsewhere };
  }

  /** Follow one open record (e.g. a detached one) in this process; throws when another process holds it. */
  async attach(ref: string): Promise<TaskHandle> {
    this.assertOpen();
    const record = await this.resolve(ref);
    if (!record.taskId) {
      throw new TaskClientError('invalid-state', `record ${record.recordId} has no taskId (${record.localState})`, {
        record,
      });
    }
    if (!isFollowable(record.localState)) return this.closedHandle(record);
    const handle = await this.follow(record, true);
    if (!handle) {
      throw new TaskClientError('leased-elsewhere', `task ${record.taskId} is followed by ${record.leaseOwner}`, {
        record,
      });
    }
    return handle;
  }

  /** The ledger record for a taskId, record id or idempotency key. */
  async get(ref: string): Promise<TaskRecord | undefined> {
    return this.find(ref);
  }

  /** Ledger records of this endpoint (or of `filter.endpoint`). */
  list(filter: LedgerFilter = {}): Promise<TaskRecord[]> {
    return this.ledger.list({ ...filter, endpoint: filter.endpoint ?? this.endpoint });
  }

  /** Every observed status and local-state change of a record, oldest first (S15). */
  async history(ref: string): Promise<HistoryEntry[]> {
    return this.ledger.history((await this.resolve(ref)).recordId);
  }

  /**
   * Send `tasks/cancel` (S11): an acknowledged intent, not an outcome. The task is followed until it ends, which may
   * still be `completed`. -32602 marks the record expired.
   */
  async cancel(ref: string): Promise<void> {
    this.assertOpen();
    const record = await this.resolve(ref);
    const taskId = record.taskId;
    if (!taskId) {
      throw new TaskClientError('invalid-state', `record ${record.recordId} has no task to cancel`, { record });
    }
    if (!isFollowable(record.localState)) return;
    await this.ledger.recordCancelRequest(record.recordId, this.clock.now());
    try {
      await this.sendTaskRequest(TASK_METHODS.cancel, { taskId });
    } catch (error) {
      if (error instanceof ProtocolError && error.code === ErrorCode.InvalidParams) {
        await this.serialized(record.recordId, () =>
          this.expire(record.recordId, `tasks/cancel answered ${error.code}: ${error.message}`),
        );
        return;
      }
      await this.recordError(record.recordId, this.describeRequestError('tasks/cancel', error));
      throw error;
    }
    // look soon: the cancel may already have taken effect (the scheduler keeps the floor)
    if (this.scheduler.has(record.recordId)) this.scheduler.schedule(record.recordId);
  }

  /** Answer an input request by hand (e.g. when no handler exists for it); the first stored answer wins. */
  async answer(ref: string, key: string, response: InputResponse): Promise<boolean> {
    this.assertOpen();
    const record = await this.resolve(ref);
    const known = record.inputs.find((input) => input.key === key);
    if (!record.taskId || !known) {
      throw new TaskClientError('invalid-state', `task ${record.taskId ?? record.recordId} has no input ${key}`, {
        record,
      });
    }
    if (record.leaseOwner !== this.owner) {
      throw new TaskClientError('leased-elsewhere', `attach task ${record.taskId} before answering its input`, {
        record,
      });
    }
    return this.inputs.answer(record, record.taskId, key, known.request, response);
  }

  /**
   * Query a task once now and record what the server says; for a terminal record it only checks that the server
   * still agrees (a change after terminal is recorded as bad server output, the record stays as it was).
   */
  async refresh(ref: string): Promise<TaskRecord> {
    this.assertOpen();
    const record = await this.resolve(ref);
    if (!record.taskId) return record;
    if (record.localState === 'tracking' && record.leaseOwner === this.owner) {
      await this.serialized(record.recordId, () => this.poll(record.recordId));
    } else if (record.localState === 'terminal') {
      await this.serialized(record.recordId, () => this.verifyTerminal(record));
    }
    return this.reload(record.recordId);
  }

  /**
   * Submit again, explicitly (S13: never automatic). Only a record that is no longer open can be resubmitted; the
   * old record is marked superseded by the new one.
   */
  async resubmit(ref: string, options: ResubmitOptions = {}): Promise<CallToolResult | TaskHandle> {
    this.assertOpen();
    return this.resubmitRecord(await this.resolve(ref), options);
  }

  private async resubmitRecord(previous: TaskRecord, options: ResubmitOptions): Promise<CallToolResult | TaskHandle> {
    if (previous.localState === 'submitting' || isFollowable(previous.localState)) {
      throw new TaskClientError(
        'invalid-state',
        `record ${previous.recordId} is ${previous.localState}: cancel or wait for it before resubmitting`,
        { record: previous },
      );
    }
    if (previous.supersededBy) {
      throw new TaskClientError(
        'invalid-state',
        `record ${previous.recordId} was already resubmitted as ${previous.supersededBy}`,
        { record: previous },
      );
    }
    const policy = options.idempotencyKey ?? (previous.localState === 'unknown-outcome' ? 'reuse' : 'new');
    const key =
      policy === 'reuse' ? (previous.idempotencyKey ?? randomUUID()) : policy === 'new' ? randomUUID() : policy;
    const now = this.clock.now();
    const intent = await this.ledger.recordResubmission(previous.recordId, {
      recordId: randomUUID(),
      endpoint: this.endpoint,
      toolName: previous.toolName,
      arguments: previous.arguments,
      argumentsDigest: previous.argumentsDigest,
      correlationId: previous.correlationId,
      idempotencyKey: key,
      submittedAt: now,
      leaseOwner: this.owner,
      leaseExpiresAt: now + this.leaseMs,
      resubmittedFrom: previous.recordId,
    });
    if (!intent.created) {
      // checked again inside the ledger's transaction: of two concurrent resubmissions, one goes through
      if (intent.refused === 'already-resubmitted') {
        throw new TaskClientError(
          'invalid-state',
          `record ${previous.recordId} was already resubmitted as ${intent.record.recordId}`,
          { record: intent.record },
        );
      }
      if (intent.refused === 'still-open') {
        throw new TaskClientError(
          'invalid-state',
          `record ${previous.recordId} is ${intent.record.localState}: cancel or wait for it before resubmitting`,
          { record: intent.record },
        );
      }
      return this.fromExisting(intent.record, previous.toolName, previous.argumentsDigest);
    }
    return this.trackSubmission(
      key,
      previous.toolName,
      previous.argumentsDigest,
      this.submit(intent.record, options.signal),
    );
  }

  /** Stop following tasks in this process and hand their leases back so another process can take over at once. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.leaseTimer !== undefined) this.clock.clearTimeout(this.leaseTimer);
    this.scheduler.stop();
    await this.inputs.close();
    await this.scheduler.whenIdle();
    await Promise.allSettled([...this.serial.values()]);
    for (const [recordId, handle] of this.handles) {
      handle.abandon(new TaskClientError('closed', `the TaskClient closed before task ${handle.taskId} ended`));
      await this.ledger.release(recordId, this.owner).catch(() => undefined);
    }
    this.handles.clear();
    if (this.options.ownsClient) await this.client.close();
    if (this.options.ownsLedger) await this.ledger.dispose();
  }

  // ---- submission ----

  private trackSubmission(
    key: string,
    toolName: string,
    digest: string,
    submission: Promise<CallToolResult | TaskHandle>,
  ): Promise<CallToolResult | TaskHandle> {
    const entry = { toolName, argumentsDigest: digest, submission };
    this.submitting.set(key, entry);
    const forget = () => {
      if (this.submitting.get(key) === entry) this.submitting.delete(key);
    };
    submission.then(forget, forget);
    return submission;
  }

  private async submit(record: TaskRecord, signal: AbortSignal | undefined): Promise<CallToolResult | TaskHandle> {
    const carrier = this.carrier();
    const meta: Record<string, unknown> = { ...this.tasksMeta() };
    if (record.idempotencyKey !== undefined) meta[IDEMPOTENCY_KEY_META_KEY] = record.idempotencyKey;
    // from here on, silence means unknown-outcome
    await this.ledger.markSent(record.recordId, this.owner, this.clock.now());
    let result: CallToolResult;
    try {
      result = (await this.client.callTool(
        { name: record.toolName, arguments: record.arguments, _meta: meta },
        { timeout: this.requestTimeoutMs, ...(signal ? { signal } : {}) },
      )) as CallToolResult;
    } catch (error) {
      const carried = carrier.extract(error);
      if (carried) return this.acceptTask(record, carried);
      throw await this.failSubmission(record, error);
    }
    await this.ledger.close(
      record.recordId,
      this.owner,
      { localState: 'terminal', reason: 'immediate result', result: result as JsonObject },
      this.clock.now(),
    );
    await this.emitClosed(record.recordId);
    return result;
  }

  /** The server created a task: commit its taskId first (S4), then follow it. */
  private async acceptTask(record: TaskRecord, raw: Record<string, unknown>): Promise<CallToolResult | TaskHandle> {
    let task: ObservedTask;
    try {
      task = parseCreateTaskResult(raw);
    } catch (error) {
      throw await this.failSubmission(record, error);
    }
    if (!(await this.commitArrived(record, task))) {
      // another record follows this task already (a resubmission that reused the key): that one is the handle
      const holder = await this.ledger.findByTaskId(this.endpoint, task.taskId);
      if (holder && holder.recordId !== record.recordId) {
        return this.fromExisting(holder, holder.toolName, holder.argumentsDigest);
      }
      const now = await this.ledger.get(record.recordId);
      throw new TaskClientError(
        'invalid-state',
        `tools/call answered task ${task.taskId}, and record ${record.recordId} cannot take it (${now?.localState ?? 'gone'}${now?.taskId ? `, task ${now.taskId}` : ''})`,
        { record: now ?? record },
      );
    }
    const now = this.clock.now();
    const committed = await this.reload(record.recordId);
    const handle = new TaskHandle(committed as TaskRecord & { taskId: string }, this.driver());
    this.emit({ type: 'status', record: committed });
    if (committed.localState === 'terminal') {
      this.emit({ type: 'closed', record: committed });
      return handle;
    }
    this.handles.set(record.recordId, handle);
    // the first tasks/get waits for the server's suggested interval, like every later one (S5), unless the seed
    // state already asks for something only tasks/get carries (a terminal result, the inputRequests)
    const needsDetail = isTerminalStatus(task.status) || task.status === 'input_required';
    const delay = needsDetail ? 0 : nextPollDelay(task.pollIntervalMs, this.scheduler.policy, this.random);
    this.scheduler.schedule(record.recordId, now + delay);
    return handle;
  }

  /**
   * Commit a taskId that arrived (DESIGN.md rule 10): a ledger another process holds locked (or a full disk) is
   * retried with backoff for `storagePatienceMs`, and an `unrecorded` event names the taskId meanwhile, so it is
   * never only in this process's memory. After that, the error says which task the server created.
   */
  private async commitArrived(record: TaskRecord, task: ObservedTask): Promise<boolean> {
    const started = this.clock.now();
    let delayMs = 50;
    for (let attempt = 1; ; attempt += 1) {
      const now = this.clock.now();
      try {
        return await this.ledger.commitTask(record.recordId, this.owner, task, now, now + this.leaseMs);
      } catch (error) {
        if (!isTransientStorageError(error)) throw error;
        const lastError: RecordedError = {
          kind: 'storage',
          message: `the ledger cannot record task ${task.taskId} yet: ${describe(error)}`,
          at: this.clock.now(),
        };
        if (attempt === 1)
          this.emit({ type: 'unrecorded', recordId: record.recordId, taskId: task.taskId, error: lastError });
        if (this.clock.now() - started >= this.storagePatienceMs) {
          throw new TaskClientError(
            'storage',
            `the server created task ${task.taskId}, and the ledger could not record it for ${Math.round(this.storagePatienceMs / 1000)} s (${describe(error)}); record ${record.recordId} stays as it was: call again with its idempotency key, or resume, once the ledger is free`,
            { record, cause: error },
          );
        }
        await new Promise<void>((resolve) => this.clock.setTimeout(resolve, delayMs));
        delayMs = Math.min(delayMs * 2, 2_000);
      }
    }
  }

  /** Record why a submission did not produce a result or handle, and build the error to throw. */
  private async failSubmission(record: TaskRecord, error: unknown): Promise<unknown> {
    const now = this.clock.now();
    const badOutput = error instanceof ServerOutputError ? error.message : sdkServerOutputMessage(error);
    if (error instanceof ProtocolError && badOutput === undefined) {
      // the server answered with a JSON-RPC error: no task exists; keep the error as the outcome
      const rpcError: JsonRpcError = { code: error.code, message: error.message, data: error.data };
      await this.ledger.close(
        record.recordId,
        this.owner,
        { localState: 'terminal', reason: `tools/call failed: ${error.code} ${error.message}`, error: rpcError },
        now,
      );
      await this.emitClosed(record.recordId);
      return error;
    }
    const lastError: RecordedError =
      badOutput !== undefined
        ? { kind: 'server-output', message: badOutput, at: now }
        : this.describeRequestError('tools/call', error);
    const reason =
      badOutput !== undefined
        ? `tools/call answer could not be used: ${badOutput}`
        : `tools/call got no answer: ${lastError.message}`;
    await this.ledger.close(record.recordId, this.owner, { localState: 'unknown-outcome', reason, lastError }, now);
    const closed = await this.emitClosed(record.recordId);
    return new TaskClientError(
      badOutput !== undefined ? 'bad-server-output' : 'unknown-outcome',
      `${reason} (record ${record.recordId}; resubmit explicitly if wanted)`,
      { record: closed ?? record, cause: error },
    );
  }

  /** A second call with a key the ledger already holds: the same outcome, never a second send (S16). */
  private async fromExisting(record: TaskRecord, name: string, digest: string): Promise<CallToolResult | TaskHandle> {
    this.assertSameCall(record, name, digest);
    switch (record.localState) {
      case 'submitting': {
        const leaseLive = record.leaseExpiresAt !== undefined && record.leaseExpiresAt >= this.clock.now();
        if (leaseLive) {
          throw new TaskClientError(
            'leased-elsewhere',
            `idempotency key ${record.idempotencyKey} is being submitted by ${record.leaseOwner}`,
            { record },
          );
        }
        const settled = await this.ledger.settleAbandonedSubmissions(this.endpoint, this.clock.now(), 'found on call');
        const now = settled.find((item) => item.recordId === record.recordId) ?? (await this.reload(record.recordId));
        if (now.localState === 'unknown-outcome') return this.recoverUnknown(now);
        if (now.localState === 'submitting') {
          throw new TaskClientError(
            'leased-elsewhere',
            `idempotency key ${record.idempotencyKey} is being submitted by ${now.leaseOwner}`,
            { record: now },
          );
        }
        // its late answer arrived meanwhile (DESIGN.md rule 10)
        return this.fromExisting(now, name, digest);
      }
      case 'tracking':
      case 'detached': {
        const live = this.handles.get(record.recordId);
        if (live) return live;
        const handle = await this.follow(record, false);
        if (handle) return handle;
        throw new TaskClientError(
          'leased-elsewhere',
          `idempotency key ${record.idempotencyKey}: task ${record.taskId} is followed by ${record.leaseOwner}`,
          { record },
        );
      }
      case 'terminal':
        if (record.taskId) return this.closedHandle(record);
        if (record.result) return record.result as CallToolResult;
        if (record.error) throw new ProtocolError(record.error.code, record.error.message, record.error.data);
        throw new TaskClientError('invalid-state', `record ${record.recordId} ended without a result`, { record });
      case 'unknown-outcome':
        return this.recoverUnknown(record);
      case 'expired':
        throw new TaskClientError(
          record.localState,
          `idempotency key ${record.idempotencyKey} is ${record.localState} (${record.terminalReason}); use resubmit()`,
          { record },
        );
    }
  }

  /**
   * The same call again (same key, tool and arguments) after its answer was lost: sent again with the same key, so a
   * Closeout server answers with the task the lost call created instead of running the tool a second time (issue 13
   * item 2). The ledger lets one resubmission of the record through; a caller that loses that race joins the winner.
   */
  private async recoverUnknown(record: TaskRecord): Promise<CallToolResult | TaskHandle> {
    try {
      return await this.resubmitRecord(record, { idempotencyKey: 'reuse' });
    } catch (error) {
      if (!(error instanceof TaskClientError && error.code === 'invalid-state')) throw error;
      const current = record.idempotencyKey
        ? await this.ledger.findByIdempotencyKey(this.endpoint, record.idempotencyKey)
        : undefined;
      if (!current || current.recordId === record.recordId) throw error;
      return this.fromExisting(current, record.toolName, record.argumentsDigest);
    }
  }

  private assertSameCall(record: TaskRecord, name: string, digest: string): void {
    if (record.toolName !== name || record.argumentsDigest !== digest) {
      throw new TaskClientError(
        'idempotency-conflict',
        `idempotency key ${record.idempotencyKey} was used for ${record.toolName} with other arguments`,
        { record },
      );
    }
  }

  // ---- following ----

  /** Claim the lease and schedule the record; undefined when another live process holds it. */
  private async follow(record: TaskRecord, queryNow: boolean): Promise<TaskHandle | undefined> {
    const existing = this.handles.get(record.recordId);
    if (existing) return existing;
    const now = this.clock.now();
    if (!(await this.ledger.claim(record.recordId, this.owner, now + this.leaseMs, now))) return undefined;
    const claimed = await this.reload(record.recordId);
    // on resume the first thing is one query (S7, S12); a live handle waits for the suggested interval
    const at = queryNow ? now : now + nextPollDelay(claimed.pollIntervalMs, this.scheduler.policy, this.random);
    return this.startFollowing(claimed, at);
  }

  /** Follow a record this process just claimed: a handle, and its first poll at `at`. */
  private startFollowing(record: TaskRecord, at: number): TaskHandle {
    const handle = new TaskHandle(record as TaskRecord & { taskId: string }, this.driver());
    this.handles.set(record.recordId, handle);
    this.scheduler.schedule(record.recordId, at);
    return handle;
  }

  private closedHandle(record: TaskRecord): TaskHandle {
    return new TaskHandle(record as TaskRecord & { taskId: string }, this.driver());
  }

  /** One scheduled poll of one record. Never throws for anything the server does. */
  private async poll(recordId: string): Promise<PollOutcome> {
    // While this process holds the lease only its own polls change a record's task fields, so the handle's snapshot
    // is the record as committed; one indexed read checks the lease. Without a snapshot, or without the lease, the
    // ledger says what happened.
    const snapshot = this.handles.get(recordId)?.lastRecord;
    const record =
      snapshot && (await this.ledger.isTrackedBy(recordId, this.owner)) ? snapshot : await this.ledger.get(recordId);
    if (!record || record.localState !== 'tracking' || record.leaseOwner !== this.owner || !record.taskId) {
      this.release(recordId, record);
      return { kind: 'done' };
    }
    const taskId = record.taskId;
    let raw: unknown;
    try {
      raw = await this.client.request(
        { method: TASK_METHODS.get, params: { taskId, _meta: this.tasksMeta() } },
        JsonObjectSchema,
        { timeout: this.requestTimeoutMs },
      );
    } catch (error) {
      return this.onPollError(record, error);
    }
    const now = this.clock.now();
    let task: ObservedTask;
    try {
      task = parseGetTaskResult(raw, taskId);
      const violation = progressionViolation(
        { taskId, status: record.status, lastUpdatedAt: record.lastUpdatedAt },
        task,
      );
      if (violation) throw new ServerOutputError(violation);
    } catch (error) {
      if (!(error instanceof ServerOutputError)) throw error;
      // a bad answer is recorded and ignored; the task keeps its last good state and is asked again later
      return this.retryAfter(record, { kind: 'server-output', message: error.message, at: now });
    }
    // an answer that changes nothing commits nothing: only the poll time is noted (deferred, see noteSchedule)
    const changed = observationChanges(record, task);
    if (changed && !(await this.ledger.recordObservation(recordId, this.owner, task, now))) {
      this.release(recordId, await this.ledger.get(recordId));
      return { kind: 'done' };
    }
    this.ledger.noteSchedule(recordId, this.owner, { polledAt: now });
    // input routing reads the stored answers, so an input_required record is read afresh even when unchanged
    const observed = changed || task.status === 'input_required' ? await this.reload(recordId) : record;
    if (changed) this.handles.get(recordId)?.observe(observed);
    if (record.status !== task.status) this.emit({ type: 'status', record: observed });
    if (isTerminalStatus(task.status)) {
      // close out: result or error stored, no tail polls, waiters resolved (S7, S10)
      this.release(recordId, observed);
      this.emit({ type: 'closed', record: observed });
      return { kind: 'done' };
    }
    if (task.status === 'input_required' && task.inputRequests) {
      await this.inputs.route(observed, taskId, task.inputRequests);
    }
    const deadline = ttlDeadline(task);
    if (deadline !== undefined && now >= deadline) {
      await this.expire(
        recordId,
        `createdAt + ttlMs (${new Date(deadline).toISOString()}) passed without a terminal status`,
      );
      return { kind: 'done' };
    }
    return { kind: 'continue', pollIntervalMs: task.pollIntervalMs };
  }

  private async onPollError(record: TaskRecord, error: unknown): Promise<PollOutcome> {
    const now = this.clock.now();
    if (error instanceof ProtocolError && error.code === ErrorCode.InvalidParams) {
      // spec: -32602 is an invalid, unknown or purged taskId: the handle is no longer usable (S13)
      await this.expire(record.recordId, `tasks/get answered ${error.code}: ${error.message}`);
      return { kind: 'done' };
    }
    const badOutput = sdkServerOutputMessage(error);
    const lastError: RecordedError =
      badOutput !== undefined
        ? { kind: 'server-output', message: `tasks/get: ${badOutput}`, at: now }
        : this.describeRequestError('tasks/get', error);
    const deadline = record.taskId ? ttlDeadlineOfRecord(record) : undefined;
    if (deadline !== undefined && now >= deadline + this.ttlGraceMs) {
      await this.ledger.recordPoll(record.recordId, this.owner, now, lastError);
      await this.expire(
        record.recordId,
        `createdAt + ttlMs (${new Date(deadline).toISOString()}) passed and the server could not be queried: ${lastError.message}`,
      );
      return { kind: 'done' };
    }
    return this.retryAfter(record, lastError);
  }

  private async retryAfter(record: TaskRecord, lastError: RecordedError): Promise<PollOutcome> {
    if (!(await this.ledger.recordPoll(record.recordId, this.owner, lastError.at, lastError))) {
      this.release(record.recordId, record);
      return { kind: 'done' };
    }
    this.emit({ type: 'error', recordId: record.recordId, error: lastError });
    return { kind: 'retry', retryAfterMs: lastError.retryAfterMs };
  }

  private async expire(recordId: string, reason: string): Promise<void> {
    await this.ledger.close(recordId, this.owner, { localState: 'expired', reason }, this.clock.now());
    const record = await this.ledger.get(recordId);
    if (record) {
      this.handles.get(recordId)?.observe(record);
      this.emit({ type: 'closed', record });
    }
    this.release(recordId, record);
  }

  private async verifyTerminal(record: TaskRecord): Promise<void> {
    const taskId = record.taskId as string;
    let raw: unknown;
    try {
      raw = await this.client.request(
        { method: TASK_METHODS.get, params: { taskId, _meta: this.tasksMeta() } },
        JsonObjectSchema,
        { timeout: this.requestTimeoutMs },
      );
    } catch (error) {
      // a purged terminal task answers -32602: that is allowed after its retention
      if (!(error instanceof ProtocolError && error.code === ErrorCode.InvalidParams)) {
        await this.recordError(record.recordId, this.describeRequestError('tasks/get', error));
      }
      return;
    }
    try {
      const task = parseGetTaskResult(raw, taskId);
      const violation = progressionViolation(
        { taskId, status: record.status, lastUpdatedAt: record.lastUpdatedAt },
        task,
      );
      if (violation) throw new ServerOutputError(violation);
    } catch (error) {
      if (!(error instanceof ServerOutputError)) throw error;
      await this.recordError(record.recordId, { kind: 'server-output', message: error.message, at: this.clock.now() });
    }
  }

  /** Stop following a record in this process (it was closed, detached, or taken by another process). */
  private release(recordId: string, record: TaskRecord | undefined): void {
    this.scheduler.remove(recordId);
    this.inputs.abandon(recordId);
    const handle = this.handles.get(recordId);
    this.handles.delete(recordId);
    if (!handle) return;
    if (record) handle.observe(record);
    if (!record || outcomeOf(record) === undefined) {
      // still open, but no longer ours: another process took the lease
      handle.abandon(
        new TaskClientError('leased-elsewhere', `task ${handle.taskId} is now followed by ${record?.leaseOwner}`, {
          record,
        }),
      );
    }
  }

  private driver() {
    return {
      cancel: (recordId: string) => this.cancel(recordId),
      detach: (recordId: string) => this.detach(recordId),
      record: (recordId: string) => this.reload(recordId),
    };
  }

  private async detach(recordId: string): Promise<void> {
    await this.serialized(recordId, async () => {
      this.scheduler.remove(recordId);
      await this.ledger.detach(recordId, this.owner, this.clock.now());
      const record = await this.ledger.get(recordId);
      this.release(recordId, record);
    });
  }

  // ---- requests ----

  /** `_meta` of every task request: the extension declared on this request only (S1), with the handlers' caps. */
  private tasksMeta(): Record<string, unknown> {
    // built once (the options do not change); each request gets its own outer object, the SDK may add to it
    this.capabilitiesMeta ??= (() => {
      const extra = this.options.capabilities ?? {};
      return {
        ...capabilitiesForHandlers(this.options.inputHandlers ?? {}),
        ...extra,
        extensions: { ...extra.extensions, [TASKS_EXTENSION_ID]: {} },
      };
    })();
    return { [CLIENT_CAPABILITIES_META_KEY]: this.capabilitiesMeta };
  }

  /** tasks/update and tasks/cancel: the SDK sets `Mcp-Name: <taskId>` for them (pinned in sdkGlue.test.ts). */
  private async sendTaskRequest(method: string, params: Record<string, unknown>): Promise<void> {
    await this.client.request({ method, params: { ...params, _meta: this.tasksMeta() } }, EmptyResultSchema, {
      timeout: this.requestTimeoutMs,
    });
  }

  private carrier(): TaskResultCarrier {
    const transport = this.client.transport;
    if (!transport) throw new TaskClientError('closed', 'the SDK client is not connected');
    return attachTaskResultCarrier(transport);
  }

  private describeRequestError(what: string, error: unknown): RecordedError {
    const at = this.clock.now();
    const failure = classifyTransportError(error);
    if (failure) {
      return {
        kind: 'transport',
        message: `${what}: ${failure.message}`,
        at,
        code: failure.status,
        retryAfterMs: failure.retryAfterMs,
      };
    }
    if (error instanceof ProtocolError) {
      return { kind: 'protocol', message: `${what}: ${error.code} ${error.message}`, at, code: error.code };
    }
    // an error we cannot place is treated as transport: backed off and recorded, never a task failure (S16)
    return { kind: 'transport', message: `${what}: ${describe(error)}`, at };
  }

  // ---- bookkeeping ----

  private async resolve(ref: string): Promise<TaskRecord> {
    const record = await this.find(ref);
    if (!record) throw new TaskClientError('not-found', `no ledger record for ${ref} at ${this.endpoint}`);
    return record;
  }

  /** The record of an id this process holds (no lookup by taskId or key). */
  private async reload(recordId: string): Promise<TaskRecord> {
    const record = await this.ledger.get(recordId);
    if (!record) throw new TaskClientError('not-found', `no ledger record ${recordId} at ${this.endpoint}`);
    return record;
  }

  private async find(ref: string): Promise<TaskRecord | undefined> {
    return (
      (await this.ledger.findByTaskId(this.endpoint, ref)) ??
      (await this.ledger.get(ref)) ??
      (await this.ledger.findByIdempotencyKey(this.endpoint, ref))
    );
  }

  private serialized<T>(recordId: string, work: () => Promise<T>): Promise<T> {
    const previous = this.serial.get(recordId) ?? Promise.resolve();
    const next = previous.then(work, work);
    const tail = next.catch(() => undefined);
    this.serial.set(recordId, tail);
    void tail.then(() => {
      if (this.serial.get(recordId) === tail) this.serial.delete(recordId);
    });
    return next;
  }

  private async recordError(recordId: string, error: RecordedError): Promise<void> {
    await this.ledger.recordError(recordId, error).catch(() => undefined);
    this.emit({ type: 'error', recordId, error });
  }

  private async emitClosed(recordId: string): Promise<TaskRecord | undefined> {
    const record = await this.ledger.get(recordId);
    if (record) this.emit({ type: 'closed', record });
    return record;
  }

  private emit(event: TaskClientEvent): void {
    try {
      this.options.onEvent?.(event);
    } catch {
      // an observer's bug must not stop the client
    }
  }

  private armLeaseRenewal(): void {
    const every = Math.max(1, Math.floor(this.leaseMs / 3));
    const tick = () => {
      if (this.closed) return;
      void this.ledger.renewLeases(this.owner, this.clock.now() + this.leaseMs).catch(() => undefined);
      this.leaseTimer = this.clock.setTimeout(tick, every);
      // renewal alone must not keep a process alive: polls and waiters do
      (this.leaseTimer as { unref?: () => void }).unref?.();
    };
    this.leaseTimer = this.clock.setTimeout(tick, every);
    (this.leaseTimer as { unref?: () => void }).unref?.();
  }

  private assertOpen(): void {
    if (this.closed) throw new TaskClientError('closed', 'the TaskClient is closed');
  }
}

/** createdAt + ttlMs in epoch ms, when the task has a limited TTL (S13). */
function ttlDeadline(task: { createdAt: string; ttlMs: number | null }): number | undefined {
  if (task.ttlMs === null) return undefined;
  const createdAt = Date.parse(task.createdAt);
  return Number.isNaN(createdAt) ? undefined : createdAt + task.ttlMs;
}

function ttlDeadlineOfRecord(record: TaskRecord): number | undefined {
  if (record.createdAt === undefined || record.ttlMs === undefined) return undefined;
  return ttlDeadline({ createdAt: record.createdAt, ttlMs: record.ttlMs });
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
