/**
 * Multi round-trip requests on `tools/call` (core basic/patterns/mrtr, "Client Requirements (Basic Workflow)"): a
 * server may answer `tools/call` with an InputRequiredResult before anything runs (SEP-2663 expects MRTR rounds to be
 * resolved before a CreateTaskResult). The client gathers the requested inputs, then retries the original request:
 *
 * - the retry is an independent request, so it gets a new JSON-RPC id (each `send` is one SDK request);
 * - it carries this round's `inputResponses` and the exact `requestState` given, and no `requestState` when the
 *   InputRequiredResult had none (each retry is built from the original params, never from the previous retry);
 * - an InputRequiredResult without `inputRequests` may be retried at once; a short pause keeps a server that sheds
 *   load this way from being hammered.
 */
import type { InputRequests, InputResponses } from '../../protocol/index.js';
import { InputRequestsSchema } from '../../protocol/index.js';
import { MAX_INPUT_REQUESTS } from '../transport/serverOutput.js';

/** Rounds one call may take before it is given up (the SDK's own driver uses the same cap). */
export const MAX_INPUT_ROUNDS = 10;

/** Pause before retrying an InputRequiredResult that asked for nothing (only a `requestState`). */
const STATE_ONLY_PAUSE_MS = 250;

export interface InputRoundsOptions {
  /** The original `tools/call` params. */
  params: Record<string, unknown>;
  /** Send one `tools/call` with these params; resolves with its result (an InputRequiredResult included). */
  send: (params: Record<string, unknown>) => Promise<unknown>;
  /** Gather the responses to one round's input requests; throws when they cannot be given. */
  fulfil: (inputRequests: InputRequests) => Promise<InputResponses>;
  signal?: AbortSignal | undefined;
  maxRounds?: number | undefined;
}

/** Why the rounds stopped without a result: the input could not be given, or the server kept asking. */
export class InputRoundsError extends Error {
  constructor(
    readonly reason: 'input-unavailable' | 'too-many-rounds' | 'bad-input-required',
    message: string,
    options?: { cause: unknown },
  ) {
    super(message, options);
    this.name = 'InputRoundsError';
  }
}

/** Sends `tools/call` and runs its MRTR rounds; resolves with the first answer that is not an InputRequiredResult. */
export async function callThroughInputRounds(options: InputRoundsOptions): Promise<unknown> {
  const maxRounds = options.maxRounds ?? MAX_INPUT_ROUNDS;
  let answer = await options.send(options.params);
  for (let round = 1; isInputRequired(answer); round++) {
    if (round > maxRounds) {
      throw new InputRoundsError(
        'too-many-rounds',
        `the server still required input after ${maxRounds} rounds of tools/call`,
      );
    }
    const { inputRequests, requestState } = readInputRequired(answer);
    let responses: InputResponses = {};
    if (Object.keys(inputRequests).length > 0) {
      try {
        responses = await options.fulfil(inputRequests);
      } catch (error) {
        if (options.signal?.aborted) throw error;
        throw new InputRoundsError('input-unavailable', error instanceof Error ? error.message : String(error), {
          cause: error,
        });
      }
    } else {
      await pause(STATE_ONLY_PAUSE_MS, options.signal);
    }
    answer = await options.send({
      ...options.params,
      ...(Object.keys(responses).length > 0 && { inputResponses: responses }),
      // spec: echo the exact value; MUST NOT include one when none was given
      ...(requestState !== undefined && { requestState }),
    });
  }
  return answer;
}

function isInputRequired(answer: unknown): answer is Record<string, unknown> {
  return (
    typeof answer === 'object' &&
    answer !== null &&
    (answer as { resultType?: unknown }).resultType === 'input_required'
  );
}

function readInputRequired(answer: Record<string, unknown>): {
  inputRequests: InputRequests;
  requestState: string | undefined;
} {
  const requestState = answer['requestState'];
  if (requestState !== undefined && typeof requestState !== 'string') {
    throw new InputRoundsError('bad-input-required', 'InputRequiredResult.requestState is not a string');
  }
  const parsed = InputRequestsSchema.safeParse(answer['inputRequests'] ?? {});
  if (!parsed.success) {
    throw new InputRoundsError(
      'bad-input-required',
      `InputRequiredResult.inputRequests is not a map of elicitation, sampling or roots requests: ${parsed.error.issues[0]?.message ?? 'invalid'}`,
    );
  }
  const count = Object.keys(parsed.data).length;
  if (count > MAX_INPUT_REQUESTS) {
    throw new InputRoundsError(
      'bad-input-required',
      `InputRequiredResult asks ${count} inputs at once, more than this client answers (${MAX_INPUT_REQUESTS})`,
    );
  }
  if (count === 0 && requestState === undefined) {
    throw new InputRoundsError(
      'bad-input-required',
      'InputRequiredResult carries neither inputRequests nor requestState (spec: at least one of the two)',
    );
  }
  return { inputRequests: parsed.data, requestState };
}

function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason as Error);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
