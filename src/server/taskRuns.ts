/**
 * The handlers running in one TaskServer instance (docs/DESIGN.md, "The task's life on the server"): each run holds
 * its task's lease, starts only on a lease proven its own, asks for input through the store, writes its terminal
 * outcome (retried while the store is unreachable), and is aborted at once when it loses its lease, cannot renew it in
 * time, is cancelled, expires or the server shuts down. The lease loop (leaseLoop.ts) renews what this holds and hands
 * it what it claims.
 */
import { setTimeout as sleep } from 'node:timers/promises';

import { CallToolResultSchema } from '@modelcontextprotocol/core';

import type { InputRequest, InputResponse, JsonObject, JsonRpcError } from '../protocol/index.js';
import { ErrorCode, InputKeySchema, InputRequestSchema } from '../protocol/index.js';
import { storableText, unstorableField } from '../protocol/storableText.js';
import { fenceTimes, heldUntil, RENEW_SHARE, renewalRetryMs } from '../shared/lease/leaseFence.js';
import { DurableSteps } from './durableSteps.js';
import { undeclaredInput } from './inputCapabilities.js';
import { describeRefusal, measureJson, type TaskLimits } from './limits.js';
import type { InputCapabilities, LeaseRef, StoredTask, TaskStore, TerminalOutcome } from './store/taskStore.js';
import type { RegisteredTaskTool, TaskActivity } from './taskServerOptions.js';
import type { AbortCause, TaskContext } from './taskTool.js';
import { InputNotDeclaredError, TaskAbortedError } from './taskTool.js';
import type { RunView, ServerTelemetry } from './telemetry.js';
import { typedInput } from './typedInput.js';

export interface RunningTask {
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
   * The handler is done (or its cancel grace ran out) and only the terminal write remains: the run stays registered,
   * its lease renewed, until that write lands or the lease is lost.
   */
  ending: boolean;
  /**
   * Until when (performance.now) the lease is surely this run's: the time the last write that proved it (create,
   * claim, renewal) was sent, plus a lease. A step's function starts only well before then (whileHeld), and the run
   * is stopped a fifth of a lease before then (watchLeases).
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

/** What the runs need of their TaskServer. */
export interface TaskRunsHost {
  store: TaskStore;
  limits: TaskLimits;
  telemetry: ServerTelemetry;
  leaseMs: number;
  cancelGraceMs: number;
  now: () => number;
  /** Whether the server is closed: no handler starts after that, and no terminal write is retried. */
  isClosed: () => boolean;
  /** Asks the lease loop for a renewal now (or right after the one in flight). */
  requestRenewal: () => void;
  /** Tells the server's change listeners that these tasks may have changed. */
  changed: (taskIds: string | string[]) => void;
  activity: (activity: TaskActivity) => void;
  /** Reports a failure every running handler may hit at once (a store outage), rate-limited. */
  reportRepeated: (error: unknown) => void;
}

/** Between two tries of a handler's write while the store is unreachable. */
const RETRY_MIN_MS = 100;
const RETRY_MAX_MS = 2000;

/** The longest delay setTimeout keeps (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

export class TaskRuns {
  /** One live run per task in this instance. */
  private readonly running = new Map<string, RunningTask>();
  /**
   * Tasks whose create is on its way back from the store, with the lease this instance's own takeover gave them if
   * their first lease ran out meanwhile.
   */
  private readonly creating = new Map<string, Pick<StoredTask, 'fence' | 'leaseExpiresAt'> | undefined>();
  /** The one timer that watches the runs' leases (watchLeases), and when it fires. */
  private leaseTimer: NodeJS.Timeout | undefined;
  private leaseTimerAt = Infinity;
  /** Leases of runs stopped because they could not be renewed in time, for the lease loop to hand back. */
  private unrenewed: LeaseRef[] = [];

  constructor(private readonly host: TaskRunsHost) {}

  /** How many handlers run now. */
  get size(): number {
    return this.running.size;
  }

  get(taskId: string): RunningTask | undefined {
    return this.running.get(taskId);
  }

  /** The runs now, a copy. */
  all(): RunningTask[] {
    return [...this.running.values()];
  }

  /** The runs as the open-tasks gauge counts them (read only when a metrics reader collects). */
  *views(): Iterable<RunView> {
    for (const run of this.running.values()) {
      yield { toolName: run.toolName, waitingForInput: run.waiters.size > 0 };
    }
  }

  // ---- a create on its way back (see TaskServer.createTask and LeaseLoop.takeOverOrphans) --------------------------

  /** The create of `taskId` went out: until it is back, the task is this instance's even if its lease runs out. */
  creationStarted(taskId: string): void {
    this.creating.set(taskId, undefined);
  }

  /** The create of `taskId` is back: the lease the takeover gave it meanwhile, if any. */
  creationEnded(taskId: string): Pick<StoredTask, 'fence' | 'leaseExpiresAt'> | undefined {
    const reclaimed = this.creating.get(taskId);
    this.creating.delete(taskId);
    return reclaimed;
  }

  /** Keeps the lease a claim gave a task whose create is still on its way back; false when none is. */
  keepForCreation(task: StoredTask): boolean {
    if (!this.creating.has(task.taskId)) return false;
    this.creating.set(task.taskId, { fence: task.fence, leaseExpiresAt: task.leaseExpiresAt });
    return true;
  }

  // ---- running a handler -------------------------------------------------------------------------------------------

  /**
   * Starts the handler only on a lease that is surely this instance's. The lease's expiry was computed before the
   * write that took it (create, claim); when that write was slow to come back, the lease may have run out meanwhile
   * and another instance may have claimed the task and started it. With less than half the lease left, the run waits
   * for the lease loop's next renewal (requested at once, shared by every run waiting): renewed, it starts; not
   * renewed, the task runs elsewhere, not here (a resumable task never runs in two live instances).
   */
  launchWhileHeld(tool: RegisteredTaskTool, task: StoredTask): void {
    const run = this.launch(tool, task);
    if ((task.leaseExpiresAt ?? 0) - this.host.now() >= this.host.leaseMs / 2) {
      this.begin(run);
      return;
    }
    this.host.requestRenewal();
  }

  /** Registers the run (its lease renewed from now on); its handler starts with `begin`. */
  private launch(tool: RegisteredTaskTool, task: StoredTask): RunningTask {
    const { store, limits, now, telemetry } = this.host;
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
      heldUntil: performance.now() + Math.min(this.host.leaseMs, (task.leaseExpiresAt ?? 0) - now()),
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
      store,
      limits,
      signal: controller.signal,
      now,
      retrying: (call) => this.whileUnreachable(run, call),
      committing: (call) => this.whileUnreachable(run, call, { afterShutdown: true }),
      held: () => this.whileHeld(run),
      leaseLost: () => {
        this.abort(run, 'lease-lost');
        controller.signal.throwIfAborted();
        throw new TaskAbortedError('lease-lost');
      },
    });
    const traced = telemetry.run(task);
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
        // free text from the handler, kept alike on every store: NUL and lone surrogates become U+FFFD (rule 14)
        const text = storableText(String(message));
        traced.statusMessage(text);
        const stored = await store
          .setStatusMessage(lease, text, now())
          .catch((error: unknown) => this.host.reportRepeated(error));
        if (stored) this.host.changed(lease.taskId);
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
          outcome = this.withinResultLimit(tool.name, outcomeOfThrow(tool.name, controller.signal, error));
        }
        // a run that lost its lease, or could not renew it in time, writes no outcome, whatever its handler returned
        // after its signal: the task is its next holder's
        if (leaseGone(controller.signal)) outcome = undefined;
        // the cancel grace ran out and wrote `cancelled` already
        if (run.ending) return traced.ended({ status: 'cancelled' }, now());
        await this.end(run, outcome);
        traced.ended(outcome, now());
      })();
    };
    return run;
  }

  /** A write sent at `sentAt` (performance.now) found the run's lease still its own. */
  proven(run: RunningTask, sentAt: number): void {
    // the leases' timer is left as it is: a later heldUntil only makes it fire early, and it sets itself again
    run.heldUntil = Math.max(run.heldUntil, heldUntil(sentAt, this.host.leaseMs));
  }

  /**
   * Resolves once the run's lease is proven for at least a third of a lease ahead (docs/DESIGN.md, "Rules learned in
   * the field", 12): a step's function starts only in an attempt that still holds the task, so one stopped past its
   * lease (a paused process, a store it alone cannot reach) waits for the next renewal, and learns there whether
   * another instance took the task meanwhile (then it is aborted, and the step never runs here). While the lease
   * loop renews on time this resolves at once: a renewal leaves two thirds of a lease, less its round trip.
   */
  private async whileHeld(run: RunningTask): Promise<void> {
    const { leaseMs } = this.host;
    for (;;) {
      run.controller.signal.throwIfAborted();
      if (run.heldUntil - performance.now() >= leaseMs / 3) return;
      this.host.requestRenewal();
      await sleep(renewalRetryMs(leaseMs));
    }
  }

  /** Starts the run's handler, once. */
  begin(run: RunningTask): void {
    const start = run.start;
    run.start = undefined;
    if (!start || run.controller.signal.aborted || this.host.isClosed()) return;
    start();
    this.watchLeasesAt(run.heldUntil - this.host.leaseMs * RENEW_SHARE);
  }

  // ---- the self-fence (docs/DESIGN.md, "Rules learned in the field", 13) -------------------------------------------

  /** Sets the leases' one timer for `at` (performance.now), unless it is set for earlier. */
  private watchLeasesAt(at: number): void {
    if (at >= this.leaseTimerAt) return;
    clearTimeout(this.leaseTimer);
    this.leaseTimerAt = at;
    this.leaseTimer = setTimeout(() => this.watchLeases(), Math.min(Math.max(0, at - performance.now()), MAX_TIMER_MS));
    this.leaseTimer.unref();
  }

  /**
   * A holder cut off from the store alone stops its runs before anyone else may start them: a started run whose lease
   * was last proven by a write sent four fifths of a lease ago or more is stopped (its signal aborted with
   * 'lease-unrenewed', its steps refused, no outcome written) and its lease handed back once the store answers; from
   * a third of a lease before its end on, renewals are asked for, so one goes out as soon as the store may answer. A
   * renewal that lands in time changes nothing. Runs are proven together by each renewal, so this fires about once a
   * renewal, and stops nothing while renewals land.
   */
  private watchLeases(): void {
    this.leaseTimer = undefined;
    this.leaseTimerAt = Infinity;
    const { leaseMs } = this.host;
    const now = performance.now();
    let renew = false;
    let next = Infinity;
    for (const run of this.running.values()) {
      // not started (its start waits for a renewal), done (only its terminal write is left) or stopped already
      if (run.start !== undefined || run.ending || run.controller.signal.aborted) continue;
      const { stopAt, renewAt } = fenceTimes(run.heldUntil, leaseMs);
      if (now >= stopAt) {
        this.stopUnrenewed(run);
        continue;
      }
      if (now >= renewAt) renew = true;
      next = Math.min(next, now >= renewAt ? Math.min(stopAt, now + renewalRetryMs(leaseMs)) : renewAt);
    }
    if (renew) this.host.requestRenewal();
    if (next < Infinity) this.watchLeasesAt(next);
  }

  private stopUnrenewed(run: RunningTask): void {
    this.loseLease(run, 'lease-unrenewed');
    this.unrenewed.push({ ...run.lease });
    this.host.activity({ type: 'lease-unrenewed', taskId: run.lease.taskId, tool: run.toolName, attempt: run.attempt });
  }

  /**
   * The leases of runs stopped because they could not be renewed in time, for the lease loop to hand back (expiry 0)
   * once the store answers: so the task is taken over at once, here or by another instance, as a new attempt. A lease
   * another instance took meanwhile is not this one's to hand back, and the store leaves it alone.
   */
  takeUnrenewed(): LeaseRef[] {
    const leases = this.unrenewed;
    this.unrenewed = [];
    return leases;
  }

  /** Leases `takeUnrenewed` gave that the store did not take back (it could not be reached): handed back later. */
  keepUnrenewed(leases: LeaseRef[]): void {
    this.unrenewed.push(...leases);
  }

  /**
   * Writes the run's terminal outcome (none: a lost lease or a shutdown leaves the task to its next holder). While the
   * store is unreachable the write is retried and the lease kept renewed: a result that exists is never dropped for a
   * database blip (docs/DESIGN.md, "Rules learned in the field", 3). It stops when the lease is lost or the server
   * closes.
   */
  private async end(run: RunningTask, outcome: TerminalOutcome | undefined): Promise<void> {
    run.ending = true;
    // a message made of what the handler threw is free text: kept alike on every store (docs/DESIGN.md rule 14)
    if (outcome?.statusMessage !== undefined) {
      outcome = { ...outcome, statusMessage: storableText(outcome.statusMessage) };
    }
    if (run.cancelTimer) clearTimeout(run.cancelTimer);
    try {
      for (let delay = RETRY_MIN_MS; outcome; delay = Math.min(delay * 2, RETRY_MAX_MS)) {
        try {
          const now = this.host.now();
          if (await this.host.store.finish(run.lease, outcome, now)) {
            this.host.changed(run.lease.taskId);
            this.host.activity({
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
          this.host.reportRepeated(error);
        }
        if (this.host.isClosed() || this.running.get(run.lease.taskId) !== run) return;
        await sleep(delay);
        if (this.running.get(run.lease.taskId) !== run) return;
      }
    } finally {
      if (this.running.get(run.lease.taskId) === run) this.running.delete(run.lease.taskId);
    }
  }

  /** A result (or error) over maxResultBytes or maxJsonDepth is not stored: the task fails saying so. */
  private withinResultLimit(toolName: string, outcome: TerminalOutcome | undefined): TerminalOutcome | undefined {
    const { limits } = this.host;
    const payload =
      outcome?.status === 'completed' ? outcome.result : outcome?.status === 'failed' ? outcome.error : undefined;
    if (payload === undefined) return outcome;
    const measured = measureJson(payload, limits.maxResultBytes, limits.maxJsonDepth);
    if (measured.ok) return outcome;
    const what = outcome?.status === 'completed' ? 'a result that is' : 'an error that is';
    const message = `Tool ${toolName} returned ${what} ${describeRefusal(measured, limits, 'maxResultBytes')}; it was not stored`;
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
    const { maxInputRequestsPerTask } = this.host.limits;
    if (run.waiters.has(key)) throw new Error(`input key ${key} is already awaited`);
    if (run.waiters.size >= maxInputRequestsPerTask) {
      throw new Error(
        `input ${key} would be more than this server's limit of ${maxInputRequestsPerTask} outstanding input requests per task (maxInputRequestsPerTask): await earlier ones before asking more`,
      );
    }
    const waiting = new Promise<InputResponse>((resolve, reject) => {
      run.waiters.set(key, { resolve, reject });
    });
    waiting.catch(() => {});
    const { held, response } = await this.whileUnreachable(run, () =>
      this.host.store.requestInput(run.lease, key, validRequest.data, this.host.now()),
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
    this.host.changed(run.lease.taskId);
    // an answer may have landed between the write above and the waiter being visible to a signal; if the store cannot
    // say now, the lease loop's fallback delivers it later
    await this.deliverAnswers(run.lease.taskId).catch(this.host.reportRepeated);
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
        this.host.reportRepeated(error);
      }
      await sleep(delay);
    }
  }

  /**
   * A step whose function finished is committed even when the run was stopped meanwhile for a shutdown, a cancel or a
   * lease it could not renew in time, within the grace `close()` gives handlers: the lease is still held (close hands
   * it back only after the grace), or may be, and a side effect that happened must not run again in the next attempt
   * (docs/DESIGN.md, "Rules learned in the field", 12). The store's fence refuses the write once another instance
   * holds the task.
   */
  private mayStillCommit(run: RunningTask): boolean {
    const reason = run.controller.signal.reason as TaskAbortedError | undefined;
    if (!run.controller.signal.aborted || reason?.cause === 'lease-lost' || reason?.cause === 'expired') return false;
    return run.abortedAt !== undefined && performance.now() - run.abortedAt < this.host.cancelGraceMs;
  }

  /** Hands stored answers to the handler's waiting `input()` calls. */
  async deliverAnswers(taskId: string): Promise<void> {
    const run = this.running.get(taskId);
    if (run) await this.deliverAnswersTo([run]);
  }

  /** Hands the stored answers to every waiting `input()` of these runs, in one read. */
  async deliverAnswersTo(runs: RunningTask[]): Promise<void> {
    const awaited = runs.flatMap((run) => [...run.waiters.keys()].map((key) => ({ taskId: run.lease.taskId, key })));
    if (awaited.length === 0) return;
    for (const { taskId, key, response } of await this.host.store.answeredInputs(awaited)) {
      const run = this.running.get(taskId);
      const waiter = run?.waiters.get(key);
      if (run && waiter) {
        run.waiters.delete(key);
        waiter.resolve(response);
      }
    }
  }

  abortIfRunning(taskId: string, cause: AbortCause): void {
    const run = this.running.get(taskId);
    if (run) this.abort(run, cause);
  }

  abort(run: RunningTask, cause: AbortCause): void {
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
      }, this.host.cancelGraceMs);
      run.cancelTimer.unref();
    }
  }

  /**
   * The run no longer holds its task (the fence moved, or the task ended elsewhere), or may not for much longer (its
   * lease could not be renewed in time): stop it at once.
   */
  loseLease(run: RunningTask, cause: 'lease-lost' | 'lease-unrenewed' = 'lease-lost'): void {
    if (this.running.get(run.lease.taskId) === run) this.running.delete(run.lease.taskId);
    this.abort(run, cause);
  }

  /**
   * Aborts every run for a shutdown and waits for their handlers, at most `cancelGraceMs`; the leases they held, and
   * those of runs stopped before because they could not be renewed in time, for the caller to hand back.
   */
  async stopAll(): Promise<LeaseRef[]> {
    clearTimeout(this.leaseTimer);
    const runs = this.all();
    for (const run of runs) this.abort(run, 'shutdown');
    let graceTimer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled(runs.map((r) => r.settled)),
      new Promise((resolve) => (graceTimer = setTimeout(resolve, this.host.cancelGraceMs))),
    ]);
    clearTimeout(graceTimer);
    return [...runs.map((r) => r.lease), ...this.takeUnrenewed()];
  }
}

/** Whether the run's lease is, or may be, another instance's: its signal was aborted for it. */
function leaseGone(signal: AbortSignal): boolean {
  const cause = signal.aborted ? (signal.reason as TaskAbortedError).cause : undefined;
  return cause === 'lease-lost' || cause === 'lease-unrenewed';
}

function outcomeOfThrow(toolName: string, signal: AbortSignal, error: unknown): TerminalOutcome | undefined {
  const cause = signal.aborted ? (signal.reason as TaskAbortedError).cause : undefined;
  if (cause === 'cancelled') return { status: 'cancelled', statusMessage: 'Cancelled at the client’s request' };
  // expiry already wrote `failed`; a lost lease or a shutdown leaves the task to its next holder
  if (cause !== undefined) return undefined;
  const jsonRpcError = asJsonRpcError(error);
  if (jsonRpcError) return { status: 'failed', error: jsonRpcError, statusMessage: jsonRpcError.message };
  const message = `Tool ${toolName} failed: ${error instanceof Error ? error.message : String(error)}`;
  return { status: 'failed', error: { code: ErrorCode.InternalError, message }, statusMessage: message };
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
