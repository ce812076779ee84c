/**
 * Input a task asks for while a framework's tool waits on it (docs/frameworks.md): the adapter's own `inputHandlers`
 * answer what the TaskClient's handlers do not (each key asked once in a call; the answer is stored in the ledger
 * before it is sent), and the first request nobody here can answer ends the tool call with a result stating the
 * question and how to answer it: the `closeout_answer` tool, which answers and then follows the task to its result.
 * Loads no framework.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

import type { TaskClient, TaskHandle, TaskInputHandlers } from '../client/index.js';
import type { InputAnswer } from '../client/ledger/ledger.js';
import type { InputResponse, JsonObject } from '../protocol/index.js';
import { type CallAsToolOptions, followAsTool } from './taskOutcome.js';

export const ANSWER_TOOL_NAME = 'closeout_answer';

export const ANSWER_TOOL_DESCRIPTION =
  'Answers an input request of a task tool whose result says the task waits for input (give its taskId and key), ' +
  "then waits for that task's result. For an elicitation, response is { action: 'accept', content: { ...the " +
  "requested fields } } or { action: 'decline' }.";

export const ANSWER_TOOL_SCHEMA: JsonObject = {
  type: 'object',
  properties: {
    taskId: { type: 'string', description: 'The taskId the waiting task tool returned' },
    key: { type: 'string', description: 'The key of the input request' },
    response: { type: 'object', description: 'The answer, in the shape the request asks for' },
  },
  required: ['taskId', 'key', 'response'],
};

/** The `_meta` key of a result that states an input request nobody here can answer. */
export const INPUT_REQUIRED_META = 'io.closeout/inputRequired';

/** An input request a task waits for, as the tool's result states it. */
export interface PendingInput {
  taskId: string;
  key: string;
  method: string;
  /** The question (an elicitation's message), when the request carries one. */
  message: string | undefined;
  /** The form asked for (an elicitation's `requestedSchema`), when the request carries one. */
  requestedSchema: JsonObject | undefined;
}

/** How often the ledger is read for input requests while a task is `input_required` (they are recorded there). */
export const INPUT_CHECK_MS = 250;

/** A CallAsToolOptions `interrupt` that routes input requests as this module's comment says. */
export function inputInterrupt(
  client: TaskClient,
  handlers: TaskInputHandlers | undefined,
): (handle: TaskHandle, signal: AbortSignal) => Promise<CallToolResult> {
  return async (handle, signal) => {
    const asked = new Set<string>();
    while (!signal.aborted) {
      if (handle.lastRecord.status === 'input_required') {
        const pending = (await handle.record()).inputs.filter(
          (input) =>
            input.response === undefined && !client.handlesInput(input.request.method) && !asked.has(input.key),
        );
        for (const input of pending) {
          asked.add(input.key);
          const response = await askHandler(handlers, handle, input, signal).catch(() => undefined);
          if (response === undefined) return inputRequiredResult(handle.taskId, input);
          if (!signal.aborted) await client.answer(handle.taskId, input.key, response);
        }
      }
      await changeOrTimeout(handle, signal, INPUT_CHECK_MS);
    }
    return new Promise<never>(() => undefined);
  };
}

async function askHandler(
  handlers: TaskInputHandlers | undefined,
  handle: TaskHandle,
  input: InputAnswer,
  signal: AbortSignal,
): Promise<InputResponse | undefined> {
  const context = {
    taskId: handle.taskId,
    recordId: handle.recordId,
    key: input.key,
    toolName: handle.lastRecord.toolName,
    correlationId: handle.lastRecord.correlationId,
    previouslyAsked: false,
    signal,
  };
  const request = input.request as never;
  switch (input.request.method) {
    case 'elicitation/create':
      return (await handlers?.elicitation?.(request, context)) as InputResponse | undefined;
    case 'sampling/createMessage':
      return (await handlers?.sampling?.(request, context)) as InputResponse | undefined;
    case 'roots/list':
      return (await handlers?.roots?.(request, context)) as InputResponse | undefined;
    default:
      return undefined;
  }
}

/** Resolves at the handle's next change, after `ms`, or when `signal` aborts, whichever comes first. */
export function changeOrTimeout(handle: TaskHandle, signal: AbortSignal, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      stop();
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const stop = handle.onChange(done);
    signal.addEventListener('abort', done, { once: true });
  });
}

function inputRequiredResult(taskId: string, input: InputAnswer): CallToolResult {
  const pending = pendingInput(taskId, input);
  const { message, requestedSchema } = pending;
  const text =
    `Task ${taskId} is waiting for input (${input.request.method})` +
    (message === undefined ? '' : `: ${message}`) +
    `. Answer it with the ${ANSWER_TOOL_NAME} tool (taskId ${JSON.stringify(taskId)}, key ${JSON.stringify(input.key)}` +
    (requestedSchema === undefined ? '' : `, response content per ${JSON.stringify(requestedSchema)}`) +
    `); it then returns the task's result.`;
  return { content: [{ type: 'text', text }], _meta: { [INPUT_REQUIRED_META]: pending as never } };
}

/** An input request of task `taskId` as the adapters state it: its question and form, when it carries them. */
export function pendingInput(taskId: string, input: InputAnswer): PendingInput {
  const params = (input.request.params ?? {}) as JsonObject;
  const message = typeof params['message'] === 'string' ? params['message'] : undefined;
  const schema = params['requestedSchema'];
  const requestedSchema = typeof schema === 'object' && schema !== null ? (schema as JsonObject) : undefined;
  return { taskId, key: input.key, method: input.request.method, message, requestedSchema };
}

/** The input request a result states, when it is one inputInterrupt made. */
export function pendingInputOf(result: CallToolResult): PendingInput | undefined {
  return result._meta?.[INPUT_REQUIRED_META] as PendingInput | undefined;
}

/**
 * `closeout_answer`: answers input `key` of task `taskId` (the first stored answer wins) and follows the task to its
 * result, as the tool that started it would have.
 */
export async function answerAsTool(
  client: TaskClient,
  args: JsonObject,
  options: Omit<CallAsToolOptions, 'callId'>,
): Promise<CallToolResult> {
  const { taskId, key, response } = args;
  if (typeof taskId !== 'string' || typeof key !== 'string') {
    throw new Error(`${ANSWER_TOOL_NAME} needs a taskId and a key (strings), as the waiting tool's result gave them`);
  }
  if (typeof response !== 'object' || response === null || Array.isArray(response)) {
    throw new Error(`${ANSWER_TOOL_NAME} needs a response object, e.g. { action: 'accept', content: { ... } }`);
  }
  const handle = await client.attach(taskId);
  await client.answer(taskId, key, response as InputResponse);
  return followAsTool(handle, options);
}
