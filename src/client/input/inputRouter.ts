/**
 * Routing a task's `inputRequests` to the application (docs/DESIGN.md, client step 3; docs/REQUIREMENTS.md S9, S17).
 * Each key reaches a handler once: the answer is stored in the ledger before any `tasks/update` carries it, and a
 * stored answer is what gets re-sent (after a crash, or while the server still lists the key) instead of asking again.
 */
import type {
  ClientCapabilities,
  CreateMessageRequest,
  CreateMessageResult,
  ElicitRequest,
  ElicitResult,
  ListRootsRequest,
  ListRootsResult,
} from '@modelcontextprotocol/client';

import type { InputRequest, InputRequests, InputResponse, InputResponses } from '../../protocol/index.js';
import { TaskClientError } from '../errors.js';
import type { InputAnswer, Ledger, RecordedError, TaskRecord } from '../ledger/ledger.js';
import { isTransientStorageError } from '../ledger/ledger.js';

/** What a handler learns about the request besides the request itself. */
export interface TaskInputContext {
  /** The task asking; undefined in an MRTR round of `tools/call`, before any task exists. */
  taskId: string | undefined;
  recordId: string;
  /** The `inputRequests` key being answered. */
  key: string;
  toolName: string;
  correlationId: string | undefined;
  /** True when a previous process handed this key to a handler and died before the answer was stored. */
  previouslyAsked: boolean;
  /**
   * Aborted when the TaskClient closes or the task ends before an answer was given, or when this process could not
   * renew its lease on the record in time (the reason a TaskClientError with code 'lease-unrenewed': another worker may
   * take the record over and ask again, so close the prompt).
   */
  signal: AbortSignal;
}

/** Input handlers in the SDK's shapes: the request as `{ method, params }`, the result the SDK would send. */
export interface TaskInputHandlers {
  elicitation?: (request: ElicitRequest, context: TaskInputContext) => ElicitResult | Promise<ElicitResult>;
  sampling?: (
    request: CreateMessageRequest,
    context: TaskInputContext,
  ) => CreateMessageResult | Promise<CreateMessageResult>;
  roots?: (request: ListRootsRequest, context: TaskInputContext) => ListRootsResult | Promise<ListRootsResult>;
}

/** The per-request capabilities the handlers make true: a server only asks for what the client can answer. */
export function capabilitiesForHandlers(handlers: TaskInputHandlers): ClientCapabilities {
  return {
    ...(handlers.elicitation ? { elicitation: {} } : {}),
    ...(handlers.sampling ? { sampling: {} } : {}),
    ...(handlers.roots ? { roots: {} } : {}),
  };
}

export interface InputRouterOptions {
  ledger: Ledger;
  leaseHolder: string;
  handlers: TaskInputHandlers;
  now: () => number;
  /** Send one `tasks/update`; resolves on the server's acknowledgement. */
  sendUpdate: (taskId: string, inputResponses: InputResponses) => Promise<void>;
  /** Record a problem on the submission (never thrown: one task's input trouble is not another's). */
  recordError: (recordId: string, error: RecordedError) => Promise<void>;
  /** A stored answer whose key the server still lists is sent again after this long (eventual consistency). */
  resendAfterMs: number;
  /** How long an answer is retried into a busy or failing ledger before it is given up (docs/DESIGN.md rule 10). */
  storagePatienceMs: number;
  /** Wait this long (the TaskClient's clock). */
  sleep: (ms: number) => Promise<void>;
  /** Have the record polled in `delayMs` (when a failed handler may be asked again). */
  pollAt: (recordId: string, delayMs: number) => void;
  /**
   * The self-fence (following/selfFence.ts): whether this process's lease on a record is proven far enough ahead for a
   * round to start, and watching the rounds whose handler runs (stopped with `stopUnrenewed` when it no longer is).
   */
  lease: { isHeld: (recordId: string) => boolean; watch: (recordId: string) => () => void };
}

/**
 * A handler that throws is asked again this many times in all, each after a longer pause (HANDLER_RETRY_MS, then
 * doubling), at the polls that still find the key open; then the key waits for `TaskClient.answer()` (or a restart).
 */
export const HANDLER_ATTEMPTS = 3;
const HANDLER_RETRY_MS = 2_000;

export class InputRouter {
  /** `recordId\0key` of handlers running now in this process (or the storing and sending of their answer). */
  private readonly asking = new Map<string, AbortController>();
  /** `recordId\0key` of handlers called and not yet returned: the rounds the self-fence stops. */
  private readonly handling = new Set<string>();
  /**
   * Keys whose answer cannot come from a handler in this process now: the handler threw (`retryAt` is when it may be
   * asked again; Infinity once its attempts are spent) or its answer can never be stored.
   */
  private readonly failed = new Map<string, { attempts: number; retryAt: number }>();
  /** Keys whose answer this process stored. */
  private readonly answered = new Set<string>();
  private readonly background = new Set<Promise<void>>();

  constructor(private readonly options: InputRouterOptions) {}

  /**
   * Handle the outstanding `inputRequests` of one `tasks/get` answer. Stored answers due for (re)sending are sent
   * before this resolves; handlers run in the background so a person taking minutes does not stall polling.
   */
  async route(record: TaskRecord, taskId: string, inputRequests: InputRequests): Promise<void> {
    const now = this.options.now();
    const resend: InputResponses = {};
    for (const [key, request] of Object.entries(inputRequests)) {
      const id = `${record.recordId}\0${key}`;
      // a handler (or the send of its answer) still running owns the key
      if (this.asking.has(id)) continue;
      const stored = record.inputs.find((input) => input.key === key);
      if (stored?.response !== undefined) {
        if (stored.sentAt === undefined || now - stored.sentAt >= this.options.resendAfterMs) {
          resend[key] = stored.response;
        }
        continue;
      }
      // `record` may predate an answer stored a moment ago: the in-memory set closes that window
      if (this.answered.has(id)) continue;
      const failure = this.failed.get(id);
      if (failure && now < failure.retryAt) continue;
      // a lease this process could not renew in time may be another worker's soon: no round starts on it until a
      // renewal lands (docs/DESIGN.md, "Rules learned in the field", 13)
      if (!this.options.lease.isHeld(record.recordId)) continue;
      this.ask(record, taskId, key, request, stored?.askedAt !== undefined || failure !== undefined);
    }
    if (Object.keys(resend).length > 0) await this.send(record.recordId, taskId, resend);
  }

  /** An answer given outside a handler (e.g. typed at the CLI); the first stored answer for a key wins. */
  async answer(record: TaskRecord, taskId: string, key: string, request: InputRequest, response: InputResponse) {
    const problem = unstorable(response);
    if (problem !== undefined) {
      throw new TaskClientError('invalid-state', `the answer to input ${key} cannot be stored: ${problem}`, { record });
    }
    const stored = await this.store(record.recordId, key, request, response);
    if (stored?.response === undefined) return false;
    this.failed.delete(`${record.recordId}\0${key}`);
    this.answered.add(`${record.recordId}\0${key}`);
    await this.send(record.recordId, taskId, { [key]: stored.response });
    return true;
  }

  /**
   * Gather the responses to the `inputRequests` of an InputRequiredResult answering `tools/call` (MRTR, before any
   * task exists): every key goes to its handler at once; the first failure aborts the others and is thrown. Nothing is
   * stored: the call itself is still being submitted, and a retry after a crash starts the rounds afresh.
   */
  async fulfil(record: TaskRecord, inputRequests: InputRequests, signal?: AbortSignal): Promise<InputResponses> {
    const round = new AbortController();
    const onAbort = () => round.abort(signal?.reason);
    signal?.addEventListener('abort', onAbort, { once: true });
    if (signal?.aborted) round.abort(signal.reason);
    try {
      const entries = await Promise.all(
        Object.entries(inputRequests).map(async ([key, request]) => {
          const context: TaskInputContext = {
            taskId: undefined,
            recordId: record.recordId,
            key,
            toolName: record.toolName,
            correlationId: record.correlationId,
            previouslyAsked: false,
            signal: round.signal,
          };
          try {
            const answer = await Promise.race([this.callHandler(request, context), aborted(round.signal)]);
            if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) {
              throw new Error(`the ${request.method} handler returned ${JSON.stringify(answer)}, not an object`);
            }
            return [key, answer as InputResponse] as const;
          } catch (error) {
            const message = `input ${key} (${request.method}): ${error instanceof Error ? error.message : String(error)}`;
            round.abort(new Error(message));
            throw new Error(message, { cause: error });
          }
        }),
      );
      return Object.fromEntries(entries);
    } finally {
      signal?.removeEventListener('abort', onAbort);
    }
  }

  /** Abort the handlers still running for a record (its task ended, or it was detached). */
  abandon(recordId: string): void {
    const prefix = `${recordId}\0`;
    for (const [id, controller] of this.asking) {
      if (id.startsWith(prefix)) controller.abort(new Error('the task no longer needs this input'));
    }
    for (const id of this.answered) if (id.startsWith(prefix)) this.answered.delete(id);
    for (const id of this.failed.keys()) if (id.startsWith(prefix)) this.failed.delete(id);
  }

  /**
   * Stop the rounds whose handler runs now on a record whose lease this process could not renew in time (the self-fence,
   * docs/DESIGN.md, "Rules learned in the field", 13): another worker may take the record and ask its person again, so
   * this prompt is closed first. Nothing the handler returns after this is stored or sent; the key is asked again here
   * (saying `previouslyAsked`) only once a renewal lands and this process still holds the record.
   */
  stopUnrenewed(recordId: string): void {
    const prefix = `${recordId}\0`;
    for (const id of this.handling) {
      const controller = this.asking.get(id);
      if (!id.startsWith(prefix) || !controller || controller.signal.aborted) continue;
      const key = id.slice(prefix.length);
      const message = `input ${key}: the round was stopped (lease-unrenewed): this process could not renew its lease on the record in time, and another worker may take it over`;
      controller.abort(new TaskClientError('lease-unrenewed', message));
      // recorded once the ledger answers again; the event is emitted then
      void this.options
        .recordError(recordId, { kind: 'input', message, at: this.options.now() })
        .catch(() => undefined);
    }
  }

  /** Abort every running handler and wait for their bookkeeping to finish. */
  async close(): Promise<void> {
    for (const controller of this.asking.values()) controller.abort(new Error('the TaskClient was closed'));
    await Promise.allSettled([...this.background]);
  }

  private ask(record: TaskRecord, taskId: string, key: string, request: InputRequest, previouslyAsked: boolean) {
    const id = `${record.recordId}\0${key}`;
    const controller = new AbortController();
    this.asking.set(id, controller);
    const work = (async () => {
      const { ledger, leaseHolder } = this.options;
      // remembered before the handler runs, so a crash while a person is answering is known after restart
      if (!(await ledger.recordInputAsked(record.recordId, leaseHolder, key, request, this.options.now()))) return;
      // the write may have waited on a ledger that stalled meanwhile (selfFence.ts)
      if (!this.options.lease.isHeld(record.recordId)) return;
      const context: TaskInputContext = {
        taskId,
        recordId: record.recordId,
        key,
        toolName: record.toolName,
        correlationId: record.correlationId,
        previouslyAsked,
        signal: controller.signal,
      };
      let response: InputResponse;
      try {
        // a handler that ignores its signal must not hold up close(): stop waiting for it on abort
        const answer = await this.whileHandling(id, record.recordId, () =>
          Promise.race([this.callHandler(request, context), aborted(controller.signal)]),
        );
        if (controller.signal.aborted) return;
        if (typeof answer !== 'object' || answer === null || Array.isArray(answer)) {
          throw new Error(`the ${request.method} handler returned ${JSON.stringify(answer)}, not an object`);
        }
        response = answer as InputResponse;
      } catch (error) {
        if (controller.signal.aborted) return;
        const attempts = (this.failed.get(id)?.attempts ?? 0) + 1;
        const spent = attempts >= HANDLER_ATTEMPTS;
        const retryAt = spent ? Infinity : this.options.now() + HANDLER_RETRY_MS * 2 ** (attempts - 1);
        this.failed.set(id, { attempts, retryAt });
        if (!spent) this.options.pollAt(record.recordId, retryAt - this.options.now());
        const then = spent
          ? `it is not asked again in this process: answer it with TaskClient.answer(${JSON.stringify(taskId)}, ${JSON.stringify(key)}, response) or \`closeout answer\``
          : `asked again in ${Math.round((retryAt - this.options.now()) / 1000)} s if the task still needs it`;
        await this.options.recordError(record.recordId, {
          kind: 'input',
          message: `input ${key} (${request.method}): the handler failed (attempt ${attempts} of ${HANDLER_ATTEMPTS}): ${error instanceof Error ? error.message : String(error)}; ${then}`,
          at: this.options.now(),
        });
        return;
      }
      const problem = unstorable(response);
      if (problem !== undefined) {
        // it can never be stored, so it can never be sent: fail the key here instead of asking at every poll
        this.failed.set(id, { attempts: HANDLER_ATTEMPTS, retryAt: Infinity });
        await this.options.recordError(record.recordId, {
          kind: 'input',
          message: `input ${key} (${request.method}): the handler's answer cannot be stored (${problem}); it is not asked again in this process: answer it with TaskClient.answer() or \`closeout answer\``,
          at: this.options.now(),
        });
        return;
      }
      // spec: the answer is stored before tasks/update carries it (docs/DESIGN.md, client step 3); the key stays with
      // this process (in `asking`) until it is, so a busy ledger never makes a person answer twice
      let stored: InputAnswer | undefined;
      try {
        stored = await this.store(record.recordId, key, request, response);
      } catch (error) {
        this.failed.set(id, { attempts: HANDLER_ATTEMPTS, retryAt: Infinity });
        throw error;
      }
      if (stored?.response === undefined) return;
      this.answered.add(id);
      await this.send(record.recordId, taskId, { [key]: stored.response });
    })()
      .catch(async (error: unknown) => {
        await this.options
          .recordError(record.recordId, {
            kind: 'storage',
            message: `input ${key}: ${error instanceof Error ? error.message : String(error)}`,
            at: this.options.now(),
          })
          .catch(() => undefined);
      })
      .finally(() => {
        this.asking.delete(id);
        this.background.delete(work);
      });
    this.background.add(work);
  }

  /**
   * Store an answer that was given (docs/DESIGN.md rule 10: a person's answer is precious): a ledger another process
   * holds locked, or a disk full for a moment, is retried with backoff for `storagePatienceMs`, the answer kept in
   * memory meanwhile; any other failure, or the end of the patience, is thrown.
   */
  private async store(
    recordId: string,
    key: string,
    request: InputRequest,
    response: InputResponse,
  ): Promise<InputAnswer | undefined> {
    const { ledger, leaseHolder, now } = this.options;
    const started = now();
    let delayMs = 50;
    for (;;) {
      try {
        return await ledger.recordInputAnswer(recordId, leaseHolder, key, request, response, now());
      } catch (error) {
        if (!isTransientStorageError(error) || now() - started >= this.options.storagePatienceMs) {
          throw new Error(
            `the answer to input ${key} could not be stored (${error instanceof Error ? error.message : String(error)})`,
            { cause: error },
          );
        }
        await this.options.sleep(delayMs);
        delayMs = Math.min(delayMs * 2, 2_000);
      }
    }
  }

  /** Runs a handler's round, watched by the self-fence until the handler returns. */
  private async whileHandling<T>(id: string, recordId: string, round: () => Promise<T>): Promise<T> {
    const unwatch = this.options.lease.watch(recordId);
    this.handling.add(id);
    try {
      return await round();
    } finally {
      unwatch();
      this.handling.delete(id);
    }
  }

  private callHandler(request: InputRequest, context: TaskInputContext): Promise<unknown> {
    const { handlers } = this.options;
    switch (request.method) {
      case 'elicitation/create':
        if (handlers.elicitation) return Promise.resolve(handlers.elicitation(request as ElicitRequest, context));
        break;
      case 'sampling/createMessage':
        if (handlers.sampling) return Promise.resolve(handlers.sampling(request as CreateMessageRequest, context));
        break;
      case 'roots/list':
        if (handlers.roots) {
          return Promise.resolve(
            handlers.roots({ method: 'roots/list', params: request.params } as ListRootsRequest, context),
          );
        }
        break;
    }
    return Promise.reject(new Error(`no input handler for ${request.method}; answer it with TaskClient.answer()`));
  }

  private async send(recordId: string, taskId: string, inputResponses: InputResponses): Promise<void> {
    try {
      await this.options.sendUpdate(taskId, inputResponses);
      await this.options.ledger.recordInputsSent(recordId, Object.keys(inputResponses), this.options.now());
    } catch (error) {
      // the answer stays stored; the next poll that still lists the key sends it again
      await this.options.recordError(recordId, describeSendError(error, this.options.now()));
    }
  }
}

function describeSendError(error: unknown, at: number): RecordedError {
  const code = (error as { code?: unknown }).code;
  return {
    kind: typeof code === 'number' ? 'protocol' : 'transport',
    message: `tasks/update: ${error instanceof Error ? error.message : String(error)}`,
    at,
    code: typeof code === 'number' ? code : undefined,
  };
}

/** Why an answer cannot be kept as JSON in the ledger (a BigInt, a cycle), or undefined when it can. */
function unstorable(response: InputResponse): string | undefined {
  try {
    JSON.stringify(response);
    return undefined;
  } catch (error) {
    return error instanceof Error ? error.message : String(error);
  }
}

function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_resolve, reject) => {
    if (signal.aborted) reject(signal.reason);
    signal.addEventListener('abort', () => reject(signal.reason), { once: true });
  });
}
