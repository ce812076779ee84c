/**
 * `closeout/openai-agents`: a server's tools as OpenAI Agents SDK function tools that run as durable tasks through a
 * TaskClient (a task-required tool is refused by the Agents SDK's own MCP client; here every tool may be a task). The
 * function call's `callId` (scoped by `scope` when given, e.g. a conversation id) is the idempotency key, so a run
 * replayed after a crash, or a retried call, gets the same task, and the handle is in the ledger before the tool
 * waits. The call's abort signal detaches (the task goes on) or, with `onAbort: 'cancel'`, cancels. A completed
 * task is the tool's output (its text); a task that failed, was cancelled or expired throws TaskToolError, which the
 * Agents SDK turns into the tool's error output for the model (its message carries the JSON-RPC code). Input a task
 * asks for goes to the TaskClient's own `inputHandlers`, else to the `inputHandlers` given here; a request nobody here
 * can answer ends the call with an output stating the question, and the `closeout_answer` tool, offered with the
 * others, answers it and returns the task's result (docs/frameworks.md). Status messages go to `onProgress`.
 *
 * `@openai/agents-core` (which `@openai/agents` re-exports) is an optional peer dependency: only this entry point
 * loads it.
 */
import type { FunctionTool } from '@openai/agents-core';
import { tool } from '@openai/agents-core';

import type { TaskClient, TaskInputHandlers } from '../client/index.js';
import { listAllTools } from '../client/listTools.js';
import type { JsonObject } from '../protocol/index.js';
import {
  ANSWER_TOOL_DESCRIPTION,
  ANSWER_TOOL_NAME,
  ANSWER_TOOL_SCHEMA,
  answerAsTool,
  inputInterrupt,
} from './taskInput.js';
import { callAsTool, type CallAsToolOptions, type OnAbort, textOf } from './taskOutcome.js';

export { type OnAbort, TaskToolError } from './taskOutcome.js';

export interface OpenAIAgentsTaskToolsOptions {
  /** Only these of the server's tools (default: all it lists). */
  tools?: readonly string[];
  /** What a call's abort signal does to a running task. Default `detach`. */
  onAbort?: OnAbort;
  /** Scopes call ids (a conversation or run id of yours), so that ids reused across conversations stay apart. */
  scope?: string;
  /** Each status message of a running task. */
  onProgress?: (update: { tool: string; taskId: string; status: string; statusMessage: string }) => void;
  /** Answers input requests the TaskClient's own handlers do not; without one, `closeout_answer` does. */
  inputHandlers?: TaskInputHandlers;
}

/**
 * The server's tools (from `tools/list`: names, descriptions, JSON Schema inputs) as Agents SDK function tools, plus
 * `closeout_answer`.
 */
export async function openAIAgentsTaskTools(
  client: TaskClient,
  options: OpenAIAgentsTaskToolsOptions = {},
): Promise<FunctionTool[]> {
  const wanted = options.tools === undefined ? undefined : new Set(options.tools);
  const follow = (name: string, signal: AbortSignal | undefined): Omit<CallAsToolOptions, 'callId'> => ({
    signal,
    onAbort: options.onAbort ?? 'detach',
    ...(options.onProgress && { onProgress: (update) => options.onProgress!({ tool: name, ...update }) }),
    interrupt: inputInterrupt(client, options.inputHandlers),
  });
  const tools = (await listAllTools(client.client))
    .filter((each) => wanted === undefined || wanted.has(each.name))
    .map(
      (each) =>
        tool({
          name: each.name,
          description: each.description ?? each.title ?? each.name,
          // the server's own JSON Schema, as it lists it: not rewritten into the SDK's strict subset
          parameters: { ...each.inputSchema, additionalProperties: true } as never,
          strict: false,
          execute: async (input, _context, details) => {
            const callId = details?.toolCall?.callId;
            const result = await callAsTool(client, each.name, (input ?? {}) as JsonObject, {
              callId:
                callId === undefined ? undefined : `openai-agents:${options.scope ? `${options.scope}:` : ''}${callId}`,
              ...follow(each.name, details?.signal),
            });
            return textOf(result);
          },
          errorFunction: (_context, error) => (error instanceof Error ? error.message : String(error)),
        }) as unknown as FunctionTool,
    );
  const answer = tool({
    name: ANSWER_TOOL_NAME,
    description: ANSWER_TOOL_DESCRIPTION,
    parameters: { ...ANSWER_TOOL_SCHEMA, additionalProperties: true } as never,
    strict: false,
    execute: async (input, _context, details) =>
      textOf(await answerAsTool(client, (input ?? {}) as JsonObject, follow(ANSWER_TOOL_NAME, details?.signal))),
    errorFunction: (_context, error) => (error instanceof Error ? error.message : String(error)),
  }) as unknown as FunctionTool;
  return [...tools, answer];
}
