/**
 * The task runtime (docs/DESIGN.md, "The task's life on the server"): creates tasks, runs their handlers under a lease,
 * answers reads from the store, takes over orphans after a crash, expires and purges. The store is the only home of
 * task state. This class creates, reads and takes the client's writes; the handlers running here are taskRuns.ts's,
 * the background work (renewal, takeover, expiry, purge) is leaseLoop.ts's, and its options are taskServerOptions.ts.
 */
import type { CallToolResult } from '@modelcontextprotocol/server';
import { ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import type * as z from 'zod/v4';

import type { CreateTaskResult, DetailedTask, InputRequest, InputResponse, JsonObject } from '../protocol/index.js';
import { canonicalJson, ErrorCode, isTerminalStatus } from '../protocol/index.js';
import { unstorableField } from '../protocol/storableText.js';
import type { TraceCarrier } from '../protocol/traceContext.js';
import { isDeadLocalHolder, newLeaseHolder } from '../shared/lease/leaseHolder.js';
import { DurableSteps } from './durableSteps.js';
import { LeaseLoop } from './leaseLoop.js';
import { describeRefusal, measureJson, resolveLimits, type TaskLimits } from './limits.js';
import { toPollIntervalPolicy } from './pollInterval.js';
import type {
  InputCapabilities,
  StoredTask,
  TaskOwner,
  TaskSignal,
  TaskStore,
  TaskVersion,
} from './store/taskStore.js';
import { OpenTaskLimitError, StoredTaskLimitError } from './store/taskStore.js';
import { newTaskId } from './taskId.js';
import { TaskPush } from './taskPush.js';
import { TaskRuns } from './taskRuns.js';
import {
  DEFAULT_LEASE_MS,
  type RegisteredTaskTool,
  type TaskActivity,
  type TaskServerOptions,
} from './taskServerOptions.js';
import type { TaskContext, TaskHandler, TaskToolConfig, ToolArgs } from './taskTool.js';
import { ServerTelemetry } from './telemetry.js';
import { typedInput } from './typedInput.js';

const HOUR_MS = 3_600_000;

/** Background failures that repeat (a store outage seen by every running handler) are reported this seldom. */
const REPEAT_REPORT_MS = 5000;

/** Messages of the -32602 answers: the same for an unknown id and for another principal's task. */
const TASK_NOT_FOUND = 'Failed to retrieve task: Task not found';
const TASK_EXPIRED = 'Failed to retrieve task: Task has expired';

export class TaskServer {
  readonly instanceId: string;
  readonly store: TaskStore;
  readonly limits: TaskLimits;
  /** `notifications/tasks` over `subscriptions/listen` (taskPush.ts); http.ts serves its streams. */
  readonly push: TaskPush;
  /** @internal the spans and metrics of this server (telemetry.ts) */
  readonly telemetry: ServerTelemetry;
  private readonly tools = new Map<string, RegisteredTaskTool>();
  /** The handlers running here (taskRuns.ts). */
  private readonly runs: TaskRuns;
  /** Renewal, takeover, expiry and purge (leaseLoop.ts). */
  private readonly loop: LeaseLoop;
  private readonly leaseMs: number;
  private readonly onError: (error: Error) => void;
  private readonly onActivity: ((activity: TaskActivity) => void) | undefined;
  private readonly now: () => number;
  private lastRepeatReport = 0;
  private suppressedReports = 0;
  private unsubscribe: (() => void) | undefined;
  /** Told the id of every task whose DetailedTask may have changed (taskPush.ts sends it on). */
  private readonly changeListeners = new Set<(taskId: string) => void>();
  private started = false;
  private closed = false;

  constructor(options: TaskServerOptions) {
    this.instanceId = options.instanceId ?? newLeaseHolder();
    this.telemetry = new ServerTelemetry(options.telemetry ?? {}, () => this.runs.views());
    this.store = this.telemetry.instrumentStore(options.store);
    this.limits = resolveLimits(options);
    this.leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    this.onError = options.onError ?? ((error) => console.error(`[closeout] ${error.message}`));
    this.onActivity = options.onActivity;
    // a store that instances on several hosts share keeps the time they agree on (docs/DESIGN.md, "Rules learned in
    // the field", 2); a store of one host runs on its clock
    const store = options.store;
    this.now = options.now ?? (store.now ? () => store.now!() : Date.now);
    const isClosed = () => this.closed;
    const changed = (taskIds: string | string[]) => this.changed(taskIds);
    const activity = (event: TaskActivity) => this.activity(event);
    this.runs = new TaskRuns({
      store: this.store,
      limits: this.limits,
      telemetry: this.telemetry,
      leaseMs: this.leaseMs,
      cancelGraceMs: options.cancelGraceMs ?? 5000,
      now: this.now,
      isClosed,
      requestRenewal: () => this.loop.requestSweep(),
      changed,
      activity,
      reportRepeated: this.reportRepeated,
    });
    this.loop = new LeaseLoop({
      store: this.store,
      instanceId: this.instanceId,
      runs: this.runs,
      telemetry: this.telemetry,
      leaseMs: this.leaseMs,
      sweepIntervalMs: options.sweepIntervalMs ?? Math.max(50, Math.floor(this.leaseMs / 3)),
      retentionMs: options.retentionMs ?? HOUR_MS,
      unlimitedRetentionMs: options.unlimitedRetentionMs ?? 7 * 24 * HOUR_MS,
      now: this.now,
      tool: (name) => this.tools.get(name),
      changed,
      activity,
      report: this.report,
      isClosed,
    });
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
    // the name is stored with each task: text every store keeps as it is (docs/DESIGN.md rule 14)
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
    this.unsubscribe = this.store.subscribe?.((signal) => void this.onSignal(signal));
    // tried again on the lease loop's ticks until the store answers it (a start during an outage fails nothing)
    await this.loop.start(async () => {
      await this.store.syncClock?.();
      return (await this.store.leaseHolders()).filter((holder) => isDeadLocalHolder(holder));
    });
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
    const stopped = this.loop.stop();
    this.unsubscribe?.();
    await stopped;
    const leases = await this.runs.stopAll();
    if (leases.length > 0) await this.store.renewLeases(this.instanceId, leases, 0).catch(this.report);
  }

  /** How many handlers run in this instance now. */
  runningCount(): number {
    return this.runs.size;
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
    // while the create is on its way back, the task is this instance's even if its lease ran out (see LeaseLoop.takeOverOrphans)
    this.runs.creationStarted(taskId);
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
      reclaimed = this.runs.creationEnded(taskId);
    }
    const { task, created } = stored;
    if (created) {
      this.activity({ type: 'created', taskId, tool: tool.name });
      this.runs.launchWhileHeld(tool, reclaimed ? { ...task, ...reclaimed } : task);
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
      this.runs.abortIfRunning(task.taskId, 'expired');
      this.changed(expired);
      // only the call that expired a task returns it: the sweep, or another read, never logs it again
      if (expired.length > 0) this.activity({ type: 'expired', count: expired.length });
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
      await this.runs.deliverAnswers(taskId);
    }
  }

  /** `tasks/cancel`: records the intent and aborts the handler; acks on a terminal task too (idempotent). */
  async cancelTask(taskId: string, principal: string): Promise<void> {
    await this.ownedTask(taskId, principal);
    const open = await this.storeCall(() => this.store.requestCancel(taskId, this.now()));
    if (open) {
      this.changed(taskId);
      this.runs.abortIfRunning(taskId, 'cancelled');
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

  // ---- signals and background work ------------------------------------------------------------------------------

  private async onSignal(signal: TaskSignal): Promise<void> {
    // every signal is a committed change of the task, by this instance or another (postgresTaskStore.ts, `notify`)
    this.changed(signal.taskId);
    try {
      if (signal.kind === 'cancel') this.runs.abortIfRunning(signal.taskId, 'cancelled');
      else if (signal.kind === 'input') await this.runs.deliverAnswers(signal.taskId);
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
    this.onError(new Error(`${error instanceof Error ? error.message : String(error)}${more}`, { cause: error }));
  };
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
