/**
 * The task runtime (docs/DESIGN.md, "The task's life on the server"): creates tasks, runs their handlers under a lease,
 * answers reads from the store, takes over orphans after a crash, expires and purges. The store is the only home of
 * task state; this class holds only what a live handler needs (its abort controller and input waiters).
 */
import { setTimeout as sleep } from 'node:timers/promises';

import { CallToolResultSchema } from '@modelcontextprotocol/core';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import type * as z from 'zod/v4';

import type {
  CreateTaskResult,
  DetailedTask,
  InputRequest,
  InputResponse,
  JsonObject,
  JsonRpcError,
} from '../protocol/index.js';
import { canonicalJson, ErrorCode, InputKeySchema, InputRequestSchema, isTerminalStatus } from '../protocol/index.js';
import { storableText, unstorableField } from '../protocol/storableText.js';
import type { TraceCarrier } from '../protocol/traceContext.js';
import { isDeadLocalHolder, newLeaseHolder } from '../shared/lease/leaseHolder.js';
import { TakeoverGate } from '../shared/lease/takeoverGate.js';
import { DurableSteps } from './durableSteps.js';
import { undeclaredInput } from './inputCapabilities.js';
import { describeRefusal, measureJson, resolveLimits, type TaskLimits } from './limits.js';
import { toPollIntervalPolicy } from './pollInterval.js';
import { SWEEP_PAGE } from './store/housekeeping.js';
import type {
  InputCapabilities,
  LeaseRef,
  StoredTask,
  TaskOwner,
  TaskSignal,
  TaskStore,
  TaskVersion,
  TerminalOutcome,
} from './store/taskStore.js';
import { OpenTaskLimitError, StoredTaskLimitError } from './store/taskStore.js';
import { newTaskId } from './taskId.js';
import { TaskPush, type TaskPushOptions } from './taskPush.js';
import type {
  AbortCause,
  PollIntervalPolicy,
  TaskContext,
  TaskHandler,
  TaskSupport,
  TaskToolConfig,
  ToolArgs,
} from './taskTool.js';
import { InputNotDeclaredError, TaskAbortedError } from './taskTool.js';
import { type RunView, ServerTelemetry, type TelemetryOptions } from './telemetry.js';
import { typedInput } from './typedInput.js';

const HOUR_MS = 3_600_000;

/** The store, timings, and the resource limits of limits.ts (docs/operations.md, "Limits"); every limit has a default. */
export interface TaskServerOptions extends Partial<TaskLimits> {
  store: TaskStore;
  /** How long a lease holds without renewal. A dead instance's tasks are taken over after this. Default 10 s. */
  leaseMs?: number;
  /** How often leases are renewed and the sweeps (expiry, purge, orphans, fallback signals) run. Default leaseMs/3. */
  sweepIntervalMs?: number;
  /** How long a terminal task is kept past `createdAt + ttlMs` before it is purged. Default one hour. */
  retentionMs?: number;
  /**
   * How long a terminal task of a tool with `ttlMs: null` is kept after it finished before it is purged, so that no
   * task is kept for ever. Default seven days.
   */
  unlimitedRetentionMs?: number;
  /** How long a cancelled handler may take to stop before the task is marked cancelled anyway. Default 5 s. */
  cancelGraceMs?: number;
  /** Identity of this instance in leases. Default `host:pid:random`. */
  instanceId?: string;
  /** Called with errors that have no caller to go to (a failed sweep, a store error in a background write). */
  onError?: (error: Error) => void;
  /**
   * Told of each task event an operator cares about: created, finished (status, how long since creation), taken over
   * after a restart or from another instance (and what became of it), expired, purged. Never arguments or results.
   * `closeout serve` logs them.
   */
  onActivity?: (activity: TaskActivity) => void;
  /** Push streams (`subscriptions/listen` with `notifications.taskIds`): buffer, periodic check, keep-alive. */
  push?: TaskPushOptions;
  /** The clock, for tests. Default: the store's (TaskStore.now) where it has one, else the host's. */
  now?: () => number;
  /** Where traces and metrics go (docs/operations.md, "Observability"). Default: the OpenTelemetry API's global providers. */
  telemetry?: TelemetryOptions;
}

export interface RegisteredTaskTool {
  name: string;
  config: TaskToolConfig<z.ZodType<JsonObject> | undefined>;
  support: TaskSupport;
  ttlMs: number | null;
  pollInterval: PollIntervalPolicy;
  resumable: boolean;
  handler: TaskHandler<JsonObject>;
}

interface RunningTask {
  lease: LeaseRef;
  toolName: string;
  /** The input kinds the creating request declared (docs/DESIGN.md rule 6); undefined for tasks that predate them. */
  inputCapabilities: InputCapabilities | undefined;
  controller: AbortController;
  /** Input keys the handler waits on, with how to resume it. */
  waiters: Map<string, { resolve: (response: InputResponse) => void; reject: (error: unknown) => void }>;
  cancelTimer: NodeJS.Timeout | undefined;
  settled: Promise<void>;
  /**
   * The handler is done (or its cancel grace ran out) and only the terminal write remains: the run stays in `running`,
   * its lease renewed, until that write lands or the lease is lost.
   */
  ending: boolean;
  /**
   * Until when (performance.now) the lease is surely this run's: the time the last write that proved it (create,
   * claim, renewal) was sent, plus a lease. A step's function starts only well before then (whileHeld).
   */
  heldUntil: number;
  /** Since when (performance.now) the run was aborted: a finished step may still commit for a grace (commitStep). */
  abortedAt: number | undefined;
  /** Starts the handler; set while the run waits for a renewal to prove its lease (see launchWhileHeld). */
  start: (() => void) | undefined;
  /** The task's creation time and this run's attempt, for the activity log. */
  createdAt: number;
  attempt: number;
}

/** Between two tries of a handler's write while the store is unreachable. */
const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 2000;

/** Background failures that repeat (a store outage seen by every running handler) are reported this seldom. */
const REPEAT_REPORT_MS = 5000;

/** Messages of the -32602 answers: the same for an unknown id and for another principal's task. */
const TASK_NOT_FOUND = 'Failed to retrieve task: Task not found';
const TASK_EXPIRED = 'Failed to retrieve task: Task has expired';

/** A task event for an operator's log (TaskServerOptions.onActivity): ids, tools, statuses and counts only. */
export type TaskActivity =
  | { type: 'created'; taskId: string; tool: string }
  | {
      type: 'finished';
      taskId: string;
      tool: string;
      status: 'completed' | 'failed' | 'cancelled';
      attempt: number;
      /** Since the task was created. */
      durationMs: number;
    }
  | {
      type: 'taken-over';
      taskId: string;
      tool: string;
      /** `rerun`: a resumable task runs again here; `interrupted`: failed as interrupted; `continued`: this instance's own. */
      outcome: 'rerun' | 'interrupted' | 'cancelled' | 'continued';
    }
  | { type: 'expired'; count: number }
  | { type: 'purged'; count: number };

export const INTERRUPTED_MESSAGE = 'Task interrupted by a server restart before it finished';

export class TaskServer {
  readonly instanceId: string;
  readonly store: TaskStore;
  readonly limits: TaskLimits;
  /** `notifications/tasks` over `subscriptions/listen` (taskPush.ts); http.ts serves its streams. */
  readonly push: TaskPush;
  /** @internal the spans and metrics of this server (telemetry.ts) */
  readonly telemetry: ServerTelemetry;
  private readonly tools = new Map<string, RegisteredTaskTool>();
  private readonly running = new Map<string, RunningTask>();
  /**
   * Tasks whose create is on its way back from the store, with the lease this instance's own takeover gave them if
   * their first lease ran out meanwhile.
   */
  private readonly creating = new Map<string, Pick<StoredTask, 'fence' | 'leaseExpiresAt'> | undefined>();
  private sweepAgain = false;
  private readonly leaseMs: number;
  private readonly sweepIntervalMs: number;
  private readonly retentionMs: number;
  private readonly unlimitedRetentionMs: number;
  private readonly cancelGraceMs: number;
  private readonly onError: (error: Error) => void;
  private readonly onActivity: ((activity: TaskActivity) => void) | undefined;
  private readonly now: () => number;
  private sweepTimer: NodeJS.Timeout | undefined;
  /** The lease loop's tick in flight (renew, fallback signals, takeover). */
  private sweeping: Promise<void> | undefined;
  /** The housekeeping tick in flight (expiry, purge): on its own timer, so it never delays a renewal. */
  private housekeeping: Promise<void> | undefined;
  /** Whether the last renewal failed because the store could not be reached (reported once per outage). */
  private storeUnreachable = false;
  /** What the lease loop's own statements say of the store: lapsed leases are taken only through it (takeOverOrphans). */
  private readonly gate: TakeoverGate;
  private lastRepeatReport = 0;
  private suppressedReports = 0;
  private unsubscribe: (() => void) | undefined;
  /** Told the id of every task whose DetailedTask may have changed (taskPush.ts sends it on). */
  private readonly changeListeners = new Set<(taskId: string) => void>();
  private started = false;
  private closed = false;

  constructor(options: TaskServerOptions) {
    this.instanceId = options.instanceId ?? newLeaseHolder();
    this.telemetry = new ServerTelemetry(options.telemetry ?? {}, () => runViews(this.running));
    this.store = this.telemetry.instrumentStore(options.store);
    this.limits = resolveLimits(options);
    this.leaseMs = options.leaseMs ?? 10_000;
    this.sweepIntervalMs = options.sweepIntervalMs ?? Math.max(50, Math.floor(this.leaseMs / 3));
    this.gate = new TakeoverGate({ leaseMs: this.leaseMs, everyMs: this.sweepIntervalMs });
    this.retentionMs = options.retentionMs ?? HOUR_MS;
    this.unlimitedRetentionMs = options.unlimitedRetentionMs ?? 7 * 24 * HOUR_MS;
    this.cancelGraceMs = options.cancelGraceMs ?? 5000;
    this.onError = options.onError ?? ((error) => console.error(`[closeout] ${error.message}`));
    this.onActivity = options.onActivity;
    // a store that instances on several hosts share keeps the time they agree on (docs/DESIGN.md, "Rules learned in
    // the field", 2); a store of one host runs on its clock
    const store = options.store;
    this.now = options.now ?? (store.now ? () => store.now!() : Date.now);
    this.push = new TaskPush(this, this.limits, options.push ?? {}, this.report);
    this.push.start();
  }

  /** Registers a task tool. Its handler gets the validated arguments and a TaskContext. */
  registerTool<Schema extends z.ZodType<JsonObject> | undefined = undefined>(
    name: string,
    config: TaskToolConfig<Schema>,
    handler: TaskHandler<ToolArgs<Schema>>,
  ): this {
    if (this.tools.has(name)) throw new Error(`task tool ${name} is already registered`);
    // the name is stored with each task: text every store keeps as it is (docs/DESIGN.md rule 15)
    const unstorable = unstorableField(`task tool name ${JSON.stringify(name)}`, name);
    if (unstorable !== undefined) throw new Error(unstorable);
    const ttlMs = config.task?.ttlMs === undefined ? HOUR_MS : config.task.ttlMs;
    if (ttlMs !== null && (!Number.isInteger(ttlMs) || ttlMs <= 0)) {
      throw new Error(`task tool ${name}: ttlMs must be a positive integer or null`);
    }
    this.tools.set(name, {
      name,
      config: config as TaskToolConfig<z.ZodType<JsonObject> | undefined>,
      support: config.task?.support ?? 'optional',
      ttlMs,
      pollInterval: toPollIntervalPolicy(config.task?.pollIntervalMs),
      resumable: config.task?.resumable ?? false,
      handler: handler as TaskHandler<JsonObject>,
    });
    return this;
  }

  tool(name: string): RegisteredTaskTool | undefined {
    return this.tools.get(name);
  }

  registeredTools(): RegisteredTaskTool[] {
    return [...this.tools.values()];
  }

  /**
   * Starts the background work: takes over tasks left behind by dead instances (re-run or failed as interrupted),
   * then renews leases and sweeps on a timer. Call once before serving.
   */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    await this.store.syncClock?.();
    this.unsubscribe = this.store.subscribe?.((signal) => void this.onSignal(signal));
    const deadHolders = (await this.store.leaseHolders()).filter((holder) => isDeadLocalHolder(holder));
    await this.sweep(deadHolders);
    // the lease loop runs from here on, so the leases that first sweep took are renewed even while the first
    // housekeeping (expiry, purge) is slow, as it is against a database that has just come back
    const housekeepNow = () => {
      this.housekeeping ??= this.housekeep().finally(() => (this.housekeeping = undefined));
      return this.housekeeping;
    };
    this.sweepTimer = setInterval(() => {
      this.requestSweep();
      void housekeepNow();
    }, this.sweepIntervalMs);
    this.sweepTimer.unref();
    await housekeepNow();
  }

  /**
   * Stops the background work and hands running tasks back: their handlers are aborted and their leases released,
   * so a restarted or another instance takes them over at once. A handler that ignores its signal is waited for at
   * most `cancelGraceMs`; its task is handed back all the same (its late writes lose to the next holder's fence).
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.push.close();
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.unsubscribe?.();
    await Promise.all([this.sweeping, this.housekeeping]);
    const runs = [...this.running.values()];
    for (const run of runs) this.abort(run, 'shutdown');
    let graceTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(runs.map((r) => r.settled)),
      new Promise((resolve) => (graceTimer = setTimeout(resolve, this.cancelGraceMs))),
    ]);
    clearTimeout(graceTimer);
    const leases = runs.map((r) => r.lease);
    if (leases.length > 0) await this.store.renewLeases(this.instanceId, leases, 0).catch(this.report);
  }

  /** How many handlers run in this instance now. */
  runningCount(): number {
    return this.running.size;
  }

  // ---- creation ---------------------------------------------------------------------------------------------------

  /**
   * Creates a task for a validated `tools/call` and starts its handler. Resolves only after the row is committed
   * (spec: MUST NOT return CreateTaskResult until the task is durably created).
   */
  async createTask(
    tool: RegisteredTaskTool,
    args: JsonObject,
    principal: string,
    idempotencyKey: string | undefined,
    /** What the creating request declared; kept with the task so `ctx.input()` asks only for those (rule 6). */
    inputCapabilities?: InputCapabilities,
    /** The trace context of the creating `tools/call`; every run of the task joins that trace. */
    traceContext?: TraceCarrier,
  ): Promise<CreateTaskResult> {
    const measured = measureJson(args, this.limits.maxArgumentsBytes, this.limits.maxJsonDepth);
    if (!measured.ok) {
      throw new ProtocolError(
        ProtocolErrorCode.InvalidParams,
        `Arguments for tool ${tool.name} are ${describeRefusal(measured, this.limits, 'maxArgumentsBytes')}: send smaller arguments, or pass large inputs by reference (a URI)`,
      );
    }
    const now = this.now();
    const taskId = newTaskId();
    // while the create is on its way back, the task is this instance's even if its lease ran out (see takeOverOrphans)
    this.creating.set(taskId, undefined);
    let stored;
    let reclaimed;
    try {
      stored = await this.storeCall(() =>
        this.store.create({
          taskId,
          principal: principal,
          toolName: tool.name,
          arguments: args,
          createdAt: now,
          ttlMs: tool.ttlMs,
          pollIntervalMs: tool.pollInterval(0),
          resumable: tool.resumable,
          idempotencyKey,
          inputCapabilities,
          traceContext,
          leaseHolder: this.instanceId,
          leaseExpiresAt: now + this.leaseMs,
          ...(this.limits.maxOpenTasksPerPrincipal !== Infinity && {
            maxOpenTasksForPrincipal: this.limits.maxOpenTasksPerPrincipal,
          }),
          ...(this.limits.maxStoredTasksPerPrincipal !== Infinity && {
            maxStoredTasksForPrincipal: this.limits.maxStoredTasksPerPrincipal,
          }),
        }),
      );
    } finally {
      reclaimed = this.creating.get(taskId);
      this.creating.delete(taskId);
    }
    const { task, created } = stored;
    if (created) {
      this.activity({ type: 'created', taskId, tool: tool.name });
      this.launchWhileHeld(tool, reclaimed ? { ...task, ...reclaimed } : task);
    } else assertSameCall(task, tool.name, args, idempotencyKey);
    return { resultType: 'task', ...this.taskFields(task, now) };
  }

  /** Runs a tool inline, without a task (policy `never`, or `optional` toward a client without the extension). */
  async runInline(
    tool: RegisteredTaskTool,
    args: JsonObject,
    principal: string,
    signal: AbortSignal,
  ): Promise<CallToolResult> {
    const steps = new DurableSteps({
      toolName: tool.name,
      taskId: undefined,
      lease: undefined,
      store: this.store,
      limits: this.limits,
      signal,
      now: this.now,
      retrying: (call) => call(),
      committing: (call) => call(),
      held: () => Promise.resolve(),
      leaseLost: () => {
        throw new Error('an inline run holds no lease');
      },
    });
    const input = async (): Promise<never> => {
      throw new ProtocolError(
        ErrorCode.MissingRequiredClientCapability,
        `Tool ${tool.name} needs input from the client while it runs; call it with the io.modelcontextprotocol/tasks extension declared`,
      );
    };
    const ctx: TaskContext = {
      taskId: undefined,
      signal,
      attempt: 1,
      principal,
      step: (name, fn) => steps.step(name, fn),
      checkpoint: steps.checkpoint,
      status: async () => {},
      input,
      ...typedInput(input),
    };
    return tool.handler(args, ctx);
  }

  // ---- reads and client writes (tasks/get, tasks/update, tasks/cancel) ---------------------------------------------

  /** `tasks/get`: the DetailedTask for its principal; -32602 for an unknown id and for anyone else's task alike. */
  async getTask(taskId: string, principal: string): Promise<DetailedTask> {
    return this.answerOf(await this.ownedTask(taskId, principal), principal);
  }

  /**
   * The `tasks/get` answer for a task of `principal` just read from the store: the one function both `tasks/get` and
   * `notifications/tasks` build their DetailedTask with (spec: "identical to what tasks/get would have returned").
   */
  async answerOf(task: StoredTask, principal: string): Promise<DetailedTask> {
    const now = this.now();
    if (!isTerminalStatus(task.status) && task.ttlMs !== null && task.createdAt + task.ttlMs <= now) {
      // the sweep may not have run yet: expire on read so a client never sees a task alive past its TTL
      const expired = await this.storeCall(() => this.store.expireOverdue(now));
      this.abortIfRunning(task.taskId, 'expired');
      this.changed(expired);
      task = await this.ownedTask(task.taskId, principal);
    }
    return this.detailed(task, now);
  }

  /**
   * The stored tasks among `taskIds`, read in one go where the store can; unknown and purged ids are left out. The
   * caller checks the owner.
   */
  async readTasks(taskIds: string[]): Promise<StoredTask[]> {
    return this.storeCall(async () => {
      if (this.store.getMany) return this.store.getMany(taskIds);
      const tasks = await Promise.all(taskIds.map((taskId) => this.store.get(taskId)));
      return tasks.filter((task): task is StoredTask => task !== undefined);
    });
  }

  /** Whose each stored task among `taskIds` is, without reading what the tasks hold where the store can (push's listen). */
  async readOwners(taskIds: string[]): Promise<TaskOwner[]> {
    return this.storeCall(async () => {
      if (this.store.taskOwners) return this.store.taskOwners(taskIds);
      return (await this.readTasks(taskIds)).map((task) => ({ taskId: task.taskId, principal: task.principal }));
    });
  }

  /**
   * The versions of the stored tasks among `taskIds` (push's periodic check), each with whether it is open and past its
   * TTL by this server's clock (read in full, it would be expired on read: see `answerOf`). A store without
   * `taskVersions` is read in full.
   */
  async readVersions(taskIds: string[]): Promise<Array<TaskVersion & { overdue: boolean }>> {
    const versions: TaskVersion[] = await this.storeCall(async () => {
      if (this.store.taskVersions) return this.store.taskVersions(taskIds);
      return (await this.readTasks(taskIds)).map((task) => ({
        taskId: task.taskId,
        status: task.status,
        lastUpdatedAt: task.lastUpdatedAt,
        expiresAt: task.ttlMs === null ? undefined : task.createdAt + task.ttlMs,
      }));
    });
    const now = this.now();
    return versions.map((version) => ({
      ...version,
      overdue: !isTerminalStatus(version.status) && version.expiresAt !== undefined && version.expiresAt <= now,
    }));
  }

  /**
   * Calls `listener` with the id of every task whose DetailedTask may have changed: writes made by this instance,
   * and (on a store with signals, PostgreSQL) writes any instance made. A hint to read the task again, never a state.
   */
  onTaskChange(listener: (taskId: string) => void): () => void {
    this.changeListeners.add(listener);
    return () => {
      this.changeListeners.delete(listener);
    };
  }

  private changed(taskIds: string | string[]): void {
    if (this.changeListeners.size === 0) return;
    for (const taskId of typeof taskIds === 'string' ? [taskIds] : taskIds) {
      for (const listener of this.changeListeners) {
        try {
          listener(taskId);
        } catch (error) {
          this.report(error);
        }
      }
    }
  }

  /** `tasks/update`: stores answers to outstanding keys and ignores the rest (spec: SHOULD ignore). */
  async updateTask(taskId: string, principal: string, responses: Record<string, InputResponse>): Promise<void> {
    await this.ownedTask(taskId, principal);
    if (Object.keys(responses).length === 0) return;
    const accepted = await this.storeCall(() => this.store.answerInputs(taskId, responses, this.now()));
    if (accepted.length > 0) {
      this.changed(taskId);
      await this.deliverAnswers(taskId);
    }
  }

  /** `tasks/cancel`: records the intent and aborts the handler; acks on a terminal task too (idempotent). */
  async cancelTask(taskId: string, principal: string): Promise<void> {
    await this.ownedTask(taskId, principal);
    const open = await this.storeCall(() => this.store.requestCancel(taskId, this.now()));
    if (open) {
      this.changed(taskId);
      this.abortIfRunning(taskId, 'cancelled');
    }
  }

  private async ownedTask(taskId: string, principal: string): Promise<StoredTask> {
    const task = await this.storeCall(() => this.store.get(taskId));
    if (task && task.principal === principal) return task;
    // another principal's task is answered exactly as an unknown id (spec, Security: auth binding)
    if (!task && (await this.storeCall(() => this.store.wasPurged(taskId, principal)))) {
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, TASK_EXPIRED);
    }
    throw new ProtocolError(ProtocolErrorCode.InvalidParams, TASK_NOT_FOUND);
  }

  private taskFields(task: StoredTask, now: number) {
    const tool = this.tools.get(task.toolName);
    return {
      taskId: task.taskId,
      status: task.status,
      ...(task.statusMessage !== undefined && { statusMessage: task.statusMessage }),
      createdAt: new Date(task.createdAt).toISOString(),
      lastUpdatedAt: new Date(task.lastUpdatedAt).toISOString(),
      ttlMs: task.ttlMs,
      pollIntervalMs: tool ? tool.pollInterval(now - task.createdAt) : task.pollIntervalMs,
    };
  }

  private detailed(task: StoredTask, now: number): DetailedTask {
    const base = this.taskFields(task, now);
    switch (task.status) {
      case 'input_required': {
        const inputRequests: Record<string, InputRequest> = {};
        for (const input of task.inputs) if (input.response === undefined) inputRequests[input.key] = input.request;
        return { ...base, status: 'input_required', inputRequests };
      }
      case 'completed':
        // schema 2026-07-28: a CallToolResult carries resultType "complete", also when inlined in a task
        return {
          ...base,
          status: 'completed',
          result: { resultType: 'complete', ...(task.result ?? { content: [] }) },
        };
      case 'failed':
        return { ...base, status: 'failed', error: task.error ?? { code: ErrorCode.InternalError, message: 'failed' } };
      case 'cancelled':
        return { ...base, status: 'cancelled' };
      case 'working':
        return { ...base, status: 'working' };
    }
  }

  // ---- running a handler --------------------------------------------------------------------------------------------

  /**
   * Starts the handler only on a lease that is surely this instance's. The lease's expiry was computed before the
   * write that took it (create, claim); when that write was slow to come back, the lease may have run out meanwhile
   * and another instance may have claimed the task and started it. With less than half the lease left, the run waits
   * for the lease loop's next renewal (requested at once, shared by every run waiting): renewed, it starts; not
   * renewed, the task runs elsewhere, not here (a resumable task never runs in two live instances).
   */
  private launchWhileHeld(tool: RegisteredTaskTool, task: StoredTask): void {
    const run = this.launch(tool, task);
    if ((task.leaseExpiresAt ?? 0) - this.now() >= this.leaseMs / 2) {
      this.begin(run);
      return;
    }
    this.requestSweep();
  }

  /** Registers the run (its lease renewed from now on); its handler starts with `begin`. */
  private launch(tool: RegisteredTaskTool, task: StoredTask): RunningTask {
    const lease: LeaseRef = { taskId: task.taskId, fence: task.fence };
    const controller = new AbortController();
    const run: RunningTask = {
      lease,
      toolName: task.toolName,
      inputCapabilities: task.inputCapabilities,
      controller,
      waiters: new Map(),
      cancelTimer: undefined,
      settled: Promise.resolve(),
      ending: false,
      // the lease's expiry was computed before the write that took it went out: what is left of it now, at most
      heldUntil: performance.now() + Math.min(this.leaseMs, (task.leaseExpiresAt ?? 0) - this.now()),
      abortedAt: undefined,
      start: undefined,
      createdAt: task.createdAt,
      attempt: task.attempt,
    };
    // one live run per task in this instance: a re-claim stops the run that held the old fence (docs/DESIGN.md, "Rules
    // learned in the field", 9)
    const previous = this.running.get(task.taskId);
    if (previous) this.loseLease(previous);
    this.running.set(task.taskId, run);
    const steps = new DurableSteps({
      toolName: task.toolName,
      taskId: task.taskId,
      lease,
      store: this.store,
      limits: this.limits,
      signal: controller.signal,
      now: this.now,
      retrying: (call) => this.whileUnreachable(run, call),
      committing: (call) => this.whileUnreachable(run, call, { afterShutdown: true }),
      held: () => this.whileHeld(run),
      leaseLost: () => {
        this.abort(run, 'lease-lost');
        controller.signal.throwIfAborted();
        throw new TaskAbortedError('lease-lost');
      },
    });
    const traced = this.telemetry.run(task);
    const ask = (key: string, request: InputRequest) => traced.input(key, () => this.input(run, key, request));
    const ctx: TaskContext = {
      taskId: task.taskId,
      signal: controller.signal,
      attempt: task.attempt,
      principal: task.principal,
      step: (name, fn) => steps.step(name, fn),
      checkpoint: steps.checkpoint,
      // a status message is advice: a store that cannot take it now must not fail the task (the next one will land)
      status: async (message) => {
        if (run.ending || controller.signal.aborted) return;
        // free text from the handler, kept alike on every store: NUL and lone surrogates become U+FFFD (rule 15)
        const text = storableText(String(message));
        traced.statusMessage(text);
        const stored = await this.store
          .setStatusMessage(lease, text, this.now())
          .catch((error: unknown) => this.reportRepeated(error));
        if (stored) this.changed(lease.taskId);
      },
      input: ask,
      ...typedInput(ask),
    };
    run.start = () => {
      run.settled = (async () => {
        let outcome: TerminalOutcome | undefined;
        try {
          const result = await traced.within(() => tool.handler(task.arguments, ctx));
          outcome = this.withinResultLimit(tool.name, toCompleted(tool.name, result));
        } catch (error) {
          outcome = this.withinResultLimit(tool.name, this.outcomeOfThrow(tool.name, controller.signal, error));
        }
        // the cancel grace ran out and wrote `cancelled` already
        if (run.ending) return traced.ended({ status: 'cancelled' }, this.now());
        await this.end(run, outcome);
        traced.ended(outcome, this.now());
      })();
    };
    return run;
  }

  /** A write sent at `sentAt` (performance.now) found the run's lease still its own. */
  private proven(run: RunningTask, sentAt: number): void {
    run.heldUntil = Math.max(run.heldUntil, sentAt + this.leaseMs);
  }

  /**
   * Resolves once the run's lease is proven for at least a third of a lease ahead (docs/DESIGN.md, "Rules learned in
   * the field", 12): a step's function starts only in an attempt that still holds the task, so one stopped past its
   * lease (a paused process, a store it alone cannot reach) waits for the next renewal, and learns there whether
   * another instance took the task meanwhile (then it is aborted, and the step never runs here). While the lease
   * loop renews on time this resolves at once: a renewal leaves two thirds of a lease, less its round trip.
   */
  private async whileHeld(run: RunningTask): Promise<void> {
    for (;;) {
      run.controller.signal.throwIfAborted();
      if (run.heldUntil - performance.now() >= this.leaseMs / 3) return;
      this.requestSweep();
      await sleep(Math.max(10, Math.min(100, this.leaseMs / 20)));
    }
  }

  /** Starts the run's handler, once. */
  private begin(run: RunningTask): void {
    const start = run.start;
    run.start = undefined;
    if (start && !run.controller.signal.aborted && !this.closed) start();
  }

  /**
   * Writes the run's terminal outcome (none: a lost lease or a shutdown leaves the task to its next holder). While the
   * store is unreachable the write is retried and the lease kept renewed: a result that exists is never dropped for a
   * database blip (docs/DESIGN.md, "Rules learned in the field", 3). It stops when the lease is lost or the server
   * closes.
   */
  private async end(run: RunningTask, outcome: TerminalOutcome | undefined): Promise<void> {
    run.ending = true;
    // a message made of what the handler threw is free text: kept alike on every store (docs/DESIGN.md rule 15)
    if (outcome?.statusMessage !== undefined) {
      outcome = { ...outcome, statusMessage: storableText(outcome.statusMessage) };
    }
    if (run.cancelTimer) clearTimeout(run.cancelTimer);
    try {
      for (let delay = RETRY_MIN_MS; outcome; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
        try {
          const now = this.now();
          if (await this.store.finish(run.lease, outcome, now)) {
            this.changed(run.lease.taskId);
            this.activity({
              type: 'finished',
              taskId: run.lease.taskId,
              tool: run.toolName,
              status: outcome.status,
              attempt: run.attempt,
              durationMs: now - run.createdAt,
            });
          }
          return;
        } catch (error) {
          this.reportRepeated(error);
        }
        if (this.closed || this.running.get(run.lease.taskId) !== run) return;
        await sleep(delay);
        if (this.running.get(run.lease.taskId) !== run) return;
      }
    } finally {
      if (this.running.get(run.lease.taskId) === run) this.running.delete(run.lease.taskId);
    }
  }

  private outcomeOfThrow(toolName: string, signal: AbortSignal, error: unknown): TerminalOutcome | undefined {
    const cause = signal.aborted ? (signal.reason as TaskAbortedError).cause : undefined;
    if (cause === 'cancelled') return { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' };
    // expiry already wrote `failed`; a lost lease or a shutdown leaves the task to its next holder
    if (cause !== undefined) return undefined;
    const jsonRpcError = asJsonRpcError(error);
    if (jsonRpcError) return { status: 'failed', error: jsonRpcError, statusMessage: jsonRpcError.message };
    const message = `Tool ${toolName} failed: ${error instanceof Error ? error.message : String(error)}`;
    return { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message };
  }

  /** A result (or error) over maxResultBytes or maxJsonDepth is not stored: the task fails saying so. */
  private withinResultLimit(toolName: string, outcome: TerminalOutcome | undefined): TerminalOutcome | undefined {
    const payload =
      outcome?.status === 'completed' ? outcome.result : outcome?.status === 'failed' ? outcome.error : undefined;
    if (payload === undefined) return outcome;
    const measured = measureJson(payload, this.limits.maxResultBytes, this.limits.maxJsonDepth);
    if (measured.ok) return outcome;
    const what = outcome?.status === 'completed' ? 'a result that is' : 'an error that is';
    const message = `Tool ${toolName} returned ${what} ${describeRefusal(measured, this.limits, 'maxResultBytes')}; it was not stored`;
    return { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message };
  }

  private async input(run: RunningTask, key: string, request: InputRequest): Promise<InputResponse> {
    const validKey = InputKeySchema.safeParse(key);
    if (!validKey.success) {
      const unstorable = typeof key === 'string' ? unstorableField('input key', key) : undefined;
      throw new Error(unstorable ?? `input key must be a string of 1 to 256 characters, got ${String(key)}`);
    }
    const validRequest = InputRequestSchema.safeParse(request);
    if (!validRequest.success) throw new Error(`input request ${key} is not an elicitation, sampling or roots request`);
    run.controller.signal.throwIfAborted();
    const missing = undeclaredInput(validRequest.data, run.inputCapabilities);
    if (missing) {
      const asked = missing.mode === undefined ? request.method : `${request.method} in ${missing.mode} mode`;
      throw new InputNotDeclaredError(
        key,
        missing.kind,
        missing.mode,
        `Tool ${run.toolName} asked for input ${JSON.stringify(key)} (${asked}), but the request that created task ${run.lease.taskId} did not declare ${missing.needs} in its client capabilities; a server must not send input requests the client has not declared`,
      );
    }
    if (run.waiters.has(key)) throw new Error(`input key ${key} is already awaited`);
    if (run.waiters.size >= this.limits.maxInputRequestsPerTask) {
      throw new Error(
        `input ${key} would be more than this server's limit of ${this.limits.maxInputRequestsPerTask} outstanding input requests per task (maxInputRequestsPerTask): await earlier ones before asking more`,
      );
    }
    const waiting = new Promise<InputResponse>((resolve, reject) => {
      run.waiters.set(key, { resolve, reject });
    });
    waiting.catch(() => {});
    const { held, response } = await this.whileUnreachable(run, () =>
      this.store.requestInput(run.lease, key, validRequest.data, this.now()),
    );
    if (!held) {
      run.waiters.delete(key);
      this.abort(run, 'lease-lost');
      run.controller.signal.throwIfAborted();
    }
    if (response !== undefined) {
      run.waiters.delete(key);
      return response;
    }
    this.changed(run.lease.taskId);
    // an answer may have landed between the write above and the waiter being visible to a signal; if the store cannot
    // say now, the lease loop's fallback delivers it later
    await this.deliverAnswers(run.lease.taskId).catch(this.reportRepeated);
    return waiting;
  }

  /**
   * Runs a handler-side store call, trying again while the store is unreachable, for as long as the run is live: a
   * database blip must not fail the task (docs/DESIGN.md, "Rules learned in the field", 3).
   */
  private async whileUnreachable<T>(
    run: RunningTask,
    call: () => Promise<T>,
    options: { afterShutdown?: boolean } = {},
  ): Promise<T> {
    for (let delay = RETRY_MIN_MS; ; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
      if (!(options.afterShutdown && this.mayStillCommit(run))) run.controller.signal.throwIfAborted();
      try {
        return await call();
      } catch (error) {
        this.reportRepeated(error);
      }
      await sleep(delay);
    }
  }

  /**
   * A step whose function finished is committed even when the run was stopped meanwhile for a shutdown or a cancel,
   * within the grace `close()` gives handlers: the lease is still held (close hands it back only after the grace), and
   * a side effect that happened must not run again in the next attempt (docs/DESIGN.md, "Rules learned in the field",
   * 12). The store's fence still refuses the write once another instance holds the task.
   */
  private mayStillCommit(run: RunningTask): boolean {
    const reason = run.controller.signal.reason as TaskAbortedError | undefined;
    if (!run.controller.signal.aborted || reason?.cause === 'lease-lost' || reason?.cause === 'expired') return false;
    return run.abortedAt !== undefined && performance.now() - run.abortedAt < this.cancelGraceMs;
  }

  /** Hands stored answers to the handler's waiting `input()` calls. */
  private async deliverAnswers(taskId: string): Promise<void> {
    const run = this.running.get(taskId);
    if (run) await this.deliverAnswersTo([run]);
  }

  /** Hands the stored answers to every waiting `input()` of these runs, in one read. */
  private async deliverAnswersTo(runs: RunningTask[]): Promise<void> {
    const awaited = runs.flatMap((run) => [...run.waiters.keys()].map((key) => ({ taskId: run.lease.taskId, key })));
    if (awaited.length === 0) return;
    for (const { taskId, key, response } of await this.store.answeredInputs(awaited)) {
      const run = this.running.get(taskId);
      const waiter = run?.waiters.get(key);
      if (run && waiter) {
        run.waiters.delete(key);
        waiter.resolve(response);
      }
    }
  }

  private abortIfRunning(taskId: string, cause: AbortCause): void {
    const run = this.running.get(taskId);
    if (run) this.abort(run, cause);
  }

  private abort(run: RunningTask, cause: AbortCause): void {
    if (run.controller.signal.aborted || (run.ending && cause !== 'lease-lost')) return;
    const reason = new TaskAbortedError(cause);
    run.abortedAt = performance.now();
    run.controller.abort(reason);
    for (const waiter of run.waiters.values()) waiter.reject(reason);
    run.waiters.clear();
    if (cause === 'cancelled') {
      // cooperative, but never stuck: a handler that ignores its signal is marked cancelled after the grace period
      run.cancelTimer = setTimeout(() => {
        if (this.running.get(run.lease.taskId) !== run || run.ending) return;
        void this.end(run, { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' });
      }, this.cancelGraceMs);
      run.cancelTimer.unref();
    }
  }

  /** The run no longer holds its task (the fence moved, or the task ended elsewhere): stop it at once. */
  private loseLease(run: RunningTask): void {
    if (this.running.get(run.lease.taskId) === run) this.running.delete(run.lease.taskId);
    this.abort(run, 'lease-lost');
  }

  private async onSignal(signal: TaskSignal): Promise<void> {
    // every signal is a committed change of the task, by this instance or another (postgresTaskStore.ts, `notify`)
    this.changed(signal.taskId);
    try {
      if (signal.kind === 'cancel') this.abortIfRunning(signal.taskId, 'cancelled');
      else if (signal.kind === 'input') await this.deliverAnswers(signal.taskId);
    } catch (error) {
      this.report(error);
    }
  }

  // ---- the lease loop: renewal, fallback signals, orphans; and housekeeping: expiry, purge
  // ---------------------------

  /** Runs a lease tick now, or right after the one in flight: a renewal is never skipped, and requests coalesce. */
  private requestSweep(): void {
    if (!this.started || this.closed) return;
    if (this.sweeping) {
      this.sweepAgain = true;
      return;
    }
    this.sweeping = this.sweep([]).finally(() => {
      this.sweeping = undefined;
      if (this.sweepAgain) {
        this.sweepAgain = false;
        this.requestSweep();
      }
    });
  }

  /**
   * One tick of the lease loop. Every lease this instance holds is renewed in one statement, whatever their number
   * (docs/DESIGN.md, "Rules learned in the field", 8); a run whose lease was not renewed lost it (the fence moved, or
   * the task ended elsewhere) and is aborted at once (rule 9). A renewal that failed because the store could not be
   * reached says nothing about the leases: the handlers keep running and the next tick renews them (rule 3).
   * Orphans are claimed only right after a renewal, so this instance never mistakes its own leases for orphans.
   */
  private async sweep(deadHolders: string[]): Promise<void> {
    try {
      const runs = [...this.running.values()];
      if (!(await this.renew(runs))) return;
      // runs that joined while that statement was out (a create or a claim that came back) are renewed before any
      // claim, so a slow create is never taken for an orphan by its own instance
      const renewedRuns = new Set(runs);
      const joined = [...this.running.values()].filter((r) => !renewedRuns.has(r));
      if (joined.length > 0 && !(await this.renew(joined))) return;
      // fallback for a missed input signal: one read for every awaited key
      await this.deliverAnswersTo([...this.running.values()].filter((r) => r.waiters.size > 0));
      await this.takeOverOrphans(deadHolders);
    } catch (error) {
      this.gate.failed();
      this.report(error);
    }
  }

  /** Renews the runs' leases in one statement and acts on the answer; false when the store could not be reached. */
  private async renew(runs: RunningTask[]): Promise<boolean> {
    const sentAt = this.gate.clock();
    let renewed;
    try {
      renewed = await this.store.renewLeases(
        this.instanceId,
        runs.map((r) => r.lease),
        this.now() + this.leaseMs,
      );
      // no lease, no statement: only a renewal that went out says the store answers
      if (runs.length > 0) this.gate.answered(sentAt);
    } catch (error) {
      this.gate.failed();
      if (!this.storeUnreachable) {
        this.report(
          new Error(
            `Task store unreachable, keeping ${this.running.size} running tasks and renewing their leases once it is back: ${errorMessage(error)}`,
            { cause: error },
          ),
        );
      }
      this.storeUnreachable = true;
      return false;
    }
    if (this.storeUnreachable) this.report(new Error('Task store reachable again, leases renewed'));
    this.storeUnreachable = false;
    const held = new Map(renewed.map((l) => [l.taskId, l]));
    for (const run of runs) {
      const lease = held.get(run.lease.taskId);
      if (!lease || lease.fence !== run.lease.fence) {
        this.loseLease(run);
        continue;
      }
      this.proven(run, sentAt);
      // fallback for a missed cancel signal
      if (lease.cancelRequested) this.abort(run, 'cancelled');
      // a run that waited for this proof of its lease starts now
      else this.begin(run);
    }
    return true;
  }

  /**
   * Claims orphans in batches, for at most a third of a lease per tick so the next renewal is never late; what is
   * left is claimed on the next tick. A lease that ran out is taken only through the gate: after this instance saw the
   * store answer promptly for a whole lease (takeoverGate.ts; docs/DESIGN.md, "Rules learned in the field", 11).
   * Until then only leases handed back (expiry 0, see close) and those of holders proven dead are taken, and the claim
   * still goes out, as the probe that opens the gate.
   */
  private async takeOverOrphans(deadHolders: string[]): Promise<void> {
    const tickStartedAt = this.gate.clock();
    for (;;) {
      const now = this.now();
      const sentAt = this.gate.clock();
      const expiredBefore = this.gate.isOpen() ? now : 1;
      let claimed;
      try {
        claimed = await this.store.claimOrphans(this.instanceId, expiredBefore, now + this.leaseMs, 100, deadHolders);
      } catch (error) {
        this.gate.failed();
        throw error;
      }
      this.gate.answered(sentAt);
      for (const task of claimed) {
        const lease = { taskId: task.taskId, fence: task.fence };
        const tool = this.tools.get(task.toolName);
        const ownRun = this.running.get(task.taskId);
        if (this.creating.has(task.taskId)) {
          // created here a moment ago, the create slower than the lease: launched under this claim once it is back
          this.creating.set(task.taskId, { fence: task.fence, leaseExpiresAt: task.leaseExpiresAt });
        } else if (ownRun && !ownRun.controller.signal.aborted) {
          // this instance's own run, whose lease ran out unrenewed (a slow or unreachable store): nobody else took it,
          // so the run goes on under the new fence, neither re-run nor failed (docs/DESIGN.md, "Rules learned in the
          // field", 3 and 9)
          ownRun.lease.fence = task.fence;
          this.proven(ownRun, sentAt);
          this.begin(ownRun);
          this.telemetry.leaseTakeover(task.toolName, 'continued');
          this.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'continued' });
        } else if (task.cancelRequested) {
          const finished = await this.store.finish(
            lease,
            { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' },
            now,
          );
          if (finished) this.changed(task.taskId);
          this.telemetry.leaseTakeover(task.toolName, 'cancelled');
          this.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'cancelled' });
        } else if (tool?.resumable && task.resumable) {
          this.launchWhileHeld(tool, task);
          this.telemetry.leaseTakeover(task.toolName, 'rerun');
          this.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'rerun' });
        } else {
          const message = tool
            ? INTERRUPTED_MESSAGE
            : `${INTERRUPTED_MESSAGE} (tool ${task.toolName} is not registered on this server)`;
          const finished = await this.store.finish(
            lease,
            { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message },
            now,
          );
          if (finished) this.changed(task.taskId);
          this.telemetry.leaseTakeover(task.toolName, 'interrupted');
          this.activity({ type: 'taken-over', taskId: task.taskId, tool: task.toolName, outcome: 'interrupted' });
        }
      }
      if (claimed.length < 100 || this.closed || this.gate.clock() - tickStartedAt > this.leaseMs / 3) return;
    }
  }

  /**
   * Expiry and purge, in small steps with the event loop free between them, on a timer of their own so they never
   * delay a renewal. Purge goes on while there is work, for at most a third of a lease per tick: thousands of rows a
   * second, more than one instance creates (docs/DESIGN.md, "Rules learned in the field", 8).
   */
  private async housekeep(): Promise<void> {
    try {
      const now = this.now();
      for (;;) {
        const expired = await this.store.expireOverdue(now, SWEEP_PAGE);
        for (const taskId of expired) this.abortIfRunning(taskId, 'expired');
        this.changed(expired);
        if (expired.length > 0) this.activity({ type: 'expired', count: expired.length });
        if (expired.length < SWEEP_PAGE || this.closed) break;
        await yieldToServing();
      }
      const startedAt = performance.now();
      const options = { limit: SWEEP_PAGE, unlimitedRetentionMs: this.unlimitedRetentionMs };
      let purged = 0;
      for (;;) {
        const count = await this.store.purge(now, this.retentionMs, options);
        purged += count;
        if (count < SWEEP_PAGE || this.closed || performance.now() - startedAt > this.leaseMs / 3) break;
        await yieldToServing();
      }
      if (purged > 0) this.activity({ type: 'purged', count: purged });
    } catch (error) {
      this.report(error);
    }
  }

  /** Tells `onActivity`; a listener that throws is reported, never in the way of the task. */
  private activity(activity: TaskActivity): void {
    if (!this.onActivity) return;
    try {
      this.onActivity(activity);
    } catch (error) {
      this.report(error);
    }
  }

  /** Store failures reach the caller as -32603 with a clear message; the task is left as it was. */
  private async storeCall<T>(call: () => Promise<T>): Promise<T> {
    try {
      return await call();
    } catch (error) {
      if (error instanceof ProtocolError) throw error;
      if (error instanceof OpenTaskLimitError) {
        throw new ProtocolError(
          ProtocolErrorCode.InternalError,
          `Too many open tasks: this caller already has ${error.limit} tasks that have not finished, this server's limit (maxOpenTasksPerPrincipal); wait for some to finish, or cancel them with tasks/cancel, then call again`,
          { limit: 'maxOpenTasksPerPrincipal', max: error.limit },
        );
      }
      if (error instanceof StoredTaskLimitError) {
        throw new ProtocolError(
          ProtocolErrorCode.InternalError,
          `Too many stored tasks: this caller already has ${error.limit} tasks kept on this server (open, or finished and kept for their retention), this server's limit (maxStoredTasksPerPrincipal); wait for finished ones to be purged, then call again`,
          { limit: 'maxStoredTasksPerPrincipal', max: error.limit },
        );
      }
      this.report(error);
      throw new ProtocolError(
        ProtocolErrorCode.InternalError,
        `Task store unavailable: ${error instanceof Error ? error.message : String(error)}`,
      );
    }
  }

  private readonly report = (error: unknown): void => {
    this.onError(error instanceof Error ? error : new Error(String(error)));
  };

  /** For failures every running handler may hit at once (a store outage): one report per few seconds, with a count. */
  private readonly reportRepeated = (error: unknown): void => {
    const now = Date.now();
    if (now - this.lastRepeatReport < REPEAT_REPORT_MS) {
      this.suppressedReports++;
      return;
    }
    const suppressed = this.suppressedReports;
    this.lastRepeatReport = now;
    this.suppressedReports = 0;
    const more = suppressed > 0 ? ` (and ${suppressed} more like it)` : '';
    this.onError(new Error(`${errorMessage(error)}${more}`, { cause: error }));
  };
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/** The runs as the open-tasks gauge counts them (read only when a metrics reader collects). */
function* runViews(running: Map<string, RunningTask>): Iterable<RunView> {
  for (const run of running.values()) yield { toolName: run.toolName, waitingForInput: run.waiters.size > 0 };
}

/** Lets requests waiting on the event loop run between two steps of a sweep. */
function yieldToServing(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/** `completed` also for `isError: true` results (spec: failed MUST NOT be used for non-JSON-RPC errors). */
function toCompleted(toolName: string, result: unknown): TerminalOutcome {
  const parsed = CallToolResultSchema.safeParse(result);
  if (!parsed.success) {
    const message = `Tool ${toolName} returned an invalid CallToolResult: ${parsed.error.issues[0]?.message ?? 'invalid'}`;
    return { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message };
  }
  return { status: 'completed', result: result as JsonObject };
}

/** A thrown JSON-RPC error (the SDK's ProtocolError, or any `{ code: integer, message: string }`). */
function asJsonRpcError(error: unknown): JsonRpcError | undefined {
  if (typeof error !== 'object' || error === null) return undefined;
  const { code, message, data } = error as { code?: unknown; message?: unknown; data?: unknown };
  if (!Number.isSafeInteger(code) || typeof message !== 'string') return undefined;
  return { code: code as number, message, ...(data !== undefined && { data }) };
}

/**
 * An idempotency key is bound to the tool and the arguments it created its task with (docs/DESIGN.md, rule 5): a reuse
 * with others is refused, so a business id reused by another caller never hands over the first call's task.
 */
function assertSameCall(task: StoredTask, toolName: string, args: JsonObject, key: string | undefined): void {
  if (task.toolName !== toolName) {
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `Idempotency key ${JSON.stringify(key)} is bound to a call of tool ${task.toolName}, not ${toolName}: use another key`,
    );
  }
  if (canonicalJson(task.arguments) !== canonicalJson(args)) {
    throw new ProtocolError(
      ProtocolErrorCode.InvalidParams,
      `Idempotency key ${JSON.stringify(key)} is bound to a call of tool ${toolName} with other arguments: use another key`,
    );
  }
}
