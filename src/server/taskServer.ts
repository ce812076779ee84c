/**
 * The task runtime (DESIGN.md, "The task's life on the server"): creates tasks, runs their handlers under a lease,
 * answers reads from the store, takes over orphans after a crash, expires and purges. The store is the only home of
 * task state; this class holds only what a live handler needs (its abort controller and input waiters).
 */
import { CallToolResultSchema } from '@modelcontextprotocol/core';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import type * as z from 'zod/v4';

import { isDeadLocalOwner, newLeaseOwner } from '../leaseOwner.js';
import type {
  CreateTaskResult,
  DetailedTask,
  InputRequest,
  InputResponse,
  JsonObject,
  JsonRpcError,
} from '../protocol/index.js';
import { ErrorCode, InputKeySchema, InputRequestSchema, isTerminalStatus } from '../protocol/index.js';
import { describeRefusal, measureJson, resolveLimits, type TaskLimits } from './limits.js';
import { toPollIntervalPolicy } from './pollInterval.js';
import type { LeaseRef, StoredTask, TaskSignal, TaskStore, TerminalOutcome } from './store/taskStore.js';
import { OpenTaskLimitError, StoredTaskLimitError } from './store/taskStore.js';
import { newTaskId } from './taskId.js';
import type {
  AbortCause,
  PollIntervalPolicy,
  TaskContext,
  TaskHandler,
  TaskSupport,
  TaskToolConfig,
  ToolArgs,
} from './taskTool.js';
import { TaskAbortedError } from './taskTool.js';

const HOUR_MS = 3_600_000;

/** The store, timings, and the resource limits of limits.ts (README, "Limits"); every limit has a default. */
export interface TaskServerOptions extends Partial<TaskLimits> {
  store: TaskStore;
  /** How long a lease holds without renewal. A dead instance's tasks are taken over after this. Default 10 s. */
  leaseMs?: number;
  /** How often leases are renewed and the sweeps (expiry, purge, orphans, fallback signals) run. Default leaseMs/3. */
  sweepIntervalMs?: number;
  /** How long a terminal task is kept past `createdAt + ttlMs` before it is purged. Default one hour. */
  retentionMs?: number;
  /** How long a cancelled handler may take to stop before the task is marked cancelled anyway. Default 5 s. */
  cancelGraceMs?: number;
  /** Identity of this instance in leases. Default `host:pid:random`. */
  instanceId?: string;
  /** Called with errors that have no caller to go to (a failed sweep, a store error in a background write). */
  onError?: (error: Error) => void;
  /** The clock, for tests. */
  now?: () => number;
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
  controller: AbortController;
  /** Input keys the handler waits on, with how to resume it. */
  waiters: Map<string, { resolve: (response: InputResponse) => void; reject: (error: unknown) => void }>;
  cancelTimer: NodeJS.Timeout | undefined;
  settled: Promise<void>;
}

/** Messages of the -32602 answers: the same for an unknown id and for another principal's task. */
const TASK_NOT_FOUND = 'Failed to retrieve task: Task not found';
const TASK_EXPIRED = 'Failed to retrieve task: Task has expired';

export const INTERRUPTED_MESSAGE = 'Task interrupted by a server restart before it finished';

export class TaskServer {
  readonly instanceId: string;
  readonly store: TaskStore;
  readonly limits: TaskLimits;
  private readonly tools = new Map<string, RegisteredTaskTool>();
  private readonly running = new Map<string, RunningTask>();
  private readonly leaseMs: number;
  private readonly sweepIntervalMs: number;
  private readonly retentionMs: number;
  private readonly cancelGraceMs: number;
  private readonly onError: (error: Error) => void;
  private readonly now: () => number;
  private sweepTimer: NodeJS.Timeout | undefined;
  private sweeping: Promise<void> | undefined;
  private unsubscribe: (() => void) | undefined;
  private started = false;
  private closed = false;

  constructor(options: TaskServerOptions) {
    this.store = options.store;
    this.limits = resolveLimits(options);
    this.leaseMs = options.leaseMs ?? 10_000;
    this.sweepIntervalMs = options.sweepIntervalMs ?? Math.max(50, Math.floor(this.leaseMs / 3));
    this.retentionMs = options.retentionMs ?? HOUR_MS;
    this.cancelGraceMs = options.cancelGraceMs ?? 5000;
    this.instanceId = options.instanceId ?? newLeaseOwner();
    this.onError = options.onError ?? ((error) => console.error(`[closeout] ${error.message}`));
    this.now = options.now ?? Date.now;
  }

  /** Registers a task tool. Its handler gets the validated arguments and a TaskContext. */
  registerTool<Schema extends z.ZodType<JsonObject> | undefined = undefined>(
    name: string,
    config: TaskToolConfig<Schema>,
    handler: TaskHandler<ToolArgs<Schema>>,
  ): this {
    if (this.tools.has(name)) throw new Error(`task tool ${name} is already registered`);
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
    const deadOwners = (await this.store.leaseOwners()).filter((owner) => isDeadLocalOwner(owner));
    await this.sweep(deadOwners);
    this.sweepTimer = setInterval(() => {
      if (this.sweeping) return;
      this.sweeping = this.sweep([]).finally(() => (this.sweeping = undefined));
    }, this.sweepIntervalMs);
    this.sweepTimer.unref();
  }

  /**
   * Stops the background work and hands running tasks back: their handlers are aborted and their leases released,
   * so a restarted or another instance takes them over at once.
   */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.unsubscribe?.();
    await this.sweeping;
    const leases = [...this.running.values()].map((r) => r.lease);
    for (const run of this.running.values()) this.abort(run, 'shutdown');
    await Promise.allSettled([...this.running.values()].map((r) => r.settled));
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
  ): Promise<CreateTaskResult> {
    const measured = measureJson(args, this.limits.maxArgumentsBytes, this.limits.maxJsonDepth);
    if (!measured.ok) {
      throw new ProtocolError(
        ProtocolErrorCode.InvalidParams,
        `Arguments for tool ${tool.name} are ${describeRefusal(measured, this.limits, 'maxArgumentsBytes')}: send smaller arguments, or pass large inputs by reference (a URI)`,
      );
    }
    const now = this.now();
    const { task, created } = await this.storeCall(() =>
      this.store.create({
        taskId: newTaskId(),
        owner: principal,
        toolName: tool.name,
        arguments: args,
        createdAt: now,
        ttlMs: tool.ttlMs,
        pollIntervalMs: tool.pollInterval(0),
        resumable: tool.resumable,
        idempotencyKey,
        leaseOwner: this.instanceId,
        leaseExpiresAt: now + this.leaseMs,
        ...(this.limits.maxOpenTasksPerPrincipal !== Infinity && {
          maxOpenTasksForOwner: this.limits.maxOpenTasksPerPrincipal,
        }),
        ...(this.limits.maxStoredTasksPerPrincipal !== Infinity && {
          maxStoredTasksForOwner: this.limits.maxStoredTasksPerPrincipal,
        }),
      }),
    );
    if (created) void this.launchWhileHeld(tool, task).catch(this.report);
    return { resultType: 'task', ...this.taskFields(task, now) };
  }

  /** Runs a tool inline, without a task (policy `never`, or `optional` toward a client without the extension). */
  async runInline(
    tool: RegisteredTaskTool,
    args: JsonObject,
    principal: string,
    signal: AbortSignal,
  ): Promise<CallToolResult> {
    const ctx: TaskContext = {
      taskId: undefined,
      signal,
      attempt: 1,
      principal,
      status: async () => {},
      input: async () => {
        throw new ProtocolError(
          ErrorCode.MissingRequiredClientCapability,
          `Tool ${tool.name} needs input from the client while it runs; call it with the io.modelcontextprotocol/tasks extension declared`,
        );
      },
    };
    return tool.handler(args, ctx);
  }

  // ---- reads and client writes (tasks/get, tasks/update, tasks/cancel) ---------------------------------------------

  /** `tasks/get`: the DetailedTask for its owner; -32602 for an unknown id and for anyone else's task alike. */
  async getTask(taskId: string, principal: string): Promise<DetailedTask> {
    let task = await this.ownedTask(taskId, principal);
    const now = this.now();
    if (!isTerminalStatus(task.status) && task.ttlMs !== null && task.createdAt + task.ttlMs <= now) {
      // the sweep may not have run yet: expire on read so a client never sees a task alive past its TTL
      await this.storeCall(() => this.store.expireOverdue(now));
      this.abortIfRunning(taskId, 'expired');
      task = await this.ownedTask(taskId, principal);
    }
    return this.detailed(task, now);
  }

  /** `tasks/update`: stores answers to outstanding keys and ignores the rest (spec: SHOULD ignore). */
  async updateTask(taskId: string, principal: string, responses: Record<string, InputResponse>): Promise<void> {
    await this.ownedTask(taskId, principal);
    if (Object.keys(responses).length === 0) return;
    const accepted = await this.storeCall(() => this.store.answerInputs(taskId, responses, this.now()));
    if (accepted.length > 0) await this.deliverAnswers(taskId);
  }

  /** `tasks/cancel`: records the intent and aborts the handler; acks on a terminal task too (idempotent). */
  async cancelTask(taskId: string, principal: string): Promise<void> {
    await this.ownedTask(taskId, principal);
    const open = await this.storeCall(() => this.store.requestCancel(taskId, this.now()));
    if (open) this.abortIfRunning(taskId, 'cancelled');
  }

  private async ownedTask(taskId: string, principal: string): Promise<StoredTask> {
    const task = await this.storeCall(() => this.store.get(taskId));
    if (task && task.owner === principal) return task;
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
   * and another instance may have claimed the task and started it. With less than half the lease left (the sweep
   * renews it every leaseMs/3 by default), renew it first, fenced: if that fails, the task runs elsewhere, not here
   * (a resumable task never runs in two live instances).
   */
  private async launchWhileHeld(tool: RegisteredTaskTool, task: StoredTask): Promise<void> {
    let expiresAt = task.leaseExpiresAt ?? 0;
    for (let tries = 0; expiresAt - this.now() < this.leaseMs / 2; tries++) {
      // a store this slow every time: leave the task to whoever claims it once the lease has run out
      if (tries === 3) return;
      const until = this.now() + this.leaseMs;
      const lease = { taskId: task.taskId, fence: task.fence };
      if ((await this.store.renewLeases(this.instanceId, [lease], until)).length === 0) return;
      expiresAt = until;
    }
    this.launch(tool, task);
  }

  private launch(tool: RegisteredTaskTool, task: StoredTask): void {
    const lease: LeaseRef = { taskId: task.taskId, fence: task.fence };
    const controller = new AbortController();
    const run: RunningTask = {
      lease,
      controller,
      waiters: new Map(),
      cancelTimer: undefined,
      settled: Promise.resolve(),
    };
    this.running.set(task.taskId, run);
    const ctx: TaskContext = {
      taskId: task.taskId,
      signal: controller.signal,
      attempt: task.attempt,
      principal: task.owner,
      status: async (message) => {
        await this.store.setStatusMessage(lease, String(message), this.now());
      },
      input: (key, request) => this.input(run, key, request),
    };
    run.settled = (async () => {
      let outcome: TerminalOutcome | undefined;
      try {
        const result = await tool.handler(task.arguments, ctx);
        outcome = this.withinResultLimit(tool.name, toCompleted(tool.name, result));
      } catch (error) {
        outcome = this.withinResultLimit(tool.name, this.outcomeOfThrow(tool.name, controller.signal, error));
      }
      if (run.cancelTimer) clearTimeout(run.cancelTimer);
      this.running.delete(task.taskId);
      if (outcome) await this.store.finish(lease, outcome, this.now()).catch(this.report);
    })();
  }

  private outcomeOfThrow(toolName: string, signal: AbortSignal, error: unknown): TerminalOutcome | undefined {
    const cause = signal.aborted ? (signal.reason as TaskAbortedError).cause : undefined;
    if (cause === 'cancelled') return { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' };
    // expiry already wrote `failed`; a lost lease or a shutdown leaves the task to its next owner
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
    if (!validKey.success) throw new Error(`input key must be a string of 1 to 256 characters, got ${String(key)}`);
    const validRequest = InputRequestSchema.safeParse(request);
    if (!validRequest.success) throw new Error(`input request ${key} is not an elicitation, sampling or roots request`);
    run.controller.signal.throwIfAborted();
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
    const { held, response } = await this.store.requestInput(run.lease, key, validRequest.data, this.now());
    if (!held) {
      run.waiters.delete(key);
      this.abort(run, 'lease-lost');
      run.controller.signal.throwIfAborted();
    }
    if (response !== undefined) {
      run.waiters.delete(key);
      return response;
    }
    // an answer may have landed between the write above and the waiter being visible to a signal
    await this.deliverAnswers(run.lease.taskId);
    return waiting;
  }

  /** Hands stored answers to the handler's waiting `input()` calls. */
  private async deliverAnswers(taskId: string): Promise<void> {
    const run = this.running.get(taskId);
    if (!run || run.waiters.size === 0) return;
    const task = await this.store.get(taskId);
    for (const input of task?.inputs ?? []) {
      const waiter = run.waiters.get(input.key);
      if (waiter && input.response !== undefined) {
        run.waiters.delete(input.key);
        waiter.resolve(input.response);
      }
    }
  }

  private abortIfRunning(taskId: string, cause: AbortCause): void {
    const run = this.running.get(taskId);
    if (run) this.abort(run, cause);
  }

  private abort(run: RunningTask, cause: AbortCause): void {
    if (run.controller.signal.aborted) return;
    const reason = new TaskAbortedError(cause);
    run.controller.abort(reason);
    for (const waiter of run.waiters.values()) waiter.reject(reason);
    run.waiters.clear();
    if (cause === 'cancelled') {
      // cooperative, but never stuck: a handler that ignores its signal is marked cancelled after the grace period
      run.cancelTimer = setTimeout(() => {
        if (this.running.get(run.lease.taskId) !== run) return;
        this.running.delete(run.lease.taskId);
        void this.store
          .finish(run.lease, { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' }, this.now())
          .catch(this.report);
      }, this.cancelGraceMs);
      run.cancelTimer.unref();
    }
  }

  private async onSignal(signal: TaskSignal): Promise<void> {
    try {
      if (signal.kind === 'cancel') this.abortIfRunning(signal.taskId, 'cancelled');
      else await this.deliverAnswers(signal.taskId);
    } catch (error) {
      this.report(error);
    }
  }

  // ---- the sweep: leases, fallback signals, expiry, purge, orphans --------------------------------------------------

  private async sweep(deadOwners: string[]): Promise<void> {
    try {
      const now = this.now();
      const runs = [...this.running.values()];
      if (runs.length > 0) {
        const held = new Set(
          (
            await this.store.renewLeases(
              this.instanceId,
              runs.map((r) => r.lease),
              now + this.leaseMs,
            )
          ).map((l) => l.taskId),
        );
        for (const run of runs) {
          if (!held.has(run.lease.taskId)) {
            this.running.delete(run.lease.taskId);
            this.abort(run, 'lease-lost');
            continue;
          }
          // fallback for a missed push signal: re-read tasks whose handler waits or may have been cancelled
          const task = await this.store.get(run.lease.taskId);
          if (task?.cancelRequested) this.abort(run, 'cancelled');
          else if (run.waiters.size > 0) await this.deliverAnswers(run.lease.taskId);
        }
      }
      for (const taskId of await this.store.expireOverdue(now)) this.abortIfRunning(taskId, 'expired');
      await this.store.purge(now, this.retentionMs);
      await this.takeOverOrphans(deadOwners);
    } catch (error) {
      this.report(error);
    }
  }

  private async takeOverOrphans(deadOwners: string[]): Promise<void> {
    for (;;) {
      const now = this.now();
      const claimed = await this.store.claimOrphans(this.instanceId, now, now + this.leaseMs, 100, deadOwners);
      for (const task of claimed) {
        const lease = { taskId: task.taskId, fence: task.fence };
        const tool = this.tools.get(task.toolName);
        if (task.cancelRequested) {
          await this.store.finish(
            lease,
            { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' },
            now,
          );
        } else if (tool?.resumable && task.resumable) {
          void this.launchWhileHeld(tool, task).catch(this.report);
        } else {
          const message = tool
            ? INTERRUPTED_MESSAGE
            : `${INTERRUPTED_MESSAGE} (tool ${task.toolName} is not registered on this server)`;
          await this.store.finish(
            lease,
            { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message },
            now,
          );
        }
      }
      if (claimed.length < 100) return;
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
