/**
 * Input a task asks for, put to the person through LangGraph's own human-in-the-loop mechanism, `interrupt()`
 * (docs/frameworks.md, "LangChain.js"): the graph run stops with the question as the interrupt's value, and the run
 * resumed with `new Command({ resume: answer })` re-executes the tool from the start (the same tool-call id, so the same
 * task), where `interrupt()` returns the answer and the tool gives it to the task.
 *
 * LangGraph resumes a node by position: the n-th `interrupt()` of a re-run returns the n-th resume value. So every run
 * of the tool puts the task's input keys to `interrupt()` in the order the ledger first saw them, those the graph asked
 * before included (their answers replay), and a key already answered when the graph first came to it (by
 * `TaskClient.answer`, `closeout answer` or the console) is never put; keys of methods the TaskClient's own handlers
 * answer are left to them. Which keys the graph asked is remembered by this process for the task's record, as a run
 * interrupted with an in-memory checkpointer is resumed by the process that ran it (docs/frameworks.md, "Not yet").
 *
 * `@langchain/langgraph` is an optional peer dependency, imported here only when a caller opts in.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

import type { TaskClient, TaskHandle } from '../client/index.js';
import type { InputResponse } from '../protocol/index.js';
import { changeOrTimeout, INPUT_CHECK_MS, pendingInput } from './taskInput.js';

/** Per TaskClient and record: whether the graph was asked each input key, decided when the graph first came to it. */
const ASKED = new WeakMap<TaskClient, Map<string, Map<string, boolean>>>();

/** A CallAsToolOptions `interrupt` that asks for input with LangGraph's `interrupt()`, as this module's comment says. */
export async function graphInterruptInput(
  client: TaskClient,
): Promise<(handle: TaskHandle, signal: AbortSignal) => Promise<CallToolResult>> {
  const { interrupt } = await import('@langchain/langgraph').catch((error: unknown) => {
    throw new Error("input: 'interrupt' needs @langchain/langgraph (1.x) installed beside @langchain/core", {
      cause: error,
    });
  });
  return async (handle, signal) => {
    const asked = askedOf(client, handle);
    let walked = 0;
    let first = true;
    while (!signal.aborted) {
      if (first || handle.lastRecord.status === 'input_required') {
        first = false;
        const { inputs } = await handle.record();
        for (; walked < inputs.length; walked++) {
          const input = inputs[walked]!;
          if (client.handlesInput(input.request.method)) continue;
          let graphAsked = asked.get(input.key);
          if (graphAsked === undefined) {
            graphAsked = input.response === undefined;
            asked.set(input.key, graphAsked);
          }
          if (!graphAsked) continue;
          // throws GraphInterrupt (the run stops with the question) unless the graph was resumed with its answer
          const resume: unknown = interrupt(pendingInput(handle.taskId, input));
          // the first stored answer wins: a key answered elsewhere after the graph asked keeps that answer
          if (input.response === undefined) await client.answer(handle.taskId, input.key, answerOf(resume, input.key));
        }
      }
      await changeOrTimeout(handle, signal, INPUT_CHECK_MS);
    }
    return new Promise<never>(() => undefined);
  };
}

function askedOf(client: TaskClient, handle: TaskHandle): Map<string, boolean> {
  let records = ASKED.get(client);
  if (records === undefined) ASKED.set(client, (records = new Map()));
  let asked = records.get(handle.recordId);
  if (asked === undefined) records.set(handle.recordId, (asked = new Map()));
  // kept while the task goes on (a detached call's graph may still be resumed), dropped once it ended
  handle.outcome().then(
    (outcome) => void (outcome.kind !== 'detached' && records.delete(handle.recordId)),
    () => undefined,
  );
  return asked;
}

function answerOf(resume: unknown, key: string): InputResponse {
  if (typeof resume !== 'object' || resume === null || Array.isArray(resume)) {
    throw new TypeError(
      `the graph was resumed with ${JSON.stringify(resume)} for input ${key}: resume it with the answer, an object ` +
        "such as { action: 'accept', content: { ... } }",
    );
  }
  return resume as InputResponse;
}
