/**
 * `closeout/openai-agents`: a server's tools as OpenAI Agents SDK function tools that run as durable tasks through a
 * TaskClient (a task-required tool is refused by the Agents SDK's own MCP client; here every tool may be a task). The
 * function call's `callId` (scoped by `scope` when given, e.g. a conversation id) is the idempotency key, so a run
 * replayed after a crash, or a retried call, gets the same task, and the handle is in the ledger before the tool waits.
 * The call's abort signal detaches (the task goes on) or, with `onAbort: 'cancel'`, cancels. A completed task is the
 * tool's output (its text, or its structured content as JSON when it has no text); a task that failed, was cancelled or
 * expired throws TaskToolError, which the Agents SDK turns into the tool's error output for the model (its message
 * carries the JSON-RPC code). Input a task asks for goes to the TaskClient's own `inputHandlers`, else to the
 * `inputHandlers` given here; a request nobody here can answer ends the call with an output stating the question, and
 * the `closeout_answer` tool, offered with the others, answers it and returns the task's result (docs/frameworks.md).
 * Status messages go to `onProgress`.
 *
 * With `inputAsApproval`, an elicitation nobody here answers is instead the Agents SDK's own human-in-the-loop: the
 * tool call becomes an approval interruption (`result.interruptions`) that survives `RunState.toString()` and a
 * restart; `interruptionInput` reads its question from the ledger, `state.approve(item)` accepts with the form's
 * defaults, and `answerInterruption` gives any other answer (inputApproval.ts says how).
 *
 * `@openai/agents-core` (which `@openai/agents` re-exports) is an optional peer dependency: only this entry point loads
 * it.
 */
/** @ts-ignore `@openai/agents-core` is an optional peer: a consumer without it typechecks, reading its types as `any` */
import type { FunctionTool, RunToolApprovalItem } from '@openai/agents-core';
import { tool } from '@openai/agents-core';

import type { TaskClient, TaskHandle } from '../client/index.js';
import { listAllTools } from '../client/transport/listTools.js';
import type { InputResponse, JsonObject } from '../protocol/index.js';
import { acceptApproved, answerForApproval, approvalInput, inputForApproval } from './inputApproval.js';
import { type TaskClientConnectOptions, toolsOn } from './taskClientSource.js';
import {
  ANSWER_TOOL_DESCRIPTION,
  ANSWER_TOOL_NAME,
  ANSWER_TOOL_SCHEMA,
  answerAsTool,
  inputInterrupt,
  type PendingInput,
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

/** `scope` scopes the function call's `callId` (a conversation id, say). */
export interface OpenAIAgentsTaskToolsOptions extends ScopedTaskToolsOptions {
  /** Each status message of a running task. */
  onProgress?: (update: { tool: string; taskId: string; status: string; statusMessage: string }) => void;
  /**
   * An elicitation of a task that nobody here answers pauses the run as an Agents SDK approval interruption of the tool
   * call (`true`: every tool; or the tools named), instead of the `closeout_answer` path. The approval step waits
   * until the call's task ends or asks, with no abort signal of the SDK's, so name the tools that ask for input when
   * others run long. `state.approve(item)` accepts with the form's defaults; `answerInterruption` gives any answer.
   * (`alwaysApprove` lets the tool's later calls skip the approval step: their questions take the `closeout_answer` path.)
   */
  inputAsApproval?: boolean | readonly string[];
}

/** Where `openAIAgentsTaskTools` keeps a call's task apart: the ledger's idempotency key for the call. */
export type OpenAIAgentsScope = Pick<OpenAIAgentsTaskToolsOptions, 'scope'>;

/** The idempotency key of a function call: its `callId`, scoped. */
function callKey(scope: string | undefined, callId: string): string {
  return `openai-agents:${scope ? `${scope}:` : ''}${callId}`;
}

/**
 * The server's tools (from `tools/list`: names, descriptions, JSON Schema inputs) as Agents SDK function tools, plus
 * `closeout_answer`, called through `client`, or through a TaskClient connected from connect options and closed by
 * `closeTaskTools(tools)`.
 */
export async function openAIAgentsTaskTools(
  client: TaskClient | TaskClientConnectOptions,
  options: OpenAIAgentsTaskToolsOptions = {},
): Promise<FunctionTool[]> {
  return toolsOn(client, (connected) => toolsFor(connected, options));
}

async function toolsFor(client: TaskClient, options: OpenAIAgentsTaskToolsOptions): Promise<FunctionTool[]> {
  const follow = (name: string, signal: AbortSignal | undefined): Omit<CallAsToolOptions, 'callId'> => ({
    signal,
    onAbort: options.onAbort,
    ...(options.onProgress && { onProgress: (update) => options.onProgress!({ tool: name, ...update }) }),
    interrupt: inputInterrupt(client, options.inputHandlers),
  });
  const asksApproval = (name: string) =>
    options.inputAsApproval === true ||
    (Array.isArray(options.inputAsApproval) && options.inputAsApproval.includes(name));
  const tools = wantedTools(await listAllTools(client.client), options.tools).map(
    (each) =>
      tool({
        name: each.name,
        description: each.description ?? each.title ?? each.name,
        // the server's own JSON Schema, as it lists it: not rewritten into the SDK's strict subset
        parameters: { ...each.inputSchema, additionalProperties: true } as never,
        strict: false,
        // decided before the tool runs: the call's task (its key is the call's) is started here and waited for until
        // it ends or asks for input nobody here answers; only such a question asks for approval. Set only where asked
        // for: any policy function makes the SDK treat the tool's approvals as conditional.
        ...(asksApproval(each.name) && {
          needsApproval: async (_context: unknown, input: unknown, callId?: string) =>
            callId !== undefined &&
            (await inputForApproval(
              client,
              each.name,
              (input ?? {}) as JsonObject,
              { callId: callKey(options.scope, callId), onProgress: follow(each.name, undefined).onProgress },
              options.inputHandlers,
            )) !== undefined,
        }),
        execute: async (input, context, details) => {
          const callId = details?.toolCall?.callId;
          const approved =
            callId !== undefined &&
            asksApproval(each.name) &&
            context?.isToolApproved({ toolName: each.name, callId }) === true;
          const following = follow(each.name, details?.signal);
          const result = await callAsTool(client, each.name, (input ?? {}) as JsonObject, {
            callId: callId === undefined ? undefined : callKey(options.scope, callId),
            ...following,
            ...(approved && { interrupt: afterApproval(client, following.interrupt!) }),
          });
          return textForModel(result);
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
      textForModel(await answerAsTool(client, (input ?? {}) as JsonObject, follow(ANSWER_TOOL_NAME, details?.signal))),
    errorFunction: (_context, error) => (error instanceof Error ? error.message : String(error)),
  }) as unknown as FunctionTool;
  return [...tools, answer];
}

/** An approved call: the question its approval stood for is accepted (once, before anything waits), then input as usual. */
function afterApproval(
  client: TaskClient,
  interrupt: NonNullable<CallAsToolOptions['interrupt']>,
): NonNullable<CallAsToolOptions['interrupt']> {
  return async (handle: TaskHandle, signal: AbortSignal) => {
    await acceptApproved(client, handle);
    return interrupt(handle, signal);
  };
}

/**
 * The question of an approval interruption that a task's input request raised (`inputAsApproval`), read from the
 * ledger (so in any process, after `RunState.fromString`); undefined for any other interruption or once answered.
 * `options.scope` is the `scope` the tools were made with.
 */
export async function interruptionInput(
  client: TaskClient,
  item: RunToolApprovalItem,
  options: OpenAIAgentsScope = {},
): Promise<PendingInput | undefined> {
  if (item.rawItem.type !== 'function_call') return undefined;
  const record = await client.get(callKey(options.scope, item.rawItem.callId));
  return record && approvalInput(client, record);
}

/**
 * Answers the input request behind an approval interruption with `response` (e.g. `{ action: 'accept', content }` or
 * `{ action: 'decline' }`): stored in the ledger and sent once (the first stored answer wins), then the item is
 * approved, so the resumed run's call returns the task's own result. Throws when the interruption is no task's
 * pending input request.
 */
export async function answerInterruption(
  client: TaskClient,
  state: { approve(item: RunToolApprovalItem): void },
  item: RunToolApprovalItem,
  response: InputResponse,
  options: OpenAIAgentsScope = {},
): Promise<void> {
  const pending = await interruptionInput(client, item, options);
  if (pending === undefined) {
    throw new Error(`interruption of ${item.name ?? 'a tool'} is no task's pending input request (already answered?)`);
  }
  await answerForApproval(client, pending, response);
  state.approve(item);
}
