/**
 * A task's input request as a person's approval of the tool call that started it, for a framework whose
 * human-in-the-loop approves a tool call before the tool runs (the Agents SDK's `needsApproval`; docs/frameworks.md,
 * "OpenAI Agents"). The approval step starts the call's task (the same idempotency key as the call, so the same task)
 * and waits until the task ends or asks for an elicitation nobody here answers; only then is approval asked. The
 * question stays in the ledger, so a run restored in another process reads it back, and an approved call answers it
 * once: the first stored answer wins, so a replay sends nothing. Loads no framework.
 */
import type { TaskClient, TaskHandle, TaskInputHandlers, TaskRecord } from '../client/index.js';
import type { InputResponse, JsonObject } from '../protocol/index.js';
import { inputInterrupt, type PendingInput, pendingInput, pendingInputOf } from './taskInput.js';
import { callAsTool, type CallAsToolOptions } from './taskOutcome.js';

const ELICITATION = 'elicitation/create';

/**
 * Starts or finds the call's task and waits until it ends (undefined: the call itself returns its result) or asks for
 * an elicitation nobody here answers (the TaskClient's handlers, then `handlers`): that request, which the approval
 * answers. Any failure is left to the call, which meets it again.
 */
export async function inputForApproval(
  client: TaskClient,
  name: string,
  args: JsonObject,
  options: Pick<CallAsToolOptions, 'callId' | 'onProgress'>,
  handlers: TaskInputHandlers | undefined,
): Promise<PendingInput | undefined> {
  try {
    const result = await callAsTool(client, name, args, {
      ...options,
      // the Agents SDK hands its approval step no abort signal: the call's own signal reaches the task once it runs
      signal: undefined,
      onAbort: 'detach',
      interrupt: inputInterrupt(client, handlers),
    });
    const pending = pendingInputOf(result);
    return pending?.method === ELICITATION ? pending : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The elicitation an approval of the call answers, from the ledger: the first unanswered one the TaskClient does not
 * answer itself (the same one on every read, in any process, until it is answered).
 */
export function approvalInput(client: TaskClient, record: TaskRecord): PendingInput | undefined {
  if (record.taskId === undefined || client.handlesInput(ELICITATION)) return undefined;
  const input = record.inputs.find((each) => each.response === undefined && each.request.method === ELICITATION);
  return input && pendingInput(record.taskId, input);
}

/**
 * For a call a person approved: accepts the elicitation its approval stood for with the defaults its form declares
 * (spec: elicitation schemas' primitive properties may carry a `default`). Nothing is sent when the form has a required
 * field without a default (the call then states the question, as without approvals) or when an answer is stored.
 */
export async function acceptApproved(client: TaskClient, handle: TaskHandle): Promise<void> {
  const pending = approvalInput(client, await handle.record());
  if (pending === undefined) return;
  const content = defaultContent(pending.requestedSchema);
  if (content === undefined) return;
  await client.answer(
    handle.taskId,
    pending.key,
    content === null ? { action: 'accept' } : { action: 'accept', content },
  );
}

/** The person's own answer to the elicitation an approval stands for, stored in the ledger and sent once. */
export async function answerForApproval(
  client: TaskClient,
  pending: PendingInput,
  response: InputResponse,
): Promise<void> {
  await client.attach(pending.taskId);
  await client.answer(pending.taskId, pending.key, response);
}

/**
 * A form filled with its properties' defaults; `null` for a request with no form (URL mode: accepting carries no
 * content), undefined when a required property has no default.
 */
function defaultContent(schema: JsonObject | undefined): JsonObject | null | undefined {
  if (schema === undefined) return null;
  const properties = (schema['properties'] ?? {}) as Record<string, JsonObject>;
  const content: JsonObject = {};
  for (const [name, property] of Object.entries(properties)) {
    if (property['default'] !== undefined) content[name] = property['default'];
  }
  const required = Array.isArray(schema['required']) ? schema['required'] : [];
  return required.every((name) => typeof name === 'string' && name in content) ? content : undefined;
}
