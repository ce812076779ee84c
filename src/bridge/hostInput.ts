/**
 * The input a task asks for, put to the bridge's host (docs/bridge.md, "Input"). How a host can be asked depends on
 * its revision and what it declared:
 *
 * - `request`: a 2025 host that declared elicitation gets its own `elicitation/create`, sent within a call of it that
 *   waits on the task;
 * - `result`: a 2026-07-28 host that declared elicitation gets an `input_required` result for that call (MRTR) and
 *   calls again with its answers;
 * - `none`: the call answers with the question in its text, for `closeout_answer`.
 *
 * A question that finds no call of a `request` host waiting on its task (it arrived after the call answered with the
 * task id, or after a restart of the bridge) is parked, and put to the next such call that waits on the task
 * (`closeout_wait`). Each question is answered once: the client half stores an answer before it sends it and never
 * asks for a stored one again; a question put to a host that never answered it is put again.
 */
import type { ElicitResult, ServerContext } from '@modelcontextprotocol/server';
import { CLIENT_CAPABILITIES_META_KEY, inputRequired } from '@modelcontextprotocol/server';

import type { TaskHandle, TaskInputContext, TaskRecord } from '../client/index.js';

export type HostAsking = 'request' | 'result' | 'none';

/** A call of the host that waits on a task now. */
export interface HostCall {
  ctx: ServerContext;
  asking: HostAsking;
}

export type ElicitParams = { message?: string; requestedSchema?: unknown; mode?: string };

interface Question {
  taskId: string;
  key: string;
  params: ElicitParams;
  /** Put the question to a call of the host: on an answer the task's handler resolves, else it is parked again. */
  putTo: (call: HostCall) => void;
}

/** How the host of a call can be asked for input: by its revision (a 2026-07-28 request carries an envelope). */
export function hostAsking(ctx: ServerContext, sessionCapabilities: { elicitation?: unknown } | undefined): HostAsking {
  const envelope = (ctx.mcpReq as { envelope?: Record<string, unknown> }).envelope;
  if (envelope === undefined) return sessionCapabilities?.elicitation === undefined ? 'none' : 'request';
  const declared = envelope[CLIENT_CAPABILITIES_META_KEY] as { elicitation?: unknown } | undefined;
  return declared?.elicitation === undefined ? 'none' : 'result';
}

export class HostInput {
  /** The call of the host waiting on each task now. */
  private readonly waiting = new Map<string, HostCall>();
  /** Questions put to the host now, by task id and key: a call waits for the host's answer, not for closeout_answer. */
  private readonly forwarded = new Set<string>();
  /** Questions no call of a `request` host could be asked yet, by task id and key. */
  private readonly parked = new Map<string, Question>();

  /** The client half's elicitation handler: resolves with the host's answer, rejects only when the task's signal aborts. */
  readonly ask = (params: ElicitParams, context: TaskInputContext): Promise<ElicitResult> => {
    const { taskId, key, signal } = context;
    // an MRTR round before any task exists, or a URL to open: left for closeout_answer
    if (taskId === undefined || params.mode === 'url') return untilAborted(signal);
    const id = questionId(taskId, key);
    return new Promise<ElicitResult>((resolve, reject) => {
      const question: Question = {
        taskId,
        key,
        params,
        putTo: (call) => {
          this.parked.delete(id);
          this.forwarded.add(id);
          call.ctx.mcpReq
            .elicitInput({
              mode: 'form',
              message: params.message ?? `Task ${taskId} asks for input (${key})`,
              requestedSchema: (params.requestedSchema ?? { type: 'object', properties: {} }) as never,
            })
            .then(resolve, () => {
              // the host's call ended or it refused the request: it never answered, so the question waits again
              if (!signal.aborted) this.parked.set(id, question);
            })
            .finally(() => this.forwarded.delete(id));
        },
      };
      const abort = () => {
        this.parked.delete(id);
        reject(signal.reason as Error);
      };
      if (signal.aborted) return abort();
      signal.addEventListener('abort', abort, { once: true });
      const call = this.waiting.get(taskId);
      if (call?.asking === 'request') question.putTo(call);
      else this.parked.set(id, question);
    });
  };

  /**
   * A call of the host waits on the task (`record`) from now until the returned function is called. A question parked
   * for the task and still unanswered goes to a `request` host now, within this call.
   */
  follow(record: TaskRecord, call: HostCall): () => void {
    const taskId = record.taskId!;
    this.waiting.set(taskId, call);
    if (call.asking === 'request') {
      for (const question of [...this.parked.values()]) {
        const stored = record.inputs.find((input) => input.key === question.key);
        if (question.taskId === taskId && stored?.response === undefined) question.putTo(call);
      }
    }
    return () => {
      if (this.waiting.get(taskId) === call) this.waiting.delete(taskId);
    };
  }

  /** An answer given another way (closeout_answer, an MRTR retry): its question is no longer put to the host. */
  answered(taskId: string, key: string): void {
    this.parked.delete(questionId(taskId, key));
  }

  /** Whether the task waits for input that nobody answered and the host is not being asked for now. */
  unasked(record: TaskRecord): boolean {
    return (
      record.status === 'input_required' &&
      record.inputs.some(
        (input) => input.response === undefined && !this.forwarded.has(questionId(record.taskId!, input.key)),
      )
    );
  }

  /**
   * Resolves with the record once the task waits for input that nobody answered and the host is not being asked for
   * (the ledger records a key just before its handler runs, and a question put to the host is marked then): looked at
   * twice a second until `stop`.
   */
  needsInput(handle: TaskHandle): { found: Promise<TaskRecord>; stop: () => void } {
    let timer: NodeJS.Timeout | undefined;
    let seenOnce = false;
    const found = new Promise<TaskRecord>((resolve) => {
      const look = () => {
        void handle.record().then(
          (record) => {
            // twice in a row: a key just handed to the host's elicitation is marked between the two looks
            if (this.unasked(record) && seenOnce) return resolve(record);
            seenOnce = this.unasked(record);
            timer = setTimeout(look, 500);
          },
          () => (timer = setTimeout(look, 500)),
        );
      };
      look();
    });
    return { found, stop: () => clearTimeout(timer) };
  }
}

/** The prefix of the `requestState` of an input_required result: the rest is the task's id. */
const REQUEST_STATE_PREFIX = 'closeout-bridge-task:';

/**
 * The open questions of a task as an `input_required` result for a 2026-07-28 host (spec: basic/patterns/mrtr): its
 * client asks the person, then calls again with `inputResponses` and this `requestState`, which names the task.
 */
export function inputRequiredResult(record: TaskRecord) {
  const open = record.inputs.filter((input) => input.response === undefined);
  return inputRequired({
    inputRequests: Object.fromEntries(
      open.map((input) => {
        const params = input.request.params as ElicitParams;
        return [
          input.key,
          inputRequired.elicit({
            message: params.message ?? `Task ${record.taskId} asks for input (${input.key})`,
            requestedSchema: (params.requestedSchema ?? { type: 'object', properties: {} }) as never,
          }),
        ];
      }),
    ),
    requestState: `${REQUEST_STATE_PREFIX}${record.taskId}`,
  });
}

/**
 * The task a 2026-07-28 host's call answers input for, with its answers; undefined for a first call. The state comes
 * back from the host: it may name any task of this bridge, as `closeout_answer` may.
 */
export function answersOf(ctx: ServerContext): { taskId: string; responses: Record<string, unknown> } | undefined {
  const state = ctx.mcpReq.requestState();
  if (typeof state !== 'string' || !state.startsWith(REQUEST_STATE_PREFIX)) return undefined;
  return { taskId: state.slice(REQUEST_STATE_PREFIX.length), responses: ctx.mcpReq.inputResponses ?? {} };
}

function questionId(taskId: string, key: string): string {
  return `${taskId}\u0000${key}`;
}

/** A promise that only rejects, when `signal` aborts. */
function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise<never>((_resolve, reject) => {
    if (signal.aborted) reject(signal.reason as Error);
    else signal.addEventListener('abort', () => reject(signal.reason as Error), { once: true });
  });
}
