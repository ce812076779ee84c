/**
 * The task requests a TaskClient sends (spec: sep-2663-tasks-extension.mdx, tasks/get, tasks/update, tasks/cancel)
 * and the checks on what comes back: every request declares the extension on itself only (docs/REQUIREMENTS.md S1), and
 * every tasks/get answer goes through one query that validates it before anything is recorded.
 */
import type { ClientCapabilities } from '@modelcontextprotocol/client';
import { ProtocolError } from '@modelcontextprotocol/client';

import {
  CLIENT_CAPABILITIES_META_KEY,
  EmptyResultSchema,
  JsonObjectSchema,
  TASK_METHODS,
  TASKS_EXTENSION_ID,
} from '../../protocol/index.js';
import type { ClientCore } from '../core/clientCore.js';
import { describe } from '../core/clientCore.js';
import { TaskClientError } from '../errors.js';
import { capabilitiesForHandlers } from '../input/inputRouter.js';
import type { ObservedTask, RecordedError } from '../ledger/ledger.js';
import { failingOnOversize } from '../transport/answerCap.js';
import type { TaskResultCarrier } from '../transport/sdkGlue.js';
import { attachTaskResultCarrier } from '../transport/sdkGlue.js';
import type { KnownTaskState } from '../transport/serverOutput.js';
import { parseGetTaskResult, progressionViolation, ServerOutputError } from '../transport/serverOutput.js';
import { classifyTransportError } from '../transport/transportFailure.js';

/**
 * A task state as the server sent it (a tasks/get answer, or the params of a `notifications/tasks`, which carry the
 * same DetailedTask: SEP-2663 "Task Status Notifications"), validated as `getTask` validates it.
 */
export function checkTask(
  raw: unknown,
  taskId: string,
  known?: KnownTaskState,
): Exclude<TaskQuery, { kind: 'unanswered' }> {
  try {
    const task = parseGetTaskResult(raw, taskId);
    const violation = known && progressionViolation(known, task);
    if (violation) throw new ServerOutputError(violation);
    return { kind: 'task', task };
  } catch (error) {
    if (!(error instanceof ServerOutputError)) throw error;
    return { kind: 'bad-output', error };
  }
}

/** What one tasks/get came to. */
export type TaskQuery =
  /** A valid answer (and, when the known state was given, a step the status machine allows from it). */
  | { kind: 'task'; task: ObservedTask }
  /** No usable answer: a transport failure, a JSON-RPC error, or output the SDK itself rejected. */
  | { kind: 'unanswered'; error: unknown }
  /** An answer that is not a valid task for this taskId, or that breaks the status machine. */
  | { kind: 'bad-output'; error: ServerOutputError };

export class TaskRequests {
  private capabilitiesMeta: ClientCapabilities | undefined;

  constructor(private readonly core: ClientCore) {}

  /**
   * One tasks/get for `taskId`, validated: parsed as a task with that taskId and, when `known` is given, checked as a
   * step the status machine allows from it.
   */
  async getTask(taskId: string, known?: KnownTaskState): Promise<TaskQuery> {
    let raw: unknown;
    try {
      await this.core.ensureConnected();
      const meta = this.tasksMeta();
      const fastPath = this.core.options.taskGetFastPath;
      const timeout = this.core.requestTimeoutMs;
      raw = await this.core.telemetry.request(TASK_METHODS.get, { 'closeout.task.id': taskId }, meta, async () => {
        const sdk = (timeoutMs: number) => () =>
          failingOnOversize((signal) =>
            this.core.client.request({ method: TASK_METHODS.get, params: { taskId, _meta: meta } }, JsonObjectSchema, {
              timeout: timeoutMs,
              signal,
            }),
          );
        if (!fastPath) return sdk(timeout)();
        // an ordinary answer is decided on the fast path; anything else is asked again through the SDK (a pure read),
        // within what is left of the one timeout
        const startedAt = performance.now();
        const fast = await fastPath.get(taskId, meta, timeout);
        if (fast) return fast;
        return fastPath.throughSdk(taskId, sdk(Math.max(1, timeout - (performance.now() - startedAt))));
      });
    } catch (error) {
      return { kind: 'unanswered', error };
    }
    return checkTask(raw, taskId, known);
  }

  /** tasks/update and tasks/cancel: the SDK sets `Mcp-Name: <taskId>` for them (pinned in sdkGlue.test.ts). */
  async send(method: string, params: Record<string, unknown>): Promise<void> {
    await this.core.ensureConnected();
    const meta = this.tasksMeta();
    const taskId = params['taskId'];
    await this.core.telemetry.request(
      method,
      typeof taskId === 'string' ? { 'closeout.task.id': taskId } : {},
      meta,
      () =>
        failingOnOversize((signal) =>
          this.core.client.request({ method, params: { ...params, _meta: meta } }, EmptyResultSchema, {
            timeout: this.core.requestTimeoutMs,
            signal,
          }),
        ),
    );
  }

  /** `_meta` of every task request: the extension declared on this request only (S1), with the handlers' caps. */
  tasksMeta(): Record<string, unknown> {
    // built once (the options do not change); each request gets its own outer object, the SDK may add to it
    this.capabilitiesMeta ??= (() => {
      const extra = this.core.options.capabilities ?? {};
      return {
        ...capabilitiesForHandlers(this.core.options.inputHandlers ?? {}),
        ...extra,
        extensions: { ...extra.extensions, [TASKS_EXTENSION_ID]: {} },
      };
    })();
    return { [CLIENT_CAPABILITIES_META_KEY]: this.capabilitiesMeta };
  }

  carrier(): TaskResultCarrier {
    const transport = this.core.client.transport;
    if (!transport) throw new TaskClientError('closed', 'the SDK client is not connected');
    return attachTaskResultCarrier(transport);
  }

  /** What a failed request (`what`: tools/call, tasks/get, ...) is recorded as. */
  describeError(what: string, error: unknown): RecordedError {
    const at = this.core.clock.now();
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
}
