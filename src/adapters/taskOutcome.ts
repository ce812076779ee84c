/**
 * What the framework adapters share: the options every adapter's tools take, the idempotency key a framework's
 * tool-call id makes, and a task's end as the tool's output or as an error the framework reports. Loads no framework.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

import type { TaskClient, TaskHandle, TaskInputHandlers, TaskOutcome } from '../client/index.js';
import { isTaskHandle } from '../client/index.js';
import type { JsonObject } from '../protocol/index.js';

/** What a framework's abort signal does to the task: let it go on (`detach`, the default) or `cancel` it. */
export type OnAbort = 'detach' | 'cancel';

/** What every adapter's tools take (each adapter's options extend these). */
export interface TaskToolsOptions {
  /** Only these of the server's tools (default: all it lists). */
  tools?: readonly string[];
  /** What the framework's abort signal for a call (or its run) does to a running task. Default `detach`. */
  onAbort?: OnAbort;
  /** Answers input requests the TaskClient's own handlers do not; without one, `closeout_answer` does. */
  inputHandlers?: TaskInputHandlers;
}

/** The tools of `listed` that `tools` names (TaskToolsOptions.tools); all of them when it names none. */
export function wantedTools<Tool extends { name: string }>(
  listed: readonly Tool[],
  tools: readonly string[] | undefined,
): Tool[] {
  if (tools === undefined) return [...listed];
  const wanted = new Set(tools);
  return listed.filter((each) => wanted.has(each.name));
}

/** The options of an adapter whose framework's call ids are unique within a run only. */
export interface ScopedTaskToolsOptions extends TaskToolsOptions {
  /** Scopes call ids (a chat, conversation or run id of yours), so that ids reused across runs stay apart. */
  scope?: string;
}

/** How a task tool call ended, when it did not complete: `failed` carries the JSON-RPC error's code. */
export class TaskToolError extends Error {
  constructor(
    readonly kind: 'failed' | 'cancelled' | 'expired' | 'detached',
    readonly taskId: string,
    message: string,
    readonly code?: number,
  ) {
    super(message);
    this.name = 'TaskToolError';
  }
}

export interface CallAsToolOptions {
  /** The framework's id of this tool call (scoped by the run or thread where there is one): the idempotency key. */
  callId: string | undefined;
  signal: AbortSignal | undefined;
  /** Default `detach`. */
  onAbort?: OnAbort | undefined;
  /** Each status message of the task, as it changes. */
  onProgress?: (update: { taskId: string; status: string; statusMessage: string }) => void;
  /** The task the call made or found, once its handle is in the ledger (not called for an inline answer). */
  onTask?: (taskId: string) => void;
  /**
   * Raced with the task's end: a result it resolves with first ends the call (the task goes on, followed by the
   * client), e.g. a statement that the task waits for input nobody here can give. Its signal aborts when the call ends.
   */
  interrupt?: (handle: TaskHandle, signal: AbortSignal) => Promise<CallToolResult>;
}

/**
 * Calls `name` through the client as a framework's tool does: a replay of the same call id gets the same task (the
 * handle is in the ledger before anything waits), a task is followed to its end, and the CallToolResult comes back;
 * a task that did not complete throws TaskToolError. A tool the server ran inline answers as a plain tool.
 */
export async function callAsTool(
  client: TaskClient,
  name: string,
  args: JsonObject,
  options: CallAsToolOptions,
): Promise<CallToolResult> {
  const answer = await client.callTool(name, args, {
    ...(options.callId !== undefined && { idempotencyKey: options.callId, correlationId: options.callId }),
  });
  if (!isTaskHandle(answer)) return answer;
  return followAsTool(answer, options);
}

/** Follows a task's handle as callAsTool does: its CallToolResult, or TaskToolError when it did not complete. */
export async function followAsTool(
  handle: TaskHandle,
  options: Omit<CallAsToolOptions, 'callId'>,
): Promise<CallToolResult> {
  options.onTask?.(handle.taskId);
  let last = '';
  const stop = handle.onChange((record) => {
    const message = record.statusMessage ?? '';
    if (message === '' || message === last) return;
    last = message;
    options.onProgress?.({ taskId: handle.taskId, status: record.status ?? 'working', statusMessage: message });
  });
  const abort = () => void (options.onAbort === 'cancel' ? handle.cancel() : handle.detach()).catch(() => undefined);
  options.signal?.addEventListener('abort', abort, { once: true });
  const ended = new AbortController();
  try {
    if (options.signal?.aborted) abort();
    const outcome = handle.outcome().then((end) => resultOf(end, handle.taskId));
    if (options.interrupt === undefined) return await outcome;
    outcome.catch(() => undefined);
    return await Promise.race([outcome, options.interrupt(handle, ended.signal)]);
  } finally {
    ended.abort();
    stop();
    options.signal?.removeEventListener('abort', abort);
  }
}

function resultOf(outcome: TaskOutcome, taskId: string): CallToolResult {
  switch (outcome.kind) {
    case 'completed':
      return outcome.result;
    case 'failed':
      throw new TaskToolError(
        'failed',
        taskId,
        `task ${taskId} failed: ${outcome.error.message} (JSON-RPC ${outcome.error.code})`,
        outcome.error.code,
      );
    case 'cancelled':
      throw new TaskToolError('cancelled', taskId, `task ${taskId} was cancelled`);
    case 'expired':
      throw new TaskToolError('expired', taskId, `task ${taskId} expired: ${outcome.reason}`);
    default:
      throw new TaskToolError(
        'detached',
        taskId,
        `task ${taskId} goes on without this call (detached): the same tool call again finds it`,
      );
  }
}

/**
 * What the model reads of a CallToolResult: its text blocks, one per line; with none, its structured content as JSON
 * (spec: a tool returning structured content SHOULD also return it serialized as JSON in a text block, which the
 * adapter does here for one that did not), so that a result of structured content only does not reach the model as "".
 */
export function textForModel(result: CallToolResult): string {
  const text = result.content
    .map((block) => (block.type === 'text' ? block.text : ''))
    .filter((each) => each !== '')
    .join('\n');
  return text === '' && result.structuredContent !== undefined ? JSON.stringify(result.structuredContent) : text;
}
