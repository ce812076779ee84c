/**
 * `closeout/ai-sdk`: a server's tools as Vercel AI SDK tools (for `generateText`/`streamText`) that run as durable
 * tasks through a TaskClient. The AI SDK's `toolCallId` (scoped by `scope` when given, e.g. a chat or run id) is the
 * idempotency key, so a run replayed after a crash, or a retried call, gets the same task, and the handle is in the
 * ledger before the tool waits. `execute` is an async generator: the task's start and each status message are
 * preliminary tool results (`{ type: 'progress' }`), the task's result the final one (`{ type: 'result' }`, its text
 * and structured content, or that content as JSON for the text when it has no text). The call's abort signal detaches
 * (the task goes on) or, with `onAbort: 'cancel'`, cancels. A task that failed, was cancelled or expired throws
 * TaskToolError, which the AI SDK reports as a tool error (its message carries the JSON-RPC code). Input a task asks
 * for goes to the TaskClient's `inputHandlers`, then to the `inputHandlers` given here; else the result states the
 * question and the `closeout_answer` tool (offered beside the server's tools) answers it.
 *
 * `ai` is an optional peer dependency: only this entry point loads it.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';
/** @ts-ignore `ai` is an optional peer: a consumer without it installed typechecks, reading its types as `any` */
import type { Tool } from 'ai';
import { jsonSchema, tool } from 'ai';

import type { TaskClient } from '../client/index.js';
import { listAllTools } from '../client/transport/listTools.js';
import type { JsonObject } from '../protocol/index.js';
import { type TaskClientConnectOptions, toolsOn } from './taskClientSource.js';
import {
  ANSWER_TOOL_DESCRIPTION,
  ANSWER_TOOL_NAME,
  ANSWER_TOOL_SCHEMA,
  answerAsTool,
  inputInterrupt,
  type PendingInput,
  pendingInputOf,
} from './taskInput.js';
import {
  callAsTool,
  type CallAsToolOptions,
  type ScopedTaskToolsOptions,
  textForModel,
  wantedTools,
} from './taskOutcome.js';

export { closeTaskTools, type TaskClientConnectOptions } from './taskClientSource.js';
export type { PendingInput } from './taskInput.js';
export { type OnAbort, TaskToolError } from './taskOutcome.js';

/** `scope` scopes the AI SDK's `toolCallId`; a name in `tools` the server does not list is an error. */
export type AiSdkTaskToolsOptions = ScopedTaskToolsOptions;

/** A preliminary tool result: the task started, or its status message changed. */
export interface AiSdkTaskProgress {
  type: 'progress';
  taskId: string;
  status: string;
  statusMessage: string;
}

/** The final tool result. */
export interface AiSdkTaskResult {
  type: 'result';
  /** The task that produced it; undefined when the server answered inline (no task). */
  taskId: string | undefined;
  /** The text blocks of the result, one per line; with none, its structured content as JSON. */
  text: string;
  structuredContent: JsonObject | undefined;
  /** The tool reported an error in its result (`isError: true`): a result for the model, not a failure. */
  isError: boolean;
  /** Set when the task waits for input nobody here can give: answer it with `closeout_answer`. */
  inputRequired?: PendingInput;
}

export type AiSdkTaskToolOutput = AiSdkTaskProgress | AiSdkTaskResult;

/**
 * The server's tools (from `tools/list`: names, titles, descriptions, JSON Schema inputs) as AI SDK tools keyed by
 * name, plus `closeout_answer`, called through `client`, or through a TaskClient connected from connect options and
 * closed by `closeTaskTools(tools)`.
 */
export async function aiSdkTaskTools(
  client: TaskClient | TaskClientConnectOptions,
  options: AiSdkTaskToolsOptions = {},
): Promise<Record<string, Tool<JsonObject, AiSdkTaskToolOutput>>> {
  return toolsOn(client, (connected) => toolsFor(connected, options));
}

async function toolsFor(
  client: TaskClient,
  options: AiSdkTaskToolsOptions,
): Promise<Record<string, Tool<JsonObject, AiSdkTaskToolOutput>>> {
  const listed = await listAllTools(client.client);
  const unknown = (options.tools ?? []).filter((name) => !listed.some((each) => each.name === name));
  if (unknown.length > 0) {
    throw new Error(
      `the server has no tool ${unknown.map((name) => JSON.stringify(name)).join(', ')}; it has ${listed.map((each) => each.name).join(', ') || 'none'}`,
    );
  }
  const follow = (signal: AbortSignal | undefined) => ({
    signal,
    onAbort: options.onAbort,
    interrupt: inputInterrupt(client, options.inputHandlers),
  });
  const tools: Record<string, Tool<JsonObject, AiSdkTaskToolOutput>> = {};
  for (const each of wantedTools(listed, options.tools)) {
    tools[each.name] = tool<JsonObject, AiSdkTaskToolOutput, Record<string, unknown>>({
      ...(each.title !== undefined && { title: each.title }),
      description: each.description ?? each.title ?? each.name,
      inputSchema: jsonSchema<JsonObject>(each.inputSchema as never),
      execute: (input, call) =>
        streamed((watch) =>
          callAsTool(client, each.name, input, {
            callId: `ai-sdk:${options.scope ? `${options.scope}:` : ''}${call.toolCallId}`,
            ...follow(call.abortSignal),
            ...watch,
          }),
        ),
    });
  }
  tools[ANSWER_TOOL_NAME] = tool<JsonObject, AiSdkTaskToolOutput, Record<string, unknown>>({
    description: ANSWER_TOOL_DESCRIPTION,
    inputSchema: jsonSchema<JsonObject>(ANSWER_TOOL_SCHEMA as never),
    execute: (input, call) =>
      streamed((watch) => answerAsTool(client, input, { ...follow(call.abortSignal), ...watch })),
  });
  return tools;
}

type Watch = Required<Pick<CallAsToolOptions, 'onProgress' | 'onTask'>>;

/** Runs a call, yielding its progress as it comes, then its result. */
async function* streamed(run: (watch: Watch) => Promise<CallToolResult>): AsyncGenerator<AiSdkTaskToolOutput> {
  const queue: AiSdkTaskProgress[] = [];
  let taskId: string | undefined;
  let done = false;
  let wake: (() => void) | undefined;
  const ending = run({
    onTask: (id) => {
      taskId = id;
      queue.push({ type: 'progress', taskId: id, status: 'working', statusMessage: '' });
      wake?.();
    },
    onProgress: (update) => {
      queue.push({ type: 'progress', ...update });
      wake?.();
    },
  }).finally(() => {
    done = true;
    wake?.();
  });
  ending.catch(() => undefined);
  for (;;) {
    while (queue.length > 0) yield queue.shift()!;
    if (done) break;
    await new Promise<void>((resolve) => (wake = resolve));
    wake = undefined;
  }
  const result = await ending;
  const inputRequired = pendingInputOf(result);
  yield {
    type: 'result',
    taskId,
    text: textForModel(result),
    structuredContent: result.structuredContent as JsonObject | undefined,
    isError: result.isError === true,
    ...(inputRequired && { inputRequired }),
  };
}
