/**
 * `closeout/langchain`: a server's tools as LangChain.js tools that run as durable tasks through a TaskClient. The tool
 * call's id (scoped by the run's `thread_id` when it has one) is the idempotency key, so a graph replayed after a
 * crash, or a retried call, gets the same task; each status message is dispatched as a custom event
 * (`closeout_progress`, seen by `streamEvents` and callbacks) and written to LangGraph's stream writer when there is
 * one; the run's abort signal detaches (the task goes on) or, with `onAbort: 'cancel'`, cancels. A completed task is
 * the tool's content (its text, or its structured content as JSON when it has no text) with the whole CallToolResult as
 * the artifact; a task that failed, was cancelled or expired throws TaskToolError. Input a task asks for goes to the
 * TaskClient's own `inputHandlers`, else to the `inputHandlers` given here; a request nobody here can answer ends the
 * call with a ToolMessage stating the question (the pending request in the artifact's `_meta`,
 * `io.closeout/inputRequired`) and the `closeout_answer` tool, offered with the others, answers it and returns the
 * task's result (docs/frameworks.md). With `input: 'interrupt'` a tool running in a LangGraph graph asks with
 * LangGraph's `interrupt()` instead (langgraphInterrupt.ts).
 *
 * `@langchain/core` is an optional peer dependency: only this entry point loads it; `@langchain/langgraph`, another, is
 * loaded only for `input: 'interrupt'`.
 */
import { dispatchCustomEvent } from '@langchain/core/callbacks/dispatch';
/** @ts-ignore `@langchain/core` is an optional peer: a consumer without it typechecks, reading its types as `any` */
import type { DynamicStructuredTool, ToolRunnableConfig } from '@langchain/core/tools';
import { tool } from '@langchain/core/tools';
import type { CallToolResult } from '@modelcontextprotocol/client';

import type { TaskClient } from '../client/index.js';
import { listAllTools } from '../client/transport/listTools.js';
import type { JsonObject } from '../protocol/index.js';
import { graphInterruptInput } from './langgraphInterrupt.js';
import { type TaskClientConnectOptions, toolsOn } from './taskClientSource.js';
import {
  ANSWER_TOOL_DESCRIPTION,
  ANSWER_TOOL_NAME,
  ANSWER_TOOL_SCHEMA,
  answerAsTool,
  inputInterrupt,
} from './taskInput.js';
import { callAsTool, type CallAsToolOptions, type TaskToolsOptions, textForModel, wantedTools } from './taskOutcome.js';

export { closeTaskTools, type TaskClientConnectOptions } from './taskClientSource.js';
export type { PendingInput } from './taskInput.js';
export { type OnAbort, TaskToolError } from './taskOutcome.js';

/** Call ids are scoped by the run's `thread_id`; `onAbort` acts on the run's abort signal. */
export interface LangChainTaskToolsOptions extends TaskToolsOptions {
  /**
   * Where input the TaskClient's own handlers do not answer goes. `answer-tool` (the default): the adapter's
   * `inputHandlers`, else a ToolMessage stating the question and `closeout_answer`. `interrupt`: LangGraph's
   * `interrupt()`, for tools run by a graph with a checkpointer (e.g. in a ToolNode): the run stops with the question
   * (`{ taskId, key, method, message, requestedSchema }`) as the interrupt's value, and the run resumed with
   * `new Command({ resume: answer })` answers the task and returns its result. Needs `@langchain/langgraph` installed;
   * no `inputHandlers`, and no `closeout_answer` is returned.
   */
  input?: 'answer-tool' | 'interrupt';
}

/**
 * The server's tools (from `tools/list`: names, descriptions, JSON Schema inputs) as LangChain tools, plus
 * `closeout_answer` (not with `input: 'interrupt'`), called through `client`, or through a TaskClient connected from
 * connect options and closed by `closeTaskTools(tools)`.
 */
export async function langchainTaskTools(
  client: TaskClient | TaskClientConnectOptions,
  options: LangChainTaskToolsOptions = {},
): Promise<DynamicStructuredTool[]> {
  return toolsOn(client, (connected) => toolsFor(connected, options));
}

async function toolsFor(client: TaskClient, options: LangChainTaskToolsOptions): Promise<DynamicStructuredTool[]> {
  if (options.input === 'interrupt' && options.inputHandlers !== undefined) {
    throw new TypeError(
      "langchainTaskTools: input 'interrupt' puts every question to the graph; give no inputHandlers",
    );
  }
  const interrupt =
    options.input === 'interrupt' ? await graphInterruptInput(client) : inputInterrupt(client, options.inputHandlers);
  const listed = await listAllTools(client.client);
  /** How a call of the run follows its task: progress to the run's stream and callbacks, input routed. */
  const follow = (config: ToolRunnableConfig): Omit<CallAsToolOptions, 'callId'> => ({
    signal: config.signal,
    onAbort: options.onAbort,
    onProgress: (update) => {
      (config as { writer?: (chunk: unknown) => void }).writer?.({ closeout: update });
      void dispatchCustomEvent('closeout_progress', update, config).catch(() => undefined);
    },
    interrupt,
  });
  const asMessage = (result: CallToolResult): [string, CallToolResult] => [textForModel(result), result];
  const tools = wantedTools(listed, options.tools).map(
    (each) =>
      tool(
        async (input: JsonObject, config: ToolRunnableConfig) => {
          const callId = config.toolCall?.id;
          const thread = (config.configurable as { thread_id?: unknown } | undefined)?.thread_id;
          const result = await callAsTool(client, each.name, input, {
            callId:
              callId === undefined ? undefined : `langchain:${typeof thread === 'string' ? `${thread}:` : ''}${callId}`,
            ...follow(config),
          });
          return asMessage(result);
        },
        {
          name: each.name,
          description: each.description ?? each.title ?? each.name,
          schema: each.inputSchema as never,
          responseFormat: 'content_and_artifact',
        },
      ) as unknown as DynamicStructuredTool,
  );
  const answer = tool(
    async (input: JsonObject, config: ToolRunnableConfig) =>
      asMessage(await answerAsTool(client, input, follow(config))),
    {
      name: ANSWER_TOOL_NAME,
      description: ANSWER_TOOL_DESCRIPTION,
      schema: ANSWER_TOOL_SCHEMA as never,
      responseFormat: 'content_and_artifact',
    },
  ) as unknown as DynamicStructuredTool;
  return options.input === 'interrupt' ? tools : [...tools, answer];
}
