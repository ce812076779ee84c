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

import type { CallToolRequest, CallToolResult, Client, ClientCapabilities } from '@modelcontextprotocol/client';
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
import { callThroughInputRounds, InputRoundsError } from './inputRounds.js';
import type { TaskInputHandlers } from './inputRouter.js';
import { capabilitiesForHandlers, InputRouter } from './inputRouter.js';
import type { HistoryEntry, Ledger, LedgerFilter, ObservedTask, RecordedError, TaskRecord } from './ledger/ledger.js';
import { isFollowable, isTransientStorageError, observationChanges } from './ledger/ledger.js';
import { credentialFingerprint, wireIdempotencyKey } from './ledgerKeys.js';
import type { PollOutcome, PollPolicy, SchedulerClock } from './scheduler.js';
import { nextPollDelay, PollScheduler, STEADY_CLOCK, SYSTEM_CLOCK } from './scheduler.js';
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
  /**
   * Once this client has itself seen a task open for its `ttlMs`, how much longer an unreachable server is retried
   * before the record expires. Default 5 min.
   */
  ttlGraceMs?: number | undefined;
  /**
   * What identifies the caller to this server (e.g. its bearer token); only a fingerprint keyed with the ledger's
   * secret is stored, on every record this client creates: a -32602 under another credential is not taken as expiry.
   * `connectHttpTaskClient` takes it from the `authorization` header of `requestInit` when not given.
   */
  credential?: string | undefined;
  /** Close the SDK client too when this TaskClient closes. */
  ownsClient?: boolean | undefined;
  /** Dispose of the ledger too when this TaskClient closes. */
  ownsLedger?: boolean | undefined;
  /**
   * Connect the SDK client again after its connection closed under it (a stdio server that exited):
   * connectStdioTaskClient spawns the server again. Without it, a closed connection is surfaced: the handles settle
   * as `disconnected` and their leases are handed back for a later `resumeAll()`.
   */
  reconnect?: (() => Promise<void>) | undefined;
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
/** How many times a connection that closed under the client is made again before the loss is surfaced. */
const RECONNECT_ATTEMPTS = 5;
const DEFAULT_STORAGE_PATIENCE_MS = 600_000;

export class TaskClient {
  readonly endpoint: string;
  readonly owner: string;
  readonly ledger: Ledger;
  readonly client: Client;
  private readonly clock: SchedulerClock;
  /** Scheduling and task ages: never steps with the wall clock (the `clock` option replaces both, for tests). */
  private readonly steady: SchedulerClock;
  /** Per followed record: when (steady clock) this process started counting its age, and the age it had then. */
  private readonly seen = new Map<string, { since: number; ageMs: number }>();
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
  /** Public operations under way (callTool, resubmit, attach, resumeAll): close() lets each finish first. */
  private readonly operations = new Set<Promise<unknown>>();
  private readonly leaseMs: number;
  private readonly requestTimeoutMs: number;
  private readonly ttlGraceMs: number;
  private readonly storagePatienceMs: number;
  private leaseTimer: unknown;
  private capabilitiesMeta: ClientCapabilities | undefined;
  private ledgerKeys: Promise<{ secret: Uint8Array; credential: string }> | undefined;
  private closed = false;
  /** Set while the client recovers from a connection that closed under it. */
  private recovering: Promise<void> | undefined;
  /** Cuts the recovery's wait before its next attempt short (close() does not wait out a back-off). */
  private wakeRecovery: (() => void) | undefined;

  constructor(private readonly options: TaskClientOptions) {
    this.client = options.client;
    this.ledger = options.ledger;
    this.endpoint = options.endpoint;
    this.owner = options.owner ?? newLeaseOwner();
    this.clock = options.clock ?? SYSTEM_CLOCK;
    this.steady = options.clock ?? STEADY_CLOCK;
    this.random = options.random ?? Math.random;
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.ttlGraceMs = options.ttlGraceMs ?? 300_000;
    this.storagePatienceMs = options.storagePatienceMs ?? DEFAULT_STORAGE_PATIENCE_MS;
    this.scheduler = new PollScheduler({
      poll: (recordId) => this.serialized(recordId, () => this.poll(recordId)),
      policy: options.pollPolicy,
      clock: this.steady,
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
    this.watchConnection();
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
    return this.operation(this.startCall(name, args, options));
  }

  private startCall(name: string, args: JsonObject, options: CallToolOptions): Promise<CallToolResult | TaskHandle> {
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
    const keys = await this.keys();
    const now = this.clock.now();
    const intent = await this.ledger.recordIntent({
      recordId: randomUUID(),
      endpoint: this.endpoint,
      toolName: name,
      arguments: args,
      argumentsDigest: digest,
      correlationId: options.correlationId,
      idempotencyKey: options.idempotencyKey,
      wireIdempotencyKey:
        options.idempotencyKey === undefined
          ? undefined
          : wireIdempotencyKey(keys.secret, this.endpoint, options.idempotencyKey),
      credential: keys.credential,
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
  resumeAll(): Promise<ResumeReport> {
    this.assertOpen();
    return this.operation(this.resumeOpen());
  }

  private async resumeOpen(): Promise<ResumeReport> {
    const held = await this.ledger.list({
      endpoint: this.endpoint,
      localStates: ['submitting', 'tracking', 'detached'],
    });
    // leases of holders proven dead are freed first, as on every other path (see freeLeasesOfDeadHolders)
    await this.freeLeasesOfDeadHolders(held);
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
      resumed.push(this.startFollowing(mine, this.steady.now()));
    }
    return { resumed, unknownOutcome, leasedElsewhere };
  }

  /** Follow one open record (e.g. a detached one) in this process; throws when another process holds it. */
  attach(ref: string): Promise<TaskHandle> {
    this.assertOpen();
    return this.operation(this.attachRecord(ref));
  }

  private async attachRecord(ref: string): Promise<TaskHandle> {
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
        if (await this.underOtherCredential(record)) {
          const message = `tasks/cancel answered ${error.code} under another credential than the one that created the task: not taken as expiry`;
          await this.recordError(record.recordId, {
            kind: 'protocol',
            message,
            at: this.clock.now(),
            code: error.code,
          });
          throw new TaskClientError('wrong-credential', message, { record, cause: error });
        }
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
    } else if (record.localState === 'expired') {
      await this.serialized(record.recordId, () => this.recheckExpired(record, false));
    }
    return this.reload(record.recordId);
  }

  /**
   * Check an `expired` record again (a wrong credential, a misconfigured or restored server can make a live task look
   * gone): when the server still answers for the task, the record is tracked again by this process and what the
   * server says is recorded; a terminal answer closes it out with its result. Resolves with the handle when the
   * task is followed again, undefined when it stays expired (the answer is recorded as the last error).
   */
  async recheck(ref: string): Promise<TaskHandle | undefined> {
    this.assertOpen();
    const record = await this.resolve(ref);
    if (record.localState !== 'expired' || !record.taskId) return undefined;
    const reopened = await this.serialized(record.recordId, () => this.recheckExpired(record, true));
    if (!reopened) return undefined;
    const current = await this.reload(record.recordId);
    if (current.localState !== 'tracking') return this.closedHandle(current);
    return this.handles.get(record.recordId) ?? this.startFollowing(current, this.steady.now());
  }

  /**
   * Submit again, explicitly (S13: never automatic). Only a record that is no longer open can be resubmitted; the
   * old record is marked superseded by the new one.
   */
  resubmit(ref: string, options: ResubmitOptions = {}): Promise<CallToolResult | TaskHandle> {
    this.assertOpen();
    return this.operation(this.resolve(ref).then((previous) => this.resubmitRecord(previous, options)));
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
    const keys = await this.keys();
    // a reused key goes out as it went before (records older than ledger schema 2 sent it as it is)
    const wireKey =
      key === previous.idempotencyKey
        ? (previous.wireIdempotencyKey ?? previous.idempotencyKey)
        : wireIdempotencyKey(keys.secret, this.endpoint, key);
    const now = this.clock.now();
    const intent = await this.ledger.recordResubmission(previous.recordId, {
      recordId: randomUUID(),
      endpoint: this.endpoint,
      toolName: previous.toolName,
      arguments: previous.arguments,
      argumentsDigest: previous.argumentsDigest,
      correlationId: previous.correlationId,
      idempotencyKey: key,
      wireIdempotencyKey: wireKey,
      credential: keys.credential,
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

  /**
   * Stop following tasks in this process and hand their leases back so another process can take over at once.
   * Operations already under way finish first (issue 13 item 8): a tools/call in flight gets its answer (each waits at
   * most `requestTimeoutMs`, or until its own signal aborts it), so a task the server created is committed rather
   * than filed unknown-outcome, and the handle the call resolves with is settled (rejected as `closed`) below.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    while (this.operations.size > 0) await Promise.allSettled([...this.operations]);
    this.wakeRecovery?.();
    await this.recovering;
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

  private operation<T>(work: Promise<T>): Promise<T> {
    this.operations.add(work);
    const done = () => this.operations.delete(work);
    work.then(done, done);
    return work;
  }

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
    const wireKey = record.wireIdempotencyKey ?? record.idempotencyKey;
    if (wireKey !== undefined) meta[IDEMPOTENCY_KEY_META_KEY] = wireKey;
    // from here on, silence means unknown-outcome
    await this.ledger.markSent(record.recordId, this.owner, this.clock.now());
    let result: CallToolResult;
    try {
      // MRTR rounds (an InputRequiredResult before any task) are answered here, through the input handlers
      result = (await callThroughInputRounds({
        params: { name: record.toolName, arguments: record.arguments, _meta: meta },
        send: (params) =>
          this.client.callTool(params as CallToolRequest['params'], {
            timeout: this.requestTimeoutMs,
            allowInputRequired: true,
            ...(signal ? { signal } : {}),
          }),
        fulfil: (inputRequests) => this.inputs.fulfil(record, inputRequests, signal),
        signal,
      })) as CallToolResult;
    } catch (error) {
      const carried = carrier.extract(error);
      if (carried) return this.acceptTask(record, carried);
      if (error instanceof InputRoundsError) throw await this.failInputRounds(record, error);
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
    const committed = await this.reload(record.recordId);
    this.emit({ type: 'status', record: committed });
    if (committed.localState === 'terminal') {
      this.emit({ type: 'closed', record: committed });
      return this.closedHandle(committed);
    }
    // the first tasks/get waits for the server's suggested interval, like every later one (S5), unless the seed
    // state already asks for something only tasks/get carries (a terminal result, the inputRequests)
    const needsDetail = isTerminalStatus(task.status) || task.status === 'input_required';
    const delay = needsDetail ? 0 : nextPollDelay(task.pollIntervalMs, this.scheduler.policy, this.random);
    this.seen.set(record.recordId, { since: this.steady.now(), ageMs: 0 });
    // an attach() or resumeAll() that ran while the taskId was being committed may hold the handle already
    return this.startFollowing(committed, this.steady.now() + delay);
  }

  /**
   * The server answered every round, but asked for input this client could not give, or too many rounds, or broke
   * the InputRequiredResult shape: nothing ran on the server (MRTR comes before any task), so the record is closed
   * with the reason, not left `unknown-outcome`.
   */
  private async failInputRounds(record: TaskRecord, error: InputRoundsError): Promise<TaskClientError> {
    const now = this.clock.now();
    const reason =
      error.reason === 'input-unavailable'
        ? `tools/call needs input this client could not give: ${error.message}`
        : `tools/call did not end its input rounds: ${error.message}`;
    const kind = error.reason === 'input-unavailable' ? 'input' : 'server-output';
    await this.ledger.close(
      record.recordId,
      this.owner,
      { localState: 'terminal', reason, lastError: { kind, message: error.message, at: now } },
      now,
    );
    const closed = await this.emitClosed(record.recordId);
    return new TaskClientError(
      error.reason === 'input-unavailable' ? 'input-unavailable' : 'bad-server-output',
      `${reason} (record ${record.recordId})`,
      { record: closed ?? record, cause: error },
    );
  }

  /**
   * Commit a taskId that arrived (DESIGN.md rule 10): a ledger another process holds locked (or a full disk) is
   * retried with backoff for `storagePatienceMs`, and an `unrecorded` event names the taskId meanwhile, so it is
   * never only in this process's memory. After that, the error says which task the server created.
   */
  private async commitArrived(record: TaskRecord, task: ObservedTask): Promise<boolean> {
    // patience is a duration: measured on the steady clock, which a wall-clock step does not move
    const started = this.steady.now();
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
        if (this.steady.now() - started >= this.storagePatienceMs) {
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
        const holderDead = await this.freeLeasesOfDeadHolders([record]);
        const leaseLive =
          !holderDead && record.leaseExpiresAt !== undefined && record.leaseExpiresAt >= this.clock.now();
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
    if (!(await this.claimLease(record.recordId, now))) return undefined;
    const claimed = await this.reload(record.recordId);
    // on resume the first thing is one query (S7, S12); a live handle waits for the suggested interval
    const steadyNow = this.steady.now();
    const at = queryNow
      ? steadyNow
      : steadyNow + nextPollDelay(claimed.pollIntervalMs, this.scheduler.policy, this.random);
    return this.startFollowing(claimed, at);
  }

  /** Take one record's lease: free, expired, ours, or held by a holder proven dead (then freed first). */
  private async claimLease(recordId: string, now: number): Promise<boolean> {
    if (await this.ledger.claim(recordId, this.owner, now + this.leaseMs, now)) return true;
    const record = await this.ledger.get(recordId);
    if (!record || !(await this.freeLeasesOfDeadHolders([record]))) return false;
    return this.ledger.claim(recordId, this.owner, now + this.leaseMs, now);
  }

  /**
   * The client's one liveness rule (DESIGN.md, rules learned in the field, 1), for every path that takes a record
   * over (`resumeAll`, `attach`, `callTool` with a known key): a lease whose holder is proven dead is freed at once
   * (`isDeadLocalOwner`); any other holder keeps it until it stops renewing it. True when a holder of `records` was
   * dead.
   */
  private async freeLeasesOfDeadHolders(records: readonly TaskRecord[]): Promise<boolean> {
    const dead = new Set<string>();
    for (const { leaseOwner: holder } of records) {
      if (holder && holder !== this.owner && !dead.has(holder) && isDeadLocalOwner(holder)) dead.add(holder);
    }
    for (const holder of dead) await this.ledger.releaseAllOf(holder);
    return dead.size > 0;
  }

  /**
   * How long this client has seen a followed task open: what the ledger holds from earlier processes plus this
   * process's steady time since it took the record up. Time when no process followed it is not counted, so after a
   * restart the backstop comes later, never earlier (RELIABILITY.md, "Clocks").
   */
  private observedAge(record: TaskRecord): number {
    const now = this.steady.now();
    let seen = this.seen.get(record.recordId);
    if (!seen) {
      seen = { since: now, ageMs: record.observedAgeMs ?? 0 };
      this.seen.set(record.recordId, seen);
    }
    return seen.ageMs + Math.max(0, now - seen.since);
  }

  /**
   * Follow a record this process just claimed: a handle, and its first poll at `at` (steady clock). One record has one live handle
   * (issue 13 item 7): when concurrent attach(), resumeAll() or callTool() calls claimed it too (a claim of a lease
   * already ours succeeds), they all get the handle the first one made, which is the one every poll updates.
   */
  private startFollowing(record: TaskRecord, at: number): TaskHandle {
    const live = this.handles.get(record.recordId);
    if (live) return live;
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
      const violation = progressionViolation({ taskId, status: record.status }, task);
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
    const ageMs = this.observedAge(record);
    this.ledger.noteSchedule(recordId, this.owner, { polledAt: now, observedAgeMs: ageMs });
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
    // the TTL backstop (S13) on this client's own clock, never createdAt against it (DESIGN.md, rule 2)
    if (task.ttlMs !== null && ageMs >= task.ttlMs) {
      await this.expire(
        recordId,
        `ttlMs (${task.ttlMs} ms) passed by this client's own clock without a terminal status (seen open ${Math.round(ageMs)} ms)`,
      );
      return { kind: 'done' };
    }
    return { kind: 'continue', pollIntervalMs: task.pollIntervalMs };
  }

  private async onPollError(record: TaskRecord, error: unknown): Promise<PollOutcome> {
    const now = this.clock.now();
    if (error instanceof ProtocolError && error.code === ErrorCode.InvalidParams) {
      if (await this.underOtherCredential(record)) {
        // another principal's task looks unknown to us: that says nothing about the task (DESIGN.md, rule 5); the
        // record stays open, free for a process that holds the credential it was created under
        const message = `tasks/get answered ${error.code} under another credential than the one that created the task: not taken as expiry`;
        await this.ledger.recordPoll(record.recordId, this.owner, now, {
          kind: 'protocol',
          message,
          at: now,
          code: error.code,
        });
        this.emit({ type: 'error', recordId: record.recordId, error: { kind: 'protocol', message, at: now } });
        this.scheduler.remove(record.recordId);
        await this.ledger.release(record.recordId, this.owner);
        const handle = this.handles.get(record.recordId);
        this.handles.delete(record.recordId);
        this.seen.delete(record.recordId);
        this.inputs.abandon(record.recordId);
        handle?.abandon(new TaskClientError('wrong-credential', message, { record }));
        return { kind: 'done' };
      }
      // spec: -32602 is an invalid, unknown or purged taskId: the handle is no longer usable (S13)
      await this.expire(record.recordId, `tasks/get answered ${error.code}: ${error.message}`);
      return { kind: 'done' };
    }
    const badOutput = sdkServerOutputMessage(error);
    const lastError: RecordedError =
      badOutput !== undefined
        ? { kind: 'server-output', message: `tasks/get: ${badOutput}`, at: now }
        : this.describeRequestError('tasks/get', error);
    const ageMs = this.observedAge(record);
    this.ledger.noteSchedule(record.recordId, this.owner, { observedAgeMs: ageMs });
    if (typeof record.ttlMs === 'number' && ageMs >= record.ttlMs + this.ttlGraceMs) {
      await this.ledger.recordPoll(record.recordId, this.owner, now, lastError);
      await this.expire(
        record.recordId,
        `ttlMs (${record.ttlMs} ms) passed by this client's own clock and the server could not be queried: ${lastError.message}`,
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

  /**
   * One tasks/get for an expired record; true when the record came back (tracked, or closed out terminal). A record
   * tracked again keeps this process's lease only when `follow` (the caller then follows it).
   */
  private async recheckExpired(record: TaskRecord, follow: boolean): Promise<boolean> {
    const taskId = record.taskId as string;
    let task: ObservedTask;
    try {
      const raw = await this.client.request(
        { method: TASK_METHODS.get, params: { taskId, _meta: this.tasksMeta() } },
        JsonObjectSchema,
        { timeout: this.requestTimeoutMs },
      );
      task = parseGetTaskResult(raw, taskId);
    } catch (error) {
      const lastError =
        error instanceof ServerOutputError
          ? { kind: 'server-output' as const, message: error.message, at: this.clock.now() }
          : this.describeRequestError('tasks/get', error);
      await this.recordError(record.recordId, lastError);
      return false;
    }
    const now = this.clock.now();
    const note = `checked again: the server still knows task ${taskId} (${task.status})`;
    if (!(await this.ledger.reopen(record.recordId, this.owner, now + this.leaseMs, now, note))) return false;
    this.seen.delete(record.recordId);
    await this.ledger.recordObservation(record.recordId, this.owner, task, now);
    const current = await this.reload(record.recordId);
    this.emit({ type: 'status', record: current });
    if (current.localState !== 'tracking') {
      this.emit({ type: 'closed', record: current });
    } else if (!follow) {
      await this.ledger.release(record.recordId, this.owner);
    }
    return true;
  }

  /** Whether this client calls under another credential than the one `record` was created under. */
  private async underOtherCredential(record: TaskRecord): Promise<boolean> {
    // records older than ledger schema 2 carry no fingerprint: -32602 keeps meaning what it meant for them
    if (record.credential === undefined) return false;
    return record.credential !== (await this.keys()).credential;
  }

  /** The ledger's secret and this client's credential fingerprint, read once. */
  private keys(): Promise<{ secret: Uint8Array; credential: string }> {
    this.ledgerKeys ??= this.ledger.secret().then((secret) => ({
      secret,
      credential: credentialFingerprint(secret, this.options.credential),
    }));
    return this.ledgerKeys;
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
      const violation = progressionViolation({ taskId, status: record.status }, task);
      if (violation) throw new ServerOutputError(violation);
    } catch (error) {
      if (!(error instanceof ServerOutputError)) throw error;
      await this.recordError(record.recordId, { kind: 'server-output', message: error.message, at: this.clock.now() });
    }
  }

  /** Stop following a record in this process (it was closed, detached, or taken by another process). */
  private release(recordId: string, record: TaskRecord | undefined): void {
    this.scheduler.remove(recordId);
    this.seen.delete(recordId);
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

  // ---- the connection ----

  /**
   * Notice a connection that closes under the client (issue 13 item 10): the SDK calls `onclose` when its transport
   * closes (a stdio server that exited), and every later request fails at once. Chained, so an application's own
   * `onclose` still runs.
   */
  private watchConnection(): void {
    const previous = this.client.onclose;
    this.client.onclose = () => {
      try {
        previous?.();
      } finally {
        if (!this.closed && !this.recovering) {
          this.recovering = this.recoverConnection().finally(() => (this.recovering = undefined));
        }
      }
    };
  }

  /**
   * Record the loss on every followed task, then connect again (bounded attempts, backed off) and query each task
   * once (DESIGN.md rule 7: after a reconnect one tasks/get per task closes the gap); when that is not possible,
   * settle the handles as `disconnected` and hand their leases back, so nothing polls a closed connection.
   */
  private async recoverConnection(): Promise<void> {
    const lost: RecordedError = {
      kind: 'transport',
      message: 'the connection to the server closed (its process exited?)',
      at: this.clock.now(),
    };
    await Promise.all([...this.handles.keys()].map((recordId) => this.recordError(recordId, lost)));
    const reconnect = this.options.reconnect;
    let failure: unknown = lost.message;
    if (reconnect) {
      const policy = this.scheduler.policy;
      for (let attempt = 0; attempt < RECONNECT_ATTEMPTS && !this.closed; attempt += 1) {
        if (attempt > 0) {
          const delay = Math.min(policy.backoffCapMs, policy.backoffBaseMs * 2 ** attempt);
          await new Promise<void>((resolve) => {
            const timer = this.clock.setTimeout(resolve, delay);
            this.wakeRecovery = () => {
              this.clock.clearTimeout(timer);
              resolve();
            };
          });
          this.wakeRecovery = undefined;
          if (this.closed) return;
        }
        try {
          await reconnect();
          // the scheduler runs on the steady clock (RELIABILITY.md, "Clocks, credentials and keys")
          const now = this.steady.now();
          for (const recordId of this.handles.keys()) this.scheduler.schedule(recordId, now);
          return;
        } catch (error) {
          failure = error;
        }
      }
    }
    if (this.closed) return;
    const reason = `the connection to the server closed and could not be made again: ${describe(failure)}`;
    for (const [recordId, handle] of [...this.handles]) {
      this.scheduler.remove(recordId);
      this.inputs.abandon(recordId);
      this.handles.delete(recordId);
      handle.abandon(new TaskClientError('disconnected', `${reason} (task ${handle.taskId} is still open)`));
      await this.ledger.release(recordId, this.owner).catch(() => undefined);
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

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
