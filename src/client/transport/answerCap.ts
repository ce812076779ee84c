/**
 * Answers past the client's `maxAnswerBytes` (docs/operations.md, "Limits"): the error that names the cap, and how a
 * request sent through the SDK learns that its SSE answer passed it. The SDK's transport takes an answer stream that
 * broke for a dropped connection and waits out the request's timeout, so without this the record said "timed out".
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** An answer, or one event of an SSE stream, that passed the client's `maxAnswerBytes`: the rest is not read. */
export class AnswerTooLargeError extends Error {
  constructor(
    readonly limit: number,
    what: 'answer' | 'event',
  ) {
    super(
      what === 'answer'
        ? `the server's answer passed ${limit} bytes, the client's maxAnswerBytes: the rest was not read`
        : `an event of the server's stream passed ${limit} bytes, the client's maxAnswerBytes: the stream was dropped`,
    );
    this.name = 'AnswerTooLargeError';
  }
}

/** Told when the SSE answer to the request this async context sends passed the cap (see `failingOnOversize`). */
const oversizedAnswer = new AsyncLocalStorage<(error: AnswerTooLargeError) => void>();

/** Whom to tell that the answer to the request being sent now passed the cap: read by the fetch that carries it. */
export function oversizeListener(): ((error: AnswerTooLargeError) => void) | undefined {
  return oversizedAnswer.getStore();
}

/**
 * Send one request through the SDK (`send`, handed the signal to give it; `signal` is the caller's own, if any) so
 * that an SSE answer to it that passes the cap ends it at once with the AnswerTooLargeError, not at its timeout.
 */
export async function failingOnOversize<T>(
  send: (signal: AbortSignal) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  const controller = new AbortController();
  let tooLarge: AnswerTooLargeError | undefined;
  const onOversize = (error: AnswerTooLargeError) => {
    tooLarge ??= error;
    controller.abort(error);
  };
  try {
    return await oversizedAnswer.run(onOversize, () =>
      send(signal ? AbortSignal.any([signal, controller.signal]) : controller.signal),
    );
  } catch (error) {
    // the SDK rejects an aborted request as a timeout: the reason it was aborted is what happened
    throw tooLarge ?? error;
  }
}
